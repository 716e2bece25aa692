"""The fleet measurements' judgement (harness/scale.py runs them, `make scale`; issue #41): pure
functions over what the run saw, so each can be tested on made-up timelines.

- percentiles of the seconds each pod and each serving group took to run;
- a least-squares fit of how the time grows with the number of serving groups (a power law on
  log-log axes, and a line), and whether it grows faster than linearly;
- a rollout judged from the pods' timeline: the most serving groups down at once (never above
  maxUnavailable) and any group that served prefill and decode of two revisions together;
- autoscaling judged from the replicas the autoscaler wrote: each step, and the P:D ratio at each;
- a fleet short of capacity: the groups partly placed and the devices they hold;
- the bounds table of docs/scale.md, and what of a run breaks it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# -- statistics ----------------------------------------------------------------------------------


# -- pods and serving groups ------------------------------------------------------------------


# -- autoscaling ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replicas:
    """The role replicas the ModelServing's spec held at `t` (what the autoscaler wrote), and the
    pods of each role serving then."""

    t: float
    prefill: int
    decode: int
    prefill_serving: int = 0
    decode_serving: int = 0


@dataclass(frozen=True)
class Step:
    """One change of the replicas the autoscaler wrote: from and to (prefill, decode), when
    (seconds on the phase's clock), the seconds since the previous change (or the phase's
    start), and the seconds until the pods of the new count all served (None: not seen)."""

    at: float
    before: tuple[int, int]
    after: tuple[int, int]
    since_previous_s: float
    settled_s: float | None
    ratio: float
    within: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at, 2),
            "prefill": [self.before[0], self.after[0]],
            "decode": [self.before[1], self.after[1]],
            "since_previous_s": round(self.since_previous_s, 2),
            "pods_serving_after_s": None if self.settled_s is None else round(self.settled_s, 2),
            "ratio": round(self.ratio, 3),
            "within_bounds": self.within,
        }


def ratio_within(prefill: int, decode: int, low: float, high: float) -> bool:
    """prefill / decode inside [low, high] (a small tolerance for the thousandths the chart
    rounds the band to); no decode replica is outside any band."""
    if decode <= 0:
        return False
    ratio = prefill / decode
    return low - 1e-9 <= ratio <= high + 1e-9


def steps(observed: Sequence[Replicas], low: float, high: float, start: float = 0.0) -> list[Step]:
    """The steps of an autoscaling run from what was observed (in time order): each change of the
    written replicas, its ratio checked against [low, high], and when its pods all served."""
    found: list[Step] = []
    if not observed:
        return found
    previous = (observed[0].prefill, observed[0].decode)
    last_change = start
    for i, seen in enumerate(observed):
        now = (seen.prefill, seen.decode)
        if now == previous:
            continue
        settled = next(
            (
                later.t - seen.t
                for later in observed[i:]
                if (later.prefill, later.decode) == now
                and later.prefill_serving == now[0]
                and later.decode_serving == now[1]
            ),
            None,
        )
        found.append(
            Step(
                seen.t,
                previous,
                now,
                seen.t - last_change,
                settled,
                now[0] / now[1] if now[1] else math.inf,
                ratio_within(now[0], now[1], low, high),
            )
        )
        previous, last_change = now, seen.t
    return found


def ratio_violations(observed: Sequence[Replicas], low: float, high: float) -> list[Replicas]:
    """Every observation whose written replicas leave the P:D ratio band."""
    return [o for o in observed if not ratio_within(o.prefill, o.decode, low, high)]


# -- short of capacity -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Serving groups on a fleet without room for all: how many groups have all, some or none of
    their pods bound to a node, and the devices the partly placed ones hold (bound pods of groups
    that cannot serve)."""

    complete: int
    partial: int
    unplaced: int
    held_devices: int
    bound_pods: int
    pending_pods: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def placement(pods: Sequence[Mapping[str, Any]], pods_per_group: int) -> Placement:
    """`pods`: each {"group", "bound" (bool), "devices"} (every pod of every group)."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        by_group.setdefault(str(pod["group"]), []).append(pod)
    complete = partial = unplaced = held = 0
    for members in by_group.values():
        bound = [p for p in members if p["bound"]]
        if len(bound) >= pods_per_group and len(members) >= pods_per_group:
            complete += 1
        elif bound:
            partial += 1
            held += sum(int(p["devices"]) for p in bound)
        else:
            unplaced += 1
    bound_pods = sum(1 for p in pods if p["bound"])
    return Placement(complete, partial, unplaced, held, bound_pods, len(pods) - bound_pods)


# -- metrics text ----------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def requests_by_verb_resource(metrics_text: str) -> dict[str, float]:
    """kube-apiserver's apiserver_request_total summed by "VERB resource[/subresource]" (all
    codes, groups and scopes together)."""
    found: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m["labels"] or ""))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '?')} {resource}"
        found[key] = found.get(key, 0.0) + float(m["value"])
    return found


def difference(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, int]:
    """after - before per key, the keys that grew only, largest first."""
    grown = {k: int(v - before.get(k, 0.0)) for k, v in after.items() if v - before.get(k, 0.0) > 0}
    return dict(sorted(grown.items(), key=lambda kv: (-kv[1], kv[0])))


# -- bounds ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """A figure's documented most: `full` for `make scale`, `quick` for `make scale QUICK=1`."""

    full: float
    quick: float


_ROW = re.compile(r"^\| `(?P<name>[a-z0-9-]+)` \|.*\| (?P<full>-?\d+(?:\.\d+)?) \| (?P<quick>-?\d+(?:\.\d+)?) \|$")


def bounds(text: str) -> dict[str, Bound]:
    """The bounds table of docs/scale.md: rows whose first column is a figure's name in backticks
    and whose last two columns are its most, in full and in quick runs."""
    found = {}
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if m:
            found[m["name"]] = Bound(float(m["full"]), float(m["quick"]))
    return found


def read_bounds(doc: Path) -> dict[str, Bound]:
    return bounds(doc.read_text())


def broken(figures: Mapping[str, float | None], limits: Mapping[str, Bound], quick: bool) -> list[str]:
    """What breaks a bound: a figure above its most, or a bounded figure the run did not measure
    (None), named with both; figures without a bound are not judged."""
    problems = []
    for name, bound in limits.items():
        most = bound.quick if quick else bound.full
        if name not in figures:
            continue
        value = figures[name]
        if value is None:
            problems.append(f"{name}: not measured (documented at most {most:g})")
        elif value > most:
            problems.append(f"{name}: {value:g}, documented at most {most:g}")
    return problems
