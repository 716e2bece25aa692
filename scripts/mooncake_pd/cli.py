"""mooncake-pd: values from a model's config.json, render and validate the chart, docs and golden files.

Run `python -m mooncake_pd --help` (or `mooncake-pd --help` in the venv)."""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import sys
from pathlib import Path

import yaml

from mooncake_pd import (
    chartcheck,
    docs,
    engines,
    golden,
    helm,
    manifests,
    paths,
    summary,
    validate,
    values_file,
    verify,
)
from mooncake_pd import generate as gen
from mooncake_pd import model as modelmod

GENERATE_HELP = """\
Write a values file for a model from its config.json. The model files are never edited.

What comes from config.json:
  head_dim      when config.json lacks it (and the model is not MLA), model.hfOverrides.head_dim
                = hidden_size // num_attention_heads, passed as vllm serve --hf-overrides; this
                fixes "'Qwen2Config' object has no attribute 'head_dim'" on the decode side.
  MLA           kv_lora_rank present (DeepSeek-V2/V3/R1): model.mla true, no head_dim override.
  quantization  quant_model_description.json beside config.json (Ascend W8A8):
                engine.args.quantization ascend; a quantization_config gives a warning to check.
  max-model-len at most max_position_embeddings (above it only with --force).

Checks (exit 2, naming the option and the valid choices): num_attention_heads divisible by each
TP; prefill TP >= decode TP and a multiple of it (non-MLA); TP x DP per node within the
accelerator's devices per node; the KV cache holds at least max-model-len tokens per DP rank.

KV-cache estimate, printed as a table on stderr (estimated, not profiled):
  KV bytes/token/device = 2 x layers x ceil(KV heads / TP) (at least 1) x head_dim x dtype bytes;
                          MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes
  weights/device        = parameters counted from config.json x bytes per weight / TP
                          (routed experts / (TP x DP) with --enable-expert-parallel)
  KV memory/device      = HBM (64 GiB on A3 and A2) x gpu-memory-utilization - weights
                          - activations (estimated: 2 GiB + max-num-batched-tokens x hidden x 12 B)
  KV tokens per DP rank = KV memory / KV bytes per token; max-num-seqs is lowered until
                          max-num-seqs x max-model-len fits.
"""


