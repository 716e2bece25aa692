"""`mooncake-pd docs`: regenerate docs/values.md from the schema."""

from __future__ import annotations

import argparse
import sys

from mooncake_pd import docs, paths, values_file


def run(args: argparse.Namespace) -> int:
    page = docs.VALUES_PAGE
    current = page.read_text()
    wanted = docs.render_readme(current, docs.table(docs.load_schema(), docs.load_defaults()))
    if args.check:
        if current != wanted:
            print(f"{page.relative_to(paths.REPO)} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        values_file.write_atomic(page, wanted, backup=False)
        print(f"{page.relative_to(paths.REPO)} updated")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    doc = sub.add_parser(
        "docs",
        help="regenerate the values reference docs/values.md from chart/values.schema.json",
        description="Replace the table between the values-table markers in docs/values.md with one "
        "generated from the schema (types, descriptions) and chart/values.yaml (defaults).",
    )
    doc.add_argument("--check", action="store_true", help="only check; exit 1 when docs/values.md is stale")
    doc.set_defaults(func=run)
