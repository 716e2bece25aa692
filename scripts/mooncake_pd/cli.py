"""mooncake-pd: render and validate the chart, regenerate golden files.

Run `python -m mooncake_pd --help` (or `mooncake-pd --help` in the venv)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mooncake_pd import docs, engines, golden, helm, manifests, paths, summary, validate


def _render(args: argparse.Namespace) -> int:
    text = helm.template(args.helm, args.values, release=args.release, namespace=args.namespace)
    objects = manifests.parse(text)
    errors = validate.validate(objects)
    if errors:
        print("The rendered manifests are not valid:", *errors, sep="\n  ", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    print(
        f"Wrote {args.out} ({len(objects)} objects, validated against Kubernetes "
        f"{' and '.join(validate.KUBERNETES_VERSIONS)} and the Kthena CRDs).\n"
    )
    print(summary.summarize(objects, engines.entry_runs(objects)))
    return 0


def _golden(args: argparse.Namespace) -> int:
    for path in golden.write_all(args.helm):
        print(f"wrote {path.relative_to(paths.REPO)}")
    return 0


def _docs(args: argparse.Namespace) -> int:
    readme = paths.REPO / "README.md"
    current = readme.read_text()
    wanted = docs.render_readme(current, docs.table(docs.load_schema(), docs.load_defaults()))
    if args.check:
        if current != wanted:
            print("README.md values table is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        tmp = readme.with_suffix(".md.tmp")
        tmp.write_text(wanted)
        tmp.replace(readme)
        print("README.md values table updated")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mooncake-pd",
        description="Tooling for the mooncake-pd chart. Errors exit 2 (bad input) or 1 (invalid output).",
    )
    parser.add_argument(
        "--helm",
        type=Path,
        default=paths.helm_binary(),
        help="helm binary (default: the pinned helm 4 in .tools/helm; `make tools` installs it)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser(
        "render",
        help="render the chart, validate every object, write the manifests and print a summary",
        description="Render the chart (defaults plus any --values files), validate each object "
        "against the Kubernetes OpenAPI schemas and the Kthena CRDs, write it to --out, and print "
        "roles, replicas, devices per pod, ports, KV connector and proxy endpoint.",
    )
    render.add_argument(
        "--values", "-f", type=Path, action="append", default=[], help="values file (repeatable), as for helm"
    )
    render.add_argument(
        "--out",
        type=Path,
        default=Path("out/mooncake-pd.yaml"),
        help="where to write the manifests (default: out/mooncake-pd.yaml)",
    )
    render.add_argument("--release", default=paths.RELEASE, help=f"release name (default: {paths.RELEASE})")
    render.add_argument("--namespace", default=paths.NAMESPACE, help="namespace (default: default)")
    render.set_defaults(func=_render)

    gold = sub.add_parser(
        "golden",
        help="regenerate tests/golden/ from the chart defaults and every values/ file",
        description="Rewrite tests/golden/<case>.yaml for the defaults and each values/*.yaml. "
        "Read `git diff tests/golden` before committing.",
    )
    gold.set_defaults(func=_golden)

    doc = sub.add_parser(
        "docs",
        help="regenerate the README values table from chart/values.schema.json",
        description="Replace the table between the values-table markers in README.md with one "
        "generated from the schema (types, descriptions) and chart/values.yaml (defaults).",
    )
    doc.add_argument("--check", action="store_true", help="only check; exit 1 when README is stale")
    doc.set_defaults(func=_docs)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except helm.HelmError as e:
        print(f"mooncake-pd: helm failed:\n{e}", file=sys.stderr)
        return 2
    except (validate.CrdsMissing, docs.DocsError) as e:
        print(f"mooncake-pd: {e}", file=sys.stderr)
        return 2
