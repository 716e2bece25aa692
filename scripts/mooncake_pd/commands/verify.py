"""`mooncake-pd verify`: check a live release end to end."""

from __future__ import annotations

import argparse
import json
import os
import sys

from mooncake_pd import cli, release_io, verify
from mooncake_pd.commands import SUMMARIES


def run(args: argparse.Namespace) -> int:
    def progress(line: str) -> None:
        print(f"... {line}", file=sys.stderr, flush=True)

    try:
        core, custom = release_io.load_clients(args.context)
        snapshot = release_io.collect(
            core,
            custom,
            args.release,
            args.namespace,
            url=args.url,
            model=args.model,
            log_wait=args.log_wait,
            timeout=args.timeout,
            progress=progress,
            run_canary=not args.no_canary,
            api_key=os.environ.get(args.api_key_env, ""),
        )
    except verify.VerifyError as e:
        if args.json:  # the report CI reads says why there is none; cli.main prints the error
            print(json.dumps({"ok": False, "error": str(e)}))
        raise
    report = verify.assess(snapshot)
    if args.json:
        print(report.to_json())
    else:
        for check in report.checks:
            print(f"{'PASS' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
        for request, ms in report.transfers_ms.items():
            print(f"KV transfer for {request}: {', '.join(f'{v:g}' for v in ms)} ms (one line per worker)")
        for warning in report.warnings:
            print(f"WARN  {warning}")
    return 0 if report.ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    ver = sub.add_parser(
        "verify",
        help=SUMMARIES["verify"],
        description="Find the release's ModelServing and pods, report readiness per role and serving "
        "group, send the guide's chat request through the proxy (port-forward) or --url, then prove "
        "that its KV cache moved, as the release's connector shows it (the ModelServing's "
        "mooncake-pd/kv-connector annotation): vLLM-Ascend's MooncakeConnectorV1 by the log lines "
        "since that request (prefill 'Delaying free of N blocks for request <id>', decode 'KV "
        "cache transfer for request <id> took X ms' and a generation throughput above 0); "
        "NixlConnector and upstream MooncakeConnector, which log no line per request, by decode's "
        "/metrics before and after it (external prefix-cache hits rising by the prompt; on NIXL "
        "also one more transfer and none failed). Then the KV canary, per pair of prefill and decode "
        "entry pods (autoscaled ones too): verify sends a request through prefill to decode itself, "
        "through port-forwards, and passes the pair when decode's counters show its KV cache came "
        "over (chart/files/kv_canary.py, which the helm-test pod and the optional CronJob run). "
        "Exit 0 when every check passes, 1 when one fails, 2 when there is no cluster, no release "
        "or no Kthena CRD.",
        epilog="RBAC: get/list pods, get pods/log, get/create pods/portforward, get endpoints, list "
        "networkpolicies (for the known advisories' warnings), get/list "
        "modelservings in the release's namespace (examples/rbac/mooncake-pd-tool.yaml).",
    )
    cli.add_release_options(ver, required=True, what="the release to check")
    ver.add_argument("--url", help="router base URL instead of a port-forward to the proxy (e.g. the Kthena router)")
    ver.add_argument("--model", help="model name to request (default: the ModelServing's served-model-name)")
    ver.add_argument("--context", help="kubeconfig context")
    ver.add_argument("--log-wait", type=float, default=60, help="seconds to wait for the log lines (default: 60)")
    ver.add_argument("--timeout", type=float, default=300, help="seconds for the test request (default: 300)")
    ver.add_argument("--no-canary", action="store_true", help="skip the KV canary's per-pair requests")
    ver.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the engines' key (engine.apiKeySecret), sent as a bearer "
        "token with the test request and the canary's; unset or empty: no key (default: OPENAI_API_KEY)",
    )
    ver.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    ver.set_defaults(func=run, error_label="mooncake-pd verify")
