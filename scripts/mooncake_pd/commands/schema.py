"""`mooncake-pd schema`: write the machine-derived parts of chart/values.schema.json."""

from __future__ import annotations

import argparse
import json
import sys

from mooncake_pd import paths, schemagen, values_file


def run(args: argparse.Namespace) -> int:
    path = schemagen.schema_path()
    current = path.read_text()
    wanted = schemagen.dump(schemagen.generate(json.loads(current)))
    if args.check:
        if current != wanted:
            print(f"{path.relative_to(paths.REPO)} is stale: run `make schema`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        values_file.write_atomic(path, wanted, backup=False)
        print(f"{path.relative_to(paths.REPO)} updated")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "schema",
        help="type the chart's pass-through Kubernetes fields in values.schema.json (Kubernetes 1.27)",
        description=schemagen.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when the schema is stale")
    parser.set_defaults(func=run)