def _render(args: argparse.Namespace) -> int:
    text = helm.template(args.helm, args.values, release=args.release, namespace=args.namespace)
    objects = manifests.parse(text)
    errors = validate.validate(objects)
    if errors:
        print("The rendered manifests are not valid:", *errors, sep="\n  ", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    values_file.write_atomic(args.out, text, backup=False)
    print(
        f"Wrote {args.out} ({len(objects)} objects, validated against Kubernetes "
        f"{' and '.join(validate.KUBERNETES_VERSIONS)} and the Kthena CRDs).\n"
    )
    print(summary.summarize(objects, engines.entry_runs(objects)))
    return 0


def _golden(args: argparse.Namespace) -> int:
    for path in golden.write_all(args.helm):
        print(f"wrote {path.relative_to(paths.REPO)}")
    return 0


def _docs(args: argparse.Namespace) -> int:
    readme = paths.REPO / "README.md"
    current = readme.read_text()
    wanted = docs.render_readme(current, docs.table(docs.load_schema(), docs.load_defaults()))
    if args.check:
        if current != wanted:
            print("README.md values table is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        values_file.write_atomic(readme, wanted, backup=False)
        print("README.md values table updated")
    return 0


def _role_topology(args: argparse.Namespace, role: str) -> gen.RoleTopology:
    return gen.RoleTopology(
        tensor=getattr(args, f"{role}_tp"),
        data=getattr(args, f"{role}_dp"),
        nodes=getattr(args, f"{role}_nodes"),
        replicas=getattr(args, f"{role}_replicas"),
    )


def command_lines(argv: list[str], width: int = 96) -> list[str]:
    """A command as shell lines continued with backslashes, an option and its value together."""
    words: list[str] = []
    for token in argv:
        if words and not token.startswith("-") and words[-1].startswith("-") and " " not in words[-1]:
            words[-1] += " " + shlex.quote(token)
        else:
            words.append(shlex.quote(token))
    lines, current = [], "  "
    for word in words:
        if len(current) + len(word) + 3 > width and current.strip():
            lines.append(current + " \\")
            current = "    "
        current += ("" if current.endswith("  ") else " ") + word
    return [*lines, current]


def header_command(text: str) -> list[str]:
    """The generating command recorded in a values file's header, as argv."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#   python -m mooncake_pd"))
    command = ""
    for line in lines[start:]:
        part = line.removeprefix("#").strip()
        command += " " + part.removesuffix("\\").strip()
        if not part.endswith("\\"):
            break
    return shlex.split(command)


def _device_memory(args: argparse.Namespace) -> float | None:
    if args.device_memory_gib:
        return args.device_memory_gib
    if args.accelerator == "nvidia":
        return gen.NVIDIA_GPUS[args.gpu]
    return None


def _generate(args: argparse.Namespace) -> int:
    model = modelmod.load(args.model_dir)
    name = model.path.parent.name
    roles = {role: _role_topology(args, role) for role in gen.ROLES}
    result = gen.generate(
        model,
        accelerator=args.accelerator,
        roles=roles,
        served_name=args.served_name or name,
        model_path=args.model_path or f"/models/{name}",
        max_model_len=args.max_model_len,
        image=args.image,
        expert_parallel=args.enable_expert_parallel,
        force=args.force,
        hbm_gib=_device_memory(args),
    )
    table = gen.fit_table(result.fits)
    title = f"{name}: {roles['prefill'].replicas}P{roles['decode'].replicas}D on {args.accelerator}"
    header = [title, "Generated by:", *command_lines(["python", "-m", "mooncake_pd", *args.argv]), ""]
    header += ["KV-cache estimate (mooncake_pd generate --help):", *table.splitlines()]
    header += [*result.notes, ""]
    text = values_file.dump_new(result.values, header)
    print(table, *result.notes, sep="\n", file=sys.stderr)
    if args.output:
        values_file.write_atomic(args.output, text, backup=True)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _update(args: argparse.Namespace) -> int:
    model = modelmod.load(args.model_dir)
    try:
        text = args.values_file.read_text()
        current = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as e:
        raise gen.GenerateError(f"{args.values_file}: cannot read it as YAML: {e}") from None
    keys, result = gen.derived(
        model, gen.merged(gen.chart_defaults(), current), force=args.force, hbm_gib=args.device_memory_gib
    )
    wanted = values_file.apply(text, keys)
    if wanted == text:
        print(f"{args.values_file}: up to date with {model.path}", file=sys.stderr)
        return 0
    diff = difflib.unified_diff(
        text.splitlines(keepends=True),
        wanted.splitlines(keepends=True),
        fromfile=str(args.values_file),
        tofile=f"{args.values_file} (from {model.path})",
    )
    if args.check:
        sys.stdout.writelines(diff)
        print(f"{args.values_file}: out of date: run `mooncake-pd update` without --check", file=sys.stderr)
        return 1
    saved = values_file.write_atomic(args.values_file, wanted, backup=True)
    sys.stdout.writelines(diff)
    print(f"updated {args.values_file} (previous version: {saved})", file=sys.stderr)
    for note in result.notes:
        print(note, file=sys.stderr)
    return 0


def _verify(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        print(f"... {line}", file=sys.stderr, flush=True)

    try:
        core, custom = verify.load_clients(args.context)
        snapshot = verify.collect(
            core,
            custom,
            args.release,
            args.namespace,
            url=args.url,
            model=args.model,
            log_wait=args.log_wait,
            timeout=args.timeout,
            progress=progress,
        )
    except verify.VerifyError as e:
        if args.json:
            print(json.dumps({"ok": False, "error": str(e)}))
        print(f"mooncake-pd verify: {e}", file=sys.stderr)
        return 2
    report = verify.assess(snapshot)
    if args.json:
        print(report.to_json())
    else:
        for check in report.checks:
            print(f"{'PASS' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
        for request, ms in report.transfers_ms.items():
            print(f"KV transfer for {request}: {', '.join(f'{v:g}' for v in ms)} ms (one line per worker)")
    return 0 if report.ok else 1


def _chartcheck(args: argparse.Namespace) -> int:
    problems = chartcheck.chart_yaml_problems()
    bump = chartcheck.version_bump_problem(base=args.base)
    problems += [bump] if bump else []
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mooncake-pd",
        description="Tooling for the mooncake-pd chart. Errors exit 2 (bad input) or 1 (invalid output).",
    )
    parser.add_argument(
        "--helm",
        type=Path,
        default=paths.helm_binary(),
        help="helm binary (default: the pinned helm 4 in .tools/helm; `make tools` installs it)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser(
        "render",
        help="render the chart, validate every object, write the manifests and print a summary",
        description="Render the chart (defaults plus any --values files), validate each object "
        "against the Kubernetes OpenAPI schemas and the Kthena CRDs, write it to --out, and print "
        "roles, replicas, devices per pod, ports, KV connector and proxy endpoint.",
    )
    render.add_argument(
        "--values", "-f", type=Path, action="append", default=[], help="values file (repeatable), as for helm"
    )
    render.add_argument(
        "--out",
        type=Path,
        default=Path("out/mooncake-pd.yaml"),
        help="where to write the manifests (default: out/mooncake-pd.yaml)",
    )
    render.add_argument("--release", default=paths.RELEASE, help=f"release name (default: {paths.RELEASE})")
    render.add_argument("--namespace", default=paths.NAMESPACE, help="namespace (default: default)")
    render.set_defaults(func=_render)

    gold = sub.add_parser(
        "golden",
        help="regenerate tests/golden/ from the chart defaults and every values/ file",
        description="Rewrite tests/golden/<case>.yaml for the defaults and each values/*.yaml. "
        "Read `git diff tests/golden` before committing.",
    )
    gold.set_defaults(func=_golden)

    doc = sub.add_parser(
        "docs",
        help="regenerate the README values table from chart/values.schema.json",
        description="Replace the table between the values-table markers in README.md with one "
        "generated from the schema (types, descriptions) and chart/values.yaml (defaults).",
    )
    doc.add_argument("--check", action="store_true", help="only check; exit 1 when README is stale")
    doc.set_defaults(func=_docs)

    ver = sub.add_parser(
        "verify",
        help="check a live release: pods ready, a chat request answered, KV-transfer log lines present",
        description="Find the release's ModelServing and pods, report readiness per role and serving "
        "group, send the guide's chat request through the proxy (port-forward) or --url, then read the "
        "prefill and decode logs since that request for the guide's markers: prefill 'Delaying free of "
        "N blocks for request <id>', decode 'KV cache transfer for request <id> took X ms' and a "
        "generation throughput above 0. Exit 0 when every check passes, 1 when one fails, 2 when "
        "there is no cluster, no release or no Kthena CRD.",
    )
    ver.add_argument("--release", required=True, help="helm release name")
    ver.add_argument("--namespace", "-n", default="default", help="namespace of the release (default: default)")
    ver.add_argument("--url", help="router base URL instead of a port-forward to the proxy (e.g. the Kthena router)")
    ver.add_argument("--model", help="model name to request (default: the ModelServing's served-model-name)")
    ver.add_argument("--context", help="kubeconfig context")
    ver.add_argument("--log-wait", type=float, default=60, help="seconds to wait for the log lines (default: 60)")
    ver.add_argument("--timeout", type=float, default=300, help="seconds for the test request (default: 300)")
    ver.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    ver.set_defaults(func=_verify)

    check = sub.add_parser(
        "chartcheck",
        help="check Chart.yaml and that a chart change bumps its version (as ct lint does)",
        description="Check Chart.yaml's fields and Artifact Hub annotations, and that commits which "
        "change chart/ since the branch left --base raise the chart version.",
    )
    check.add_argument("--base", default="main", help="target branch to compare with (default: main)")
    check.set_defaults(func=_chartcheck)

    generate = sub.add_parser(
        "generate",
        help="write a checked values file for a model from its config.json",
        description=GENERATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    generate.add_argument(
        "--model-dir",
        type=Path,
        required=True,
        help="model directory holding config.json (or the config.json itself)",
    )
    generate.add_argument(
        "--accelerator",
        choices=sorted(gen.ACCELERATORS),
        default="ascend-a3",
        help="accelerator profile (default: ascend-a3)",
    )
    generate.add_argument(
        "--gpu",
        choices=sorted(gen.NVIDIA_GPUS),
        default="h100",
        help="with --accelerator nvidia: the GPU, for its memory in the estimate (default: h100)",
    )
    generate.add_argument(
        "--device-memory-gib",
        type=float,
        metavar="GIB",
        help="device memory for the estimate, overriding the accelerator's (A3 and A2: 64)",
    )
    for role, tp, dp in (("prefill", 2, 4), ("decode", 2, 4)):
        generate.add_argument(
            f"--{role}-tp",
            type=int,
            default=tp,
            metavar="N",
            help=f"{role} tensor-parallel size (default: {tp})",
        )
        generate.add_argument(
            f"--{role}-dp",
            type=int,
            default=dp,
            metavar="N",
            help=f"{role} data-parallel size across its nodes (default: {dp})",
        )
        generate.add_argument(
            f"--{role}-nodes",
            type=int,
            default=1,
            metavar="N",
            help=f"nodes (pods) per {role} instance; more than 1 makes a multi-node role",
        )
        generate.add_argument(
            f"--{role}-replicas",
            type=int,
            default=1,
            metavar="N",
            help=f"{role} instances per serving group (default: 1)",
        )
    generate.add_argument("--served-name", help="model name clients request (default: the model directory's name)")
    generate.add_argument("--model-path", help="model directory inside the containers (default: /models/<name>)")
    generate.add_argument(
        "--max-model-len",
        type=int,
        metavar="N",
        help="context length (default: the chart's 40000, at most max_position_embeddings)",
    )
    generate.add_argument("--force", action="store_true", help="allow --max-model-len above max_position_embeddings")
    generate.add_argument("--image", help="engine image as repository:tag (default: vLLM-Ascend for the accelerator)")
    generate.add_argument(
        "--enable-expert-parallel",
        action="store_true",
        help="MoE models: vllm serve --enable-expert-parallel (experts sharded over TP x DP)",
    )
    generate.add_argument(
        "--output",
        "-o",
        type=Path,
        help="values file to write (atomically; an existing one is kept as .bak); default: stdout",
    )
    generate.set_defaults(func=_generate)

    update = sub.add_parser(
        "update",
        help="rewrite the model-derived keys of a values file, keeping comments and every other key",
        description="Recompute the keys a model decides (model.hfOverrides.head_dim, model.mla, "
        "engine.args.quantization, each role's args.max-num-seqs) for the topology the file "
        "describes, and rewrite only those, keeping comments, key order and all other keys. The "
        "file is replaced atomically and the previous version kept as <file>.bak.",
    )
    update.add_argument("values_file", type=Path, metavar="VALUES_FILE", help="the values file to update")
    update.add_argument("--model-dir", type=Path, required=True, help="model directory holding config.json")
    update.add_argument(
        "--check",
        action="store_true",
        help="change nothing: print the diff and exit 1 when the file is out of date (for CI)",
    )
    update.add_argument("--force", action="store_true", help="allow maxModelLen above max_position_embeddings")
    update.add_argument(
        "--device-memory-gib",
        type=float,
        metavar="GIB",
        help="device memory for the estimate (default: the accelerator's; NVIDIA: 80)",
    )
    update.set_defaults(func=_update)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except (modelmod.ModelError, gen.GenerateError) as e:
        print(f"mooncake-pd: {e}", file=sys.stderr)
        return 2
    except helm.HelmError as e:
        print(f"mooncake-pd: helm failed:\n{e}", file=sys.stderr)
        return 2
    except (validate.CrdsMissing, docs.DocsError) as e:
        print(f"mooncake-pd: {e}", file=sys.stderr)
        return 2
