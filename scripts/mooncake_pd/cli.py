"""mooncake-pd: values from a model's config.json, render and validate the chart, verify a live
release, docs and golden files. Each command lives in mooncake_pd.commands.<name>.

Run `python -m mooncake_pd --help` (or `mooncake-pd --help` in the venv)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mooncake_pd import commands, docs, helm, paths, validate
from mooncake_pd import generate as gen
from mooncake_pd import model as modelmod


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mooncake-pd",
        description="Tooling for the mooncake-pd chart. Errors exit 2 (bad input) or 1 (invalid output).",
    )
    parser.add_argument(
        "--helm",
        type=Path,
        default=paths.helm_binary(),
        help="helm binary, a path or a name on PATH (default: the pinned helm 4 in .tools/helm; "
        "`make tools` installs it)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands.ALL:
        command.register(sub)
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
