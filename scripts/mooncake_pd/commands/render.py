"""`mooncake-pd render`: render the chart, validate every object, write the manifests, summarise."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mooncake_pd import advisories, cli, engines, helm, manifests, paths, summary, valuekeys, values_file, vllmflags
from mooncake_pd.commands import SUMMARIES


def _helm_origin(binary: Path, given: str) -> str:
    """Where the helm in use comes from, for the summary line: the pinned download, $HELM, the
    --helm given, or the `helm` on PATH (a tool installed outside a checkout has no pinned one)."""
    if binary.resolve().is_relative_to(paths.TOOLS_DIR.resolve()):
        return f"the pinned download, {binary}"
    if os.environ.get("HELM") and given == os.environ["HELM"]:
        return f"HELM={binary}, not the pinned download"
    if given == "helm":
        return f"{binary}, the helm on PATH"
    return f"--helm {binary}, not the pinned download"


def is_remote(given: str) -> bool:
    """A -f that helm fetches itself (a URL) or reads from stdin (`-`), not a file here."""
    return given == "-" or "://" in given


def check_values_files(given: list[str]) -> None:
    """Refuse, before helm runs, the local values files helm would misread silently (a duplicate
    key: it keeps the last) or refuse with a bare YAML error (a tab in the indentation), naming
    file and line; values_file.ValuesFileError with every problem of every file."""
    found: list[str] = []
    for name in given:
        if is_remote(name):
            continue
        path = Path(name)
        if not path.is_file():
            found.append(f"{name}: no such file; give -f a values file (a path, a URL or - for stdin)")
            continue
        try:
            values_file.check(path, strict=False)
        except values_file.ValuesFileError as e:
            found.append(str(e))
    if found:
        raise values_file.ValuesFileError("\n".join(found))


def run(args: argparse.Namespace) -> int:
    # Imported here: the validators (jsonschema, kubernetes-validate, CEL) take half a second to
    # import, which every other command would pay at start.
    from mooncake_pd import validate

    chart = paths.chart_dir(args.chart)
    check_values_files(args.values)
    binary = paths.require_helm(args.helm)
    helm_version = helm.check_supported(binary)
    try:
        text = helm.template(binary, args.values, chart=chart, release=args.release, namespace=args.namespace)
    except helm.HelmError as e:
        raise helm.HelmError(valuekeys.with_suggestions(vllmflags.with_suggestions(str(e)))) from None
    objects = manifests.parse(text)
    errors = validate.validate(objects)
    if errors:
        print("The rendered manifests are not valid:", *errors, sep="\n  ", file=sys.stderr)
        return 1
    accepted: list[str] = []
    if args.engine_check is not None:
        from mooncake_pd import enginecheck

        version = enginecheck.engine_version(objects)
        python = enginecheck.python_for(args.engine_check, version)
        outcome = enginecheck.check(objects, python)
        if outcome.refusals:
            print(
                f"vLLM {version.lstrip('v')} ({python}) refuses the engines' arguments:",
                *outcome.refusals,
                sep="\n  ",
                file=sys.stderr,
            )
            return 1
        accepted = outcome.accepted
    args.out.parent.mkdir(parents=True, exist_ok=True)
    values_file.write_atomic(args.out, text, backup=False)
    print(
        f"Wrote {args.out} ({len(objects)} objects, rendered with helm {helm_version} "
        f"({_helm_origin(binary, str(args.helm))}), validated against Kubernetes "
        f"{' and '.join(validate.KUBERNETES_VERSIONS)} and the Kthena CRDs).\n"
    )
    print(summary.summarize(objects, engines.entry_runs(objects)))
    if accepted:
        print("\nThe engine check (vLLM's own parser and config checks, --engine-check):", *accepted, sep="\n  ")
    # Known advisories of the deployed parts (scripts/mooncake_pd/advisories.yaml) that this
    # layout leaves reachable: a warning, not a refusal, since the guide's own deployment (v0.13.0
    # on the host network) is one of them and no engine version the chart offers is past every fix.
    warnings = advisories.problems_from_objects(objects)
    if warnings:
        print(
            "\nKnown advisories this deployment leaves reachable (docs/security.md):",
            *warnings,
            sep="\n  - ",
            file=sys.stderr,
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    render = sub.add_parser(
        "render",
        help=SUMMARIES["render"],
        description="Render the chart (defaults plus any --values files), validate each object "
        "against the Kubernetes OpenAPI schemas and the Kthena CRDs, write it to --out, and print "
        "roles, replicas, devices per pod, ports, KV connector and proxy endpoint.",
    )
    # Kept as given (not a Path, which would fold a URL's `//`): helm fetches a URL itself.
    render.add_argument(
        "--values",
        "-f",
        action="append",
        default=[],
        metavar="FILE",
        help="values file (repeatable, the last wins), as for helm: a path, a URL or - for stdin; a local file "
        "with a duplicate key or a tab in its indentation is refused, naming the line",
    )
    render.add_argument(
        "--out",
        type=Path,
        default=Path("out/mooncake-pd.yaml"),
        help="where to write the manifests (default: out/mooncake-pd.yaml)",
    )
    render.add_argument(
        "--engine-check",
        nargs="?",
        const="",
        default=None,
        metavar="PYTHON",
        help="also run each engine start script's engine check as a pod would: that vLLM's own parser and "
        "config checks on the exact `vllm serve` argv, refusing with the values key; with PYTHON (a python or a "
        "venv with the values' vLLM version), or without it the venv of that version here (.tools/e2e for "
        "0.13.0). About 6 s of CPU per start script",
    )
    cli.add_release_options(render, default=paths.RELEASE, what="the name the objects are rendered under")
    render.set_defaults(func=run)
