"""`mooncake-pd schema`: write the machine-derived parts of chart/values.schema.json; with
--openapi, first extract Kubernetes' definitions again from upstream (mooncake_pd.kubeopenapi)."""

from __future__ import annotations

import argparse
import json
import sys

from mooncake_pd import kubeopenapi, paths, schemagen, values_file
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    failed = 0
    if args.openapi:
        failed = _extract(check=args.check)
    path = schemagen.schema_path()
    current = path.read_text()
    wanted = schemagen.dump(schemagen.generate(json.loads(current)))
    return values_file.regenerate(path, current, wanted, check=args.check, target="schema") or failed


def _extract(*, check: bool) -> int:
    """The vendored extract brought up to date from upstream (with check, only reported)."""
    path = kubeopenapi.EXTRACT
    shown = path.relative_to(paths.REPO) if path.is_relative_to(paths.REPO) else path
    current = path.read_text() if path.is_file() else ""
    wanted = kubeopenapi.dump(kubeopenapi.extract(kubeopenapi.download().read_text(), schemagen.kubernetes_roots()))
    if current == wanted:
        return 0
    if check:
        print(f"{shown} is stale: run `mooncake-pd schema --openapi`", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    values_file.write_atomic(path, wanted, backup=False)
    kubeopenapi.vendored.cache_clear()
    print(f"{shown} updated")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "schema",
        help=SUMMARIES["schema"],
        description=schemagen.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when the schema is stale")
    parser.add_argument(
        "--openapi",
        action="store_true",
        help=f"first extract the Kubernetes definitions again from kubernetes {kubeopenapi.VERSION}'s "
        f"{kubeopenapi.UPSTREAM_FILE} (the Go module {kubeopenapi.MODULE}; go downloads it when its "
        f"module cache lacks it) into scripts/mooncake_pd/openapi/",
    )
    parser.set_defaults(func=run)
