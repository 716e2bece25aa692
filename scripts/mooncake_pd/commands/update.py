"""`mooncake-pd update`: rewrite the model-derived keys of a values file, keeping everything else."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

import yaml

from mooncake_pd import generate as gen
from mooncake_pd import model as modelmod
from mooncake_pd import values_file
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    model = modelmod.load(args.model_dir)
    try:
        text = args.values_file.read_text()
        current = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as e:
        raise gen.GenerateError(f"{args.values_file}: cannot read it as YAML: {e}") from None
    keys, result = gen.derived(
        model,
        gen.merged(gen.chart_defaults(args.chart), current),
        force=args.force,
        hbm_gib=args.device_memory_gib,
        fixed_head_dim=args.fixed_head_dim,
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


def register(sub: argparse._SubParsersAction) -> None:
    update = sub.add_parser(
        "update",
        help=SUMMARIES["update"],
        description="Recompute the keys a model decides (model.mla, engine.args.quantization, each "
        "role's args.max-num-seqs; a fixed model.hfOverrides.head_dim is removed, since the preflight "
        "derives it at start, unless --fixed-head-dim) for the topology the file "
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
    update.add_argument(
        "--fixed-head-dim",
        action="store_true",
        help="keep model.hfOverrides.head_dim in the file; only for engine.preflight.checks.model false "
        "(by default a fixed head_dim is removed: the preflight derives it at start)",
    )
    update.add_argument("--force", action="store_true", help="allow maxModelLen above max_position_embeddings")
    update.add_argument(
        "--device-memory-gib",
        type=float,
        metavar="GIB",
        help="device memory for the estimate (default: the accelerator's; NVIDIA: 80)",
    )
    update.set_defaults(func=run)
