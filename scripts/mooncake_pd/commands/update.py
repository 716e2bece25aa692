"""`mooncake-pd update`: rewrite the model-derived keys of a values file, keeping everything else."""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from mooncake_pd import cli, commands, estimate_options, header, helm, paths, sizing, topology, values_file
from mooncake_pd import model as modelmod
from mooncake_pd.commands import SUMMARIES

UPDATE_HELP = """\
Recompute the keys a model decides (model.mla, engine.args.quantization and trust-remote-code,
each role's args.max-num-seqs; a fixed model.hfOverrides.head_dim is removed, since the
preflight derives it at start, unless --fixed-head-dim) for the topology, max-model-len and
engine args the file describes, and rewrite only those, keeping comments, key order and all
other keys. The file is replaced atomically and the previous version kept as <file>.bak.

A file written by `generate` records its command in the header. update reads the inputs the file
does not hold from it (--gpu and --device-memory-gib, --expected-context-len, --fixed-head-dim,
--force) and estimates as generate did, so a file fresh from generate is up to date. max-num-seqs
is then recomputed, raised as well as lowered: the chart's (values.yaml) lowered to what the KV
cache holds at the expected context length. The header's KV-cache estimate (table and notes)
is rewritten; lines added there by hand, and every other comment, are kept. An option given here
overrides the recorded one and is written into the recorded command, so the next update keeps it.
Where the file's topology or max-model-len differs from the recorded command (edited by hand),
the estimate is for the file's, and stderr says so.

A --model-dir whose directory name differs (ignoring case) from the recorded --model-dir's gives
a warning naming both: the file was generated for another model (run generate for a new one).

--architecture, --kv-bytes-per-token and --weights-gib (an architecture the estimate does not
know) are read from the recorded command too, or given here.

A file without a recorded command (written by hand) is estimated as before: device memory of
the accelerator (or --gpu, --device-memory-gib), sequences of max-model-len tokens (or
--expected-context-len), and max-num-seqs only ever lowered from the file's own."""

# The update options that override a recorded generate option of the same name.
OVERRIDES = (
    "gpu",
    "device_memory_gib",
    "expected_context_len",
    "fixed_head_dim",
    "force",
    "architecture",
    "kv_bytes_per_token",
    "weights_gib",
)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def overridden(recorded: argparse.Namespace, args: argparse.Namespace) -> dict[str, Any]:
    """The recorded generate options that update's own options change: {name: new value}. A
    --gpu given here also drops a recorded --device-memory-gib (the device named wins)."""
    given = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name) is not None}
    if "gpu" in given:
        given.setdefault("device_memory_gib", None)
    return {name: value for name, value in given.items() if getattr(recorded, name) != value}


def model_name(model_dir: Path) -> str:
    """The model's name as generate takes it: the directory's, or the one holding a config file."""
    return model_dir.parent.name if model_dir.suffix == ".json" else model_dir.name


def mismatch(recorded_dir: Path, model: modelmod.Model, values_path: Path) -> str | None:
    """A warning where `model` is not the one the file was generated for (directory names differ)."""
    old, new = model_name(recorded_dir), model.path.parent.name
    if old.lower() == new.lower():
        return None
    return (
        f"WARNING: {model.path} is {new}, but {values_path} was generated for {old} (--model-dir {recorded_dir} "
        f"in its header): its model keys are recomputed for {new}; for another model, run generate"
    )


def file_differences(recorded: argparse.Namespace, effective: dict[str, Any], values_path: Path) -> list[str]:
    """Where the file (edited by hand) no longer says what its recorded command did: one line each."""
    pairs: list[tuple[str, Any, str, Any]] = [
        ("accelerator.type", effective["accelerator"]["type"], "--accelerator", recorded.accelerator)
    ]
    for role in topology.ROLES:
        v = effective[role]
        pairs += [
            (f"{role}.parallelism.tensor", v["parallelism"]["tensor"], f"--{role}-tp", getattr(recorded, f"{role}_tp")),
            (f"{role}.parallelism.data", v["parallelism"]["data"], f"--{role}-dp", getattr(recorded, f"{role}_dp")),
            (f"{role}.workerReplicas", v["workerReplicas"], f"--{role}-nodes", getattr(recorded, f"{role}_nodes") - 1),
        ]
    if recorded.max_model_len is not None:
        pairs.append(
            ("model.maxModelLen", effective["model"]["maxModelLen"], "--max-model-len", recorded.max_model_len)
        )
    expert = bool((effective["engine"].get("args") or {}).get("enable-expert-parallel"))
    pairs.append(
        ("engine.args.enable-expert-parallel", expert, "--enable-expert-parallel", recorded.enable_expert_parallel)
    )
    return [
        f"{values_path}: {key} is {ours}, but its header's command has {option} {theirs}: estimated for the file's"
        for key, ours, option, theirs in pairs
        if ours != theirs
    ]


