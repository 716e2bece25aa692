"""`mooncake-pd generate`: a checked values file for a model from its config.json."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import NoReturn

from mooncake_pd import cli, estimate_options, header, paths, sizing, topology, values_file
from mooncake_pd import generate as gen
from mooncake_pd import model as modelmod
from mooncake_pd.commands import SUMMARIES

GENERATE_HELP = """\
Write a values file for a model from its config.json. The model files are never edited.

What comes from config.json:
  head_dim      not written: the engines' preflight derives it from the mounted model at start
                (hidden_size // num_attention_heads where config.json lacks head_dim), which
                fixes "'Qwen2Config' object has no attribute 'head_dim'". --fixed-head-dim writes
                model.hfOverrides.head_dim for setups that do not read config.json at start.
  MLA           kv_lora_rank present (DeepSeek-V2/V3/R1): model.mla true, no head_dim override.
  quantization  per accelerator family, as its engine reads it: quant_model_description.json
                beside config.json (msModelSlim W8A8/W4A8, Ascend): engine.args.quantization
                ascend, 1 byte per weight. quantization_config quant_method fp8 (DeepSeek-V3/R1
                as published): on NVIDIA 1 byte per weight; on Ascend refused (exit 2):
                vLLM-Ascend loads only compressed-tensors from config.json (use the BF16
                checkpoint or an msModelSlim W8A8 one). bits (AWQ, GPTQ): bits/8 per weight,
                NVIDIA only; another method: sized as torch_dtype, with a warning.
  max-model-len at most max_position_embeddings (above it only with --force).
  architecture  architectures[0], looked up in the architecture table (architectures.yaml beside
                the tool; docs/models-and-accelerators.md lists it): the kind of each layer, the
                MoE layout, and which engine versions run it on which accelerator. An engine
                version that does not run it is refused (exit 2), naming the versions and
                accelerators that do; experimental, untested or unrecorded support is a warning
                in the header. An architecture the table does not know is refused unless
                --architecture names a known one to estimate it as, or --kv-bytes-per-token and
                --weights-gib give the estimate's two figures.

Not from config.json: network.interface is auto (the interface of the default route, found when
the container starts) unless --interface names the node's NIC; the chart's own default,
enp23s0f3, is the guide's node and no other's.

Checks (exit 2, naming the option and the valid choices): num_attention_heads divisible by each
TP; the KV connector's rule between prefill and decode TP at the engine version
(chart/files/profiles.yaml tensorRule: on Ascend prefill TP >= decode TP and a multiple of it for
non-MLA models; NIXL on vLLM 0.13 decode TP a multiple of prefill TP, from 0.18 either dividing
the other; upstream Mooncake equal); TP x DP per node within the accelerator's devices per
node; the KV cache holds at least max-model-len tokens per DP rank.

KV-cache estimate, printed as a table on stderr (estimated, not profiled):
  KV bytes/token/device = 2 x layers x ceil(KV heads / TP) (at least 1) x head_dim x dtype bytes;
                          MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes;
                          counting the layers that keep every token: a sliding-window (gpt-oss)
                          or chunked-local (Llama 4) layer keeps at most its window of a
                          sequence where vLLM's hybrid KV cache manager runs under PD (v0.23.0
                          and later), every token where it does not; a linear-attention layer
                          (Qwen3-Next) holds a fixed state per sequence instead; the header's
                          notes say which
  weights/device        = parameters counted from config.json x bytes per weight / TP
                          (routed experts / (TP x DP) with --enable-expert-parallel)
  KV memory/device      = HBM (64 GiB on A3 and A2) x gpu-memory-utilization - weights
                          - activations (estimated: 2 GiB + max-num-batched-tokens x hidden x 12 B)
  KV tokens per DP rank = KV memory / KV bytes per token; it must hold one max-model-len
                          sequence (else exit 2)
  max-num-seqs          = the chart's (its values.yaml <role>.args.max-num-seqs), lowered to
                          KV tokens per DP rank // --expected-context-len where fewer sequences
                          of that length fit: sized for the requests a role expects, not as if
                          every sequence ran at max-model-len, which would leave decode a few
                          sequences and the cache mostly empty. The header and the notes say
                          what it assumed: "sized for N-token sequences; one max-model-len
                          sequence fits".

