"""Output: the simulated reconciles as JSON or as a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mooncake_pd.autoscale.algorithm import Tick
from mooncake_pd.autoscale.policy import Policy


def ticks_to_json(policy: Policy, ticks: Sequence[Tick]) -> dict[str, Any]:
    return {
        "target": policy.target,
        "roles": [
            {"name": r.name, "minReplicas": r.min_replicas, "maxReplicas": r.max_replicas, "fixed": r.fixed}
            for r in policy.roles
        ],
        "ticks": [
            {
                "time": t.time,
                "skipped": t.skipped,
                "ratioAdjusted": t.ratio_adjusted,
                "roles": {
                    r.name: {"current": r.current, "desired": r.desired, "final": r.final, "mode": r.mode}
                    for r in t.roles
                },
            }
            for t in ticks
        ],
    }


def table(policy: Policy, ticks: Sequence[Tick]) -> str:
    """Columns: time, per role "current -> final" (and the metric-derived count when the final
    one differs, and a P in panic mode), and a note."""
    header = ["time_s", *[r.name for r in policy.roles], "note"]
    rows = [header]
    for t in ticks:
        cells = [f"{t.time:g}"]
        for r in t.roles:
            cell = f"{r.current}->{r.final}"
            if r.desired != r.final:
                cell += f" (desired {r.desired})"
            if r.mode == "Panic":
                cell += " P"
            cells.append(cell)
        note = t.skipped or ("ratio adjusted" if t.ratio_adjusted else "")
        rows.append([*cells, note])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