def recorded_inputs(
    args: argparse.Namespace, command: list[str], effective: dict[str, Any]
) -> tuple[argparse.Namespace, argparse.Namespace, dict[str, Any]]:
    """From a recorded generate command (argv after its program, header.arguments): its options, the
    inputs of the estimate (update's own options over them) and what changed there, to record."""
    try:
        # generate's own parser reads its command (loaded here, on use, as the CLI loads commands).
        recorded = commands.load("generate").recorded_options(command)
    except topology.GenerateError as e:
        raise topology.GenerateError(
            f"{args.values_file}: the generate command in its header does not parse ({e}); correct it, or "
            "delete it to update the file as one written by hand"
        ) from None
    changed = overridden(recorded, args)
    if (changed.get("expected_context_len") or recorded.expected_context_len) is None:
        # Generated before the command recorded it: the default, recorded from now on.
        changed["expected_context_len"] = sizing.default_context_len(int(effective["model"]["maxModelLen"]))
    return recorded, argparse.Namespace(**{**vars(recorded), **changed}), changed


def run(args: argparse.Namespace) -> int:
    model = modelmod.load(args.model_dir)
    # Refused before anything is read from it: a duplicate key (helm keeps the last one, the
    # round trip below would stop at it), a tab in the indentation, or YAML the round trip cannot
    # read, each naming its line.
    text = values_file.check(args.values_file, strict=True)
    try:
        current = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{args.values_file}:{mark.line + 1}:{mark.column + 1}" if mark else str(args.values_file)
        problem = getattr(e, "problem", None) or e
        raise values_file.ValuesFileError(f"{where}: cannot read it as YAML ({problem}); correct it") from None
    if not isinstance(current, dict):
        raise values_file.ValuesFileError(
            f"{args.values_file}: a {type(current).__name__} at the top, not a mapping of values keys; "
            "give a values file"
        )
    defaults = values_file.chart_defaults(args.chart)
    effective = values_file.merged(defaults, current)
    kind = effective["accelerator"]["type"]
    if args.gpu and kind in topology.ACCELERATORS and not topology.ACCELERATORS[kind].variants:
        raise topology.GenerateError(f"--gpu {args.gpu}: accelerator.type {kind} has no device variants; drop --gpu")
    argv = header.command(text)
    changed: dict[str, Any] = {}
    warnings: list[str] = []
    if argv is None:
        # Written by hand: estimated as before this command read headers.
        inputs = argparse.Namespace(**{name: getattr(args, name) for name in OVERRIDES})
        caps = None
    else:
        recorded, inputs, changed = recorded_inputs(args, header.arguments(argv), effective)
        caps = sizing.seq_caps(defaults)
        warning = mismatch(recorded.model_dir, model, args.values_file)
        warnings = [*([warning] if warning else []), *file_differences(recorded, effective, args.values_file)]
    model = modelmod.configure(
        model,
        architecture=inputs.architecture,
        kv_bytes_per_token=inputs.kv_bytes_per_token,
        weights_gib=inputs.weights_gib,
    )
    # An architecture the estimate does not know stops here, before anything else is said.
    problem = model.unknown_problem()
    if problem:
        raise modelmod.ModelError(problem)
    for line in warnings:
        print(line, file=sys.stderr)
    keys, result = sizing.derived(
        model,
        effective,
        force=bool(inputs.force),
        hbm_gib=topology.device_memory(kind, inputs.gpu, inputs.device_memory_gib),
        fixed_head_dim=bool(inputs.fixed_head_dim),
        context_len=inputs.expected_context_len,
        caps=caps,
    )
    wanted = values_file.apply(text, keys)
    if argv is not None:
        wanted = header.with_estimate(wanted, sizing.fit_table(result.fits), result.notes)
        command = header.arguments(argv)
        for name, value in changed.items():
            takes_value = name not in ("fixed_head_dim", "force")
            command = header.with_option(command, _option(name), value, takes_value=takes_value)
        if changed:
            wanted = header.with_command(wanted, command)
    diff = list(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            fromfile=str(args.values_file),
            tofile=f"{args.values_file} (from {model.path})",
        )
    )
    if args.check:
        # Up to date with the model is not enough: a file the chart refuses (a parallelism the
        # connector cannot pair, a key the schema does not know) fails the check, naming why.
        refusal = chart_refusal(args, wanted)
        if diff:
            sys.stdout.writelines(diff)
            print(f"{args.values_file}: out of date: run `mooncake-pd update` without --check", file=sys.stderr)
        if refusal:
            updated = " once updated" if diff else ""
            print(f"{args.values_file}: the chart refuses it{updated}:\n{refusal}", file=sys.stderr)
        if diff or refusal:
            return 1
        print(f"{args.values_file}: up to date with {model.path}, and the chart renders it", file=sys.stderr)
        return 0
    if not diff:
        print(f"{args.values_file}: up to date with {model.path}", file=sys.stderr)
        return 0
    saved = values_file.write_atomic(args.values_file, wanted, backup=True)
    sys.stdout.writelines(diff)
    print(f"updated {args.values_file} (previous version: {saved})", file=sys.stderr)
    for note in [*result.notes, *result.hints]:
        print(note, file=sys.stderr)
    return 0