The file's header records the command, with --expected-context-len even where it was the
default; `mooncake-pd update` reads it back to recompute the same estimate.
"""


def _role_topology(args: argparse.Namespace, role: str) -> topology.RoleTopology:
    return topology.RoleTopology(
        tensor=getattr(args, f"{role}_tp"),
        data=getattr(args, f"{role}_dp"),
        nodes=getattr(args, f"{role}_nodes"),
        replicas=getattr(args, f"{role}_replicas"),
    )


class _RecordedParser(argparse.ArgumentParser):
    """generate's options, raising GenerateError where argparse would exit."""

    def error(self, message: str) -> NoReturn:
        raise topology.GenerateError(message)


def recorded_options(argv: list[str]) -> argparse.Namespace:
    """The options of a recorded generate command (its argv after its program), as
    generate parsed them; GenerateError where they do not parse or the command is another."""
    if cli.command_in(argv) != "generate":
        raise topology.GenerateError(f"{shlex.join(argv)}: not a generate command")
    index = argv.index("generate")
    parser = _RecordedParser(prog="mooncake-pd generate", add_help=False)
    add_options(parser)
    cli.add_common_options(parser, top=False)
    return parser.parse_args([*argv[:index], *argv[index + 1 :]])


def run(args: argparse.Namespace) -> int:
    hbm_gib = topology.device_memory(args.accelerator, args.gpu, args.device_memory_gib)
    model = modelmod.configure(
        modelmod.load(args.model_dir),
        architecture=args.architecture,
        kv_bytes_per_token=args.kv_bytes_per_token,
        weights_gib=args.weights_gib,
    )
    name = model.path.parent.name
    roles = {role: _role_topology(args, role) for role in topology.ROLES}
    result = gen.generate(
        model,
        accelerator=args.accelerator,
        roles=roles,
        served_name=args.served_name or name,
        model_path=args.model_path or f"/models/{name}",
        max_model_len=args.max_model_len,
        image=args.image,
        engine_version=args.engine_version,
        expert_parallel=args.enable_expert_parallel,
        force=args.force,
        hbm_gib=hbm_gib,
        fixed_head_dim=args.fixed_head_dim,
        context_len=args.expected_context_len,
        interface=args.interface,
        chart=args.chart,
    )
    table = sizing.fit_table(result.fits)
    title = f"{name}: {roles['prefill'].replicas}P{roles['decode'].replicas}D on {args.accelerator}"
    # The expected context length is recorded even where it was the default, so that `update`
    # sizes by the same length whatever default a later version has.
    argv = (
        args.argv
        if args.expected_context_len
        else header.with_option(args.argv, "--expected-context-len", result.context_len, takes_value=True)
    )
    schema = values_file.schema_ref(paths.chart_dir(args.chart), args.output)
    text = values_file.dump_new(result.values, header.lines(title, argv, table, result.notes), schema)
    # Hints suggest a choice (expert parallelism, a higher max-num-seqs) to the person at the
    # terminal; the header records the estimate and its notes, which update rewrites.
    print(table, *result.notes, *result.hints, sep="\n", file=sys.stderr)
    if args.output:
        values_file.write_atomic(args.output, text, backup=True)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    generate = sub.add_parser(
        "generate",
        help=SUMMARIES["generate"],
        description=GENERATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(generate)
    generate.set_defaults(func=run)


def add_options(generate: argparse.ArgumentParser) -> None:
    """generate's options (also how `update` reads the command a file's header records)."""
    generate.add_argument(
        "--model-dir",
        type=Path,
        required=True,
        help="model directory holding config.json (or the config.json itself)",
    )
    generate.add_argument(
        "--accelerator",
        choices=sorted(topology.ACCELERATORS),
        default="ascend-a3",
        help="accelerator profile (default: ascend-a3); the chart's cpu profile has no device memory "
        "to estimate, so its values are written by hand (values/qwen2.5-0.5b-instruct-cpu-1p1d.yaml)",
    )
    with_variants = sorted(name for name, a in topology.ACCELERATORS.items() if a.variants)
    generate.add_argument(
        "--gpu",
        choices=sorted({v for a in topology.ACCELERATORS.values() for v in a.variants}),
        default="h100",
        help=f"with --accelerator {' or '.join(with_variants)}: the device, for its memory in the estimate "
        "(default: h100; chart/files/profiles.yaml deviceVariants)",
    )
    generate.add_argument(
        "--device-memory-gib",
        type=cli.positive_float,
        metavar="GIB",
        help="device memory for the estimate, overriding the accelerator's (A3 and A2: 64)",
    )
    for role, tp, dp in (("prefill", 2, 4), ("decode", 2, 4)):
        generate.add_argument(
            f"--{role}-tp",
            type=cli.positive_int,
            default=tp,
            metavar="N",
            help=f"{role} tensor-parallel size (default: {tp})",
        )
        generate.add_argument(
            f"--{role}-dp",
            type=cli.positive_int,
            default=dp,
            metavar="N",
            help=f"{role} data-parallel size across its nodes (default: {dp})",
        )
        generate.add_argument(
            f"--{role}-nodes",
            type=cli.positive_int,
            default=1,
            metavar="N",
            help=f"nodes (pods) per {role} instance; more than 1 makes a multi-node role",
        )
        generate.add_argument(
            f"--{role}-replicas",
            type=cli.positive_int,
            default=1,
            metavar="N",
            help=f"{role} instances per serving group (default: 1)",
        )
    generate.add_argument("--served-name", help="model name clients request (default: the model directory's name)")
    generate.add_argument("--model-path", help="model directory inside the containers (default: /models/<name>)")
    generate.add_argument(
        "--max-model-len",
        type=cli.positive_int,
        metavar="N",
        help="context length (default: the chart's 40000, at most max_position_embeddings)",
    )
    generate.add_argument(
        "--expected-context-len",
        type=cli.positive_int,
        metavar="N",
        help=f"tokens (prompt plus output) a request is expected to reach, what max-num-seqs is sized by "
        f"(default: {sizing.DEFAULT_CONTEXT_LEN}, at most max-model-len: over three times the benchmark's "
        "1024-token prompts with 128-token answers, and above most chat and RAG requests; vLLM preempts and later "
        "recomputes a sequence when the KV cache runs out instead of failing it, so a burst of longer "
        "requests costs time, not errors; one max-model-len sequence always fits, checked)",
    )
    generate.add_argument(
        "--interface",
        default="auto",
        metavar="NAME",
        help="network.interface, the NIC of the HCCL, Gloo and TP sockets (NCCL and Gloo on NVIDIA) as "
        "`ip route | grep default` on the nodes shows it (default: auto, found from the default route when "
        "the container starts; the guide's node is enp23s0f3)",
    )
    generate.add_argument(
        "--fixed-head-dim",
        action="store_true",
        help="write model.hfOverrides.head_dim into the file; only for engine.preflight.checks.model false "
        "(by default the engines' preflight derives head_dim from the mounted model)",
    )
    generate.add_argument("--force", action="store_true", help="allow --max-model-len above max_position_embeddings")
    estimate_options.add(generate)
    generate.add_argument(
        "--image", help="engine image as repository:tag (default: the engine version's for the accelerator)"
    )
    generate.add_argument(
        "--engine-version",
        help="the vLLM(-Ascend) release the engines run, as engine.version (e.g. v0.23.0; default: the "
        "accelerator's, v0.13.0): its image, flags and rules (chart/files/profiles.yaml engines); "
        "docs/upgrading.md",
    )
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
