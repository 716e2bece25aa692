"""`mooncake-pd schema`: write the machine-derived parts of chart/values.schema.json."""

from __future__ import annotations

import argparse
import json

from mooncake_pd import schemagen, values_file
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    path = schemagen.schema_path()
    current = path.read_text()
    wanted = schemagen.dump(schemagen.generate(json.loads(current)))
    return values_file.regenerate(path, current, wanted, check=args.check, target="schema")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "schema",
        help=SUMMARIES["schema"],
        description=schemagen.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when the schema is stale")
    parser.set_defaults(func=run)
