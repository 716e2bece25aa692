"""`mooncake-pd golden`: regenerate tests/golden/ from the chart."""

from __future__ import annotations

import argparse

from mooncake_pd import golden, paths
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    for path in golden.write_all(args.helm):
        print(f"wrote {path.relative_to(paths.REPO)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    gold = sub.add_parser(
        "golden",
        help=SUMMARIES["golden"],
        description="Rewrite tests/golden/<case>.yaml for the defaults and each values/*.yaml. "
        "Read `git diff tests/golden` before committing.",
    )
    gold.set_defaults(func=run)
