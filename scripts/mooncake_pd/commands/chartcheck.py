"""`mooncake-pd chartcheck`: Chart.yaml fields and the version bump, as ct lint checks them."""

from __future__ import annotations

import argparse
import sys

from mooncake_pd import chartcheck
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    problems = chartcheck.chart_yaml_problems()
    bump = chartcheck.version_bump_problem(base=args.base)
    problems += [bump] if bump else []
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def register(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser(
        "chartcheck",
        help=SUMMARIES["chartcheck"],
        description="Check Chart.yaml's fields and Artifact Hub annotations, and that commits which "
        "change chart/ since the branch left --base raise the chart version.",
    )
    check.add_argument("--base", default="main", help="target branch to compare with (default: main)")
    check.set_defaults(func=run)
