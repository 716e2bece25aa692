"""`mooncake-pd docs`: regenerate docs/values.md from the schema."""

from __future__ import annotations

import argparse

from mooncake_pd import docs, values_file
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    current = docs.VALUES_PAGE.read_text()
    wanted = docs.render_readme(current, docs.table(docs.load_schema(), docs.load_defaults()))
    status = values_file.regenerate(docs.VALUES_PAGE, current, wanted, check=args.check, target="docs")
    current = docs.PROFILES_PAGE.read_text()
    wanted = docs.render_profiles_page(current)
    return max(status, values_file.regenerate(docs.PROFILES_PAGE, current, wanted, check=args.check, target="docs"))


def register(sub: argparse._SubParsersAction) -> None:
    doc = sub.add_parser(
        "docs",
        help=SUMMARIES["docs"],
        description="Replace the table between the values-table markers in docs/values.md with one "
        "generated from the schema (types, descriptions) and chart/values.yaml (defaults), and the "
        "profile table of docs/models-and-accelerators.md with one generated from chart/files/profiles.yaml.",
    )
    doc.add_argument("--check", action="store_true", help="only check; exit 1 when either page is stale")
    doc.set_defaults(func=run)
