"""`mooncake-pd autoscale simulate`: replay a metric series through Kthena's autoscaling
algorithm (mooncake_pd.autoscale) and print the replicas per role over time."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mooncake_pd import autoscale
from mooncake_pd.commands import SUMMARIES

SERIES_HELP = f"""\
The metric series (--series) holds one row per reconcile (Kthena reconciles every
{autoscale.SYNC_PERIOD_SECONDS} s), as CSV with a header row, or as JSON: a list of objects with the
same keys.

  time               seconds since the start, increasing (required)
  <role>/<metric>    the value Kthena would collect for that role's metric key (the
                     name in spec.metrics[] or roles.<role>.metrics[]): for a `pod`
                     metric source the SUM over the role's ready entry pods (Kthena
                     adds the pods' values up); for a `prometheus` source the query's
                     value. Empty (CSV) or null (JSON): not collected at that reconcile,
                     which makes Kthena skip the whole reconcile when no metric of a
                     role was collected.
  <role>/@unready    optional: pods of the role that exist but are not ready
A policy with one role (or a homogeneousTarget, whose unit is named `replicas`) also
takes bare `<metric>` and `@unready` columns.

Example (CSV):
  time,prefill/vllm:num_requests_waiting,decode/vllm:num_requests_running
  0,4,20
  15,30,22

The replicas written at one reconcile are read at the next. Each cell of the table is
"current->final" for that reconcile; "(desired N)" is the metric-derived count when the
final one differs (stabilization, rate limits, ratio constraint); "P" marks panic mode.
Errors exit 2 with one line naming the problem.
"""


def run(args: argparse.Namespace) -> int:
    spec = autoscale.find_policy_spec(_read(args.policy, "policy"), args.policy_name, args.key)
    policy = autoscale.policy_from_spec(spec)
    fmt = args.format or ("json" if args.series.suffix.lower() == ".json" else "csv")
    samples = autoscale.parse_series(policy, _read(args.series, "series"), fmt)
    ticks = autoscale.simulate(policy, samples, autoscale.parse_start(args.start), args.reconcile_ms)
    if args.json:
        print(json.dumps(autoscale.ticks_to_json(policy, ticks), indent=2))
    else:
        print(autoscale.table(policy, ticks))
    if args.plot:
        try:
            _plot(policy, ticks, args.plot)
        except ImportError:
            raise autoscale.AutoscaleError("--plot needs matplotlib (pip install matplotlib)") from None
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise autoscale.AutoscaleError(f"cannot read the {what} file {path}: {e.strerror}") from None


def _plot(policy: autoscale.Policy, ticks: list[autoscale.Tick], out: Path) -> None:
    """Replicas per role as steps (solid: written, dotted: metric-derived). matplotlib is
    imported here so that the command works without it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    times = [t.time for t in ticks]
    for i, role in enumerate(policy.roles):
        color = f"C{i}"
        ax.step(times, [t.roles[i].final for t in ticks], where="post", color=color, label=role.name)
        ax.step(times, [t.roles[i].desired for t in ticks], where="post", color=color, linestyle=":", alpha=0.7)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("replicas")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser(
        "autoscale",
        help=SUMMARIES["autoscale"],
        description="Offline tools for Kthena AutoscalingPolicies.",
    )
    commands = group.add_subparsers(dest="autoscale_command", required=True)
    sim = commands.add_parser(
        "simulate",
        help="replay a metric series through an AutoscalingPolicy and print the replicas per role",
        description="Replay a metric series through Kthena's autoscaling algorithm (volcano-sh/kthena "
        "@3cc0572: tolerance, stabilization windows, scale-up/-down limits per period, panic mode, "
        "min/max, ratio constraint) with the defaults that the API server and Kthena's mutating "
        "webhook give a policy, and print the replicas per role at each reconcile. Policies that "
        "Kthena's validating webhook refuses are refused.",
        epilog=SERIES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sim.add_argument(
        "policy",
        type=Path,
        help="YAML holding the policy: a rendered manifest stream (its AutoscalingPolicy), one "
        "AutoscalingPolicy, a bare AutoscalingPolicy spec, or a values-like file with --key",
    )
    sim.add_argument("--series", type=Path, required=True, help="the metric series, CSV or JSON (format below)")
    sim.add_argument(
        "--format", choices=("csv", "json"), help="format of --series (default: json for a .json file, else csv)"
    )
    sim.add_argument("--policy-name", help="which AutoscalingPolicy, when the file holds several")
    sim.add_argument(
        "--key",
        help="dot path to the policy spec in a values-like file (e.g. autoscaling.policy); the "
        "mapping there is the spec, or holds it under `spec`",
    )
    sim.add_argument(
        "--start",
        action="append",
        default=[],
        metavar="ROLE=N",
        help="replicas at the start (repeatable or comma-separated; default 1 per role, as Kthena "
        "reads an absent replicas field)",
    )
    sim.add_argument(
        "--reconcile-ms",
        type=int,
        default=10,
        metavar="MS",
        help="how long each reconcile takes (default 10): Kthena starts the next one a full period after "
        "the previous one returned, so reconcile i runs at its row's time + i * MS. With 0, rows exactly "
        "one period apart sit on the inclusive edge of Kthena's windows and limits span two reconciles",
    )
    sim.add_argument("--json", action="store_true", help="print JSON (every role's current/desired/final/mode)")
    sim.add_argument("--plot", type=Path, metavar="OUT.png", help="also draw the replicas over time (matplotlib)")
    sim.set_defaults(func=run, error_label="mooncake-pd autoscale")