def chart_refusal(args: argparse.Namespace, text: str) -> str:
    """The chart's refusal of the values `text` (helm template with it, as `render` runs it), or
    "" where it renders."""
    binary = paths.require_helm(args.helm)
    with tempfile.TemporaryDirectory(prefix="mooncake-pd-update-") as folder:
        values = Path(folder) / "values.yaml"
        values.write_text(text)
        try:
            helm.template(binary, [values], chart=paths.chart_dir(args.chart))
        except helm.HelmError as e:
            return str(e).replace(str(values), str(args.values_file))
    return ""


def register(sub: argparse._SubParsersAction) -> None:
    update = sub.add_parser(
        "update",
        help=SUMMARIES["update"],
        description=UPDATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    update.add_argument("values_file", type=Path, metavar="VALUES_FILE", help="the values file to update")
    update.add_argument("--model-dir", type=Path, required=True, help="model directory holding config.json")
    update.add_argument(
        "--check",
        action="store_true",
        help="change nothing: exit 1 when the file is out of date (printing the diff) or when the chart refuses "
        "it as updated (printing the chart's refusal; needs helm, --helm); for CI",
    )
    update.add_argument(
        "--gpu",
        choices=sorted({v for a in topology.ACCELERATORS.values() for v in a.variants}),
        help="the device, for its memory in the estimate (accelerators with device variants: NVIDIA); "
        "default: the recorded --gpu, else h100",
    )
    update.add_argument(
        "--device-memory-gib",
        type=cli.positive_float,
        metavar="GIB",
        help="device memory for the estimate (default: the recorded one, else the --gpu's, else the "
        "accelerator's: 64 on A3 and A2)",
    )
    update.add_argument(
        "--expected-context-len",
        type=cli.positive_int,
        metavar="N",
        help="tokens a request is expected to reach, what max-num-seqs is sized by (default: the recorded "
        f"one, else {sizing.DEFAULT_CONTEXT_LEN} at most max-model-len; a file written by hand: max-model-len)",
    )
    update.add_argument(
        "--fixed-head-dim",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep model.hfOverrides.head_dim in the file; only for engine.preflight.checks.model false "
        "(default: the recorded choice; without one a fixed head_dim is removed, the preflight derives it)",
    )
    update.add_argument(
        "--force",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="allow maxModelLen above max_position_embeddings (default: the recorded choice)",
    )
    estimate_options.add(update, recorded=" (default: the recorded one)")
    update.set_defaults(func=run)
