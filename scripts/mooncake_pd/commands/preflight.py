"""`mooncake-pd preflight`: render the release and ask the user's own cluster, before `helm
install`, whether it admits, runs and fits it (mooncake_pd.clusterpreflight)."""

from __future__ import annotations

import argparse
import sys

from mooncake_pd import cli, clusterapi, clusterpreflight, helm, manifests, paths, valuekeys, vllmflags
from mooncake_pd.commands import SUMMARIES
from mooncake_pd.commands.render import check_values_files


def run(args: argparse.Namespace) -> int:
    chart = paths.chart_dir(args.chart)
    check_values_files(args.values)
    binary = paths.require_helm(args.helm)
    helm.check_supported(binary)
    try:
        text = helm.template(binary, args.values, chart=chart, release=args.release, namespace=args.namespace)
    except helm.HelmError as e:
        raise helm.HelmError(valuekeys.with_suggestions(vllmflags.with_suggestions(str(e)))) from None
    objects = manifests.parse(text)
    api = clusterapi.KubeApi(args.context)
    report = clusterpreflight.check(api, objects, args.namespace)
    if args.json:
        print(report.to_json())
    else:
        for note in report.notes:
            print(f"ok: {note}")
        if report.ok:
            print(f"preflight passed: release {args.release} in namespace {args.namespace} ({len(objects)} objects)")
        else:
            print(
                f"{len(report.findings)} finding(s); helm install would fail or its pods would not run:",
                file=sys.stderr,
            )
            for line in report.lines():
                print(line, file=sys.stderr)
    return 0 if report.ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    pre = sub.add_parser(
        "preflight",
        help=SUMMARIES["preflight"],
        description="Render the release as `helm install` will (the chart, --values, --release, -n) and ask "
        "the cluster of the kubeconfig, changing nothing: server-side dry-run (dryRun=All, "
        "fieldValidation=Strict) of every rendered object and of every Pod the controllers will create "
        "from the templates (Kthena from each role's entry and worker template, the proxy's Deployment, "
        "the Jobs), so Pod Security, ValidatingAdmissionPolicies, webhooks, ResourceQuotas and "
        "LimitRanges answer now; the CRDs the release needs (Kthena's, checked against kthena.version; "
        "Volcano's; the Prometheus Operator's where metrics enable them), the Volcano queue and a "
        "scheduler of the pods' schedulerName; nodes advertising the accelerator's device resource, "
        "whether one serving group's pods (Volcano places all or none) fit the nodes' free allocatable "
        "now and how many groups do, and the namespace's quotas against all of the release's pods. "
        "Prints every finding as `key: problem; fix`. Exit 0 when there is none, 1 when there is one, "
        "2 for bad input or no cluster. The namespace must exist (its labels decide Pod Security).",
        epilog="RBAC: examples/rbac/mooncake-pd-preflight.yaml (a ClusterRole: get/list nodes, pods, "
        "namespaces, CRDs and Volcano queues; patch, which dryRun=All never stores, on every kind the chart "
        "renders and on pods, in the release's namespace).",
    )
    # Kept as given (not a Path): helm fetches a URL itself.
    pre.add_argument(
        "--values",
        "-f",
        action="append",
        default=[],
        metavar="FILE",
        help="values file (repeatable, the last wins), as for helm install: a path, a URL or - for stdin",
    )
    cli.add_release_options(pre, required=True, what="the release helm install will create")
    pre.add_argument("--context", help="kubeconfig context")
    pre.add_argument(
        "--json", action="store_true", help="print the report as JSON (for CI or an Argo CD pre-sync hook)"
    )
    pre.set_defaults(func=run, error_label="mooncake-pd preflight")
