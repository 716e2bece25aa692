"""The fleet measurements' judgement (scripts/scale.py runs them, `make scale`; issue #41): pure
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# -- statistics ----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks (numpy's
    default, "linear"): of [1, 2, 3, 4] the 50th is 2.5. An empty sequence has none."""
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0-100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    """n, P50, P90, P99 and max of `values`, rounded to 0.01 ({"n": 0} for none)."""
    if not values:
        return {"n": 0}
    found = {f"p{q}": round(percentile(values, q), 2) for q in (50, 90, 99)}
    return {"n": len(values), **found, "max": round(max(values), 2)}


@dataclass(frozen=True)
class Fit:
    """time = coefficient x N ** exponent (least squares on log-log axes), and time = intercept
    + slope x N (least squares); r2 of each."""

    exponent: float
    coefficient: float
    r2_power: float
    slope: float
    intercept: float
    r2_linear: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """(slope, intercept, r2) of the line through (xs, ys) by least squares."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a fit needs at least two different sizes")
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for y in ys)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 if total == 0 else 1 - residual / total
    return slope, intercept, r2


def fit(sizes: Sequence[float], seconds: Sequence[float]) -> Fit:
    """How `seconds` grows with `sizes` (both positive, two different sizes at least)."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("a fit needs two points or more, one time per size")
    if any(v <= 0 for v in (*sizes, *seconds)):
        raise ValueError("sizes and times must be positive for a log-log fit")
    exponent, log_coefficient, r2_power = _least_squares([math.log(s) for s in sizes], [math.log(t) for t in seconds])
    slope, intercept, r2_linear = _least_squares(sizes, seconds)
    return Fit(exponent, math.exp(log_coefficient), r2_power, slope, intercept, r2_linear)


def local_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """The log-log slope between the two largest sizes: how the time grows where the run is
    largest. Kthena's client lets its first 10 requests through at once (client-go's token bucket,
    burst 10, then 5 a second), so the smallest sizes come up faster than the rate and a fit over
    all sizes reads steeper than the growth is."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("a slope needs two points or more, one time per size")
    (n1, t1), (n2, t2) = sorted(zip(sizes, seconds, strict=True))[-2:]
    if n1 == n2 or min(n1, n2, t1, t2) <= 0:
        raise ValueError("two different positive sizes with positive times")
    return math.log(t2 / t1) / math.log(n2 / n1)


def worse_than_linear(found: Fit, exponent_bound: float) -> bool:
    """The time grows faster than N ** exponent_bound (1.0: faster than linearly; a bound above
    1 leaves room for the noise of four points)."""
    return found.exponent > exponent_bound


# -- pods and serving groups ------------------------------------------------------------------


@dataclass(frozen=True)
class PodEvent:
    """What a watch of the release's pods saw of one pod at `t` (seconds on the run's clock):
    its serving group, role and Kthena revision; `serving`: Running and Ready; `terminating`:
    deletion requested (it may still serve until it is gone); `gone`: deleted."""

    t: float
    name: str
    group: str
    role: str
    revision: str
    serving: bool
    terminating: bool = False
    gone: bool = False
    node: str = ""


def first_serving(events: Iterable[PodEvent], since: float = 0.0) -> dict[str, float]:
    """Seconds from `since` to the first time each pod was seen serving, by pod name."""
    found: dict[str, float] = {}
    for e in events:
        if e.serving and not e.gone and e.name not in found:
            found[e.name] = max(0.0, e.t - since)
    return found


def first_seen(events: Iterable[PodEvent], since: float = 0.0, bound: bool = False) -> dict[str, float]:
    """Seconds from `since` to the first event of each pod (with `bound`: the first one that has
    it on a node), by pod name."""
    found: dict[str, float] = {}
    for e in events:
        if e.name not in found and not e.gone and (e.node or not bound):
            found[e.name] = max(0.0, e.t - since)
    return found


def rate(times: Iterable[float]) -> float | None:
    """Events per second between the first and the last of `times` (None: fewer than two, or
    all at once)."""
    ordered = sorted(times)
    if len(ordered) < 2 or ordered[-1] == ordered[0]:
        return None
    return (len(ordered) - 1) / (ordered[-1] - ordered[0])


@dataclass(frozen=True)
class BringUp:
    """A release's pods coming up: seconds from the apply to each pod made (seen first), bound
    to a node, serving, and to each group having every pod serving; `all_s`: the last of them
    (None: not every pod came)."""

    pods: dict[str, float]
    groups: dict[str, float]
    all_s: float | None
    missing_pods: int
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        made = rate(self.created.values())
        placed = rate(self.bound.values())
        return {
            "pods": summary(list(self.pods.values())),
            "groups": summary(list(self.groups.values())),
            "all_running_s": None if self.all_s is None else round(self.all_s, 2),
            "missing_pods": self.missing_pods,
            "created": summary(list(self.created.values())),
            "bound": summary(list(self.bound.values())),
            "pods_created_per_s": None if made is None else round(made, 2),
            "pods_bound_per_s": None if placed is None else round(placed, 2),
        }


def bring_up(events: Sequence[PodEvent], expected_pods: int, pods_per_group: int, since: float = 0.0) -> BringUp:
    """Judge a bring-up from the pods' events: a group's time is that of its last pod to serve,
    and counts only when all `pods_per_group` of its pods did."""
    pods = first_serving(events, since)
    group_of = {e.name: e.group for e in events}
    by_group: dict[str, list[float]] = {}
    for name, seconds in pods.items():
        by_group.setdefault(group_of[name], []).append(seconds)
    groups = {g: max(ts) for g, ts in by_group.items() if len(ts) >= pods_per_group}
    complete = len(pods) >= expected_pods
    return BringUp(
        pods,
        groups,
        max(pods.values()) if complete and pods else None,
        max(0, expected_pods - len(pods)),
        first_seen(events, since),
        first_seen(events, since, bound=True),
    )


@dataclass(frozen=True)
class Rollout:
    """A rollout judged from the pods' timeline: the most groups down at once and when, the groups
    seen serving two revisions together (with the first time), and when the fleet was whole again
    on the new revision (None: it was not)."""

    most_down: int
    most_down_at: float
    mixed: dict[str, float]
    done_s: float | None
    groups_updated: int
    down_series: list[tuple[float, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "most_groups_down": self.most_down,
            "most_down_at_s": round(self.most_down_at, 2),
            "groups_serving_two_revisions": sorted(self.mixed),
            "done_s": None if self.done_s is None else round(self.done_s, 2),
            "groups_updated": self.groups_updated,
        }


def rollout(
    initial: Sequence[PodEvent],
    events: Sequence[PodEvent],
    roles: Mapping[str, int],
    groups: int,
    new_revision: str,
    since: float = 0.0,
) -> Rollout:
    """Replay `events` over the pods of `initial` (what was there when the rollout began) and
    judge it. A group (a group-name label) is up while each role has its `roles[role]` pods
    serving and not terminating, all of one revision. Kthena v1.0.0 makes a rolled group again
    under a new ordinal, not its old one (scaleUpServingGroups creates from the largest ordinal
    + 1, model_serving_controller.go ~688), so groups down are `groups` minus the groups up, whatever
    their names. A group serves two revisions when its serving pods that are not terminating
    carry two revisions at once: Kthena v1.0.0's router routes to Running and Ready pods without
    a deletionTimestamp only (pkg/kthena-router/controller/modelserver_controller.go isPodReady,
    ~333). Done when `groups` groups are up on `new_revision`."""
    state: dict[str, PodEvent] = {e.name: e for e in initial if not e.gone}
    members: dict[str, set[str]] = {}
    for pod in state.values():
        members.setdefault(pod.group, set()).add(pod.name)

    def up(group: str) -> str | None:
        """The revision the group is up on, or None when it is down."""
        live = [state[n] for n in members.get(group, ()) if n in state]
        live = [p for p in live if p.serving and not p.terminating]
        revisions = {p.revision for p in live}
        if len(revisions) != 1:
            return None
        for role, count in roles.items():
            if sum(1 for p in live if p.role == role) < count:
                return None
        return next(iter(revisions))

    def two_revisions(group: str) -> bool:
        pods = [state[n] for n in members.get(group, ()) if n in state]
        return len({p.revision for p in pods if p.serving and not p.terminating}) > 1

    status = {g: up(g) for g in members}

    def down_now() -> int:
        return max(0, groups - sum(1 for s in status.values() if s is not None))

    def done_now() -> bool:
        return sum(1 for s in status.values() if s == new_revision) >= groups

    down = down_now()
    most, most_at = down, 0.0
    mixed: dict[str, float] = {}
    series = [(0.0, down)]
    done: float | None = 0.0 if done_now() else None
    for e in events:
        if e.gone:
            state.pop(e.name, None)
        else:
            state[e.name] = e
            members.setdefault(e.group, set()).add(e.name)
        status[e.group] = up(e.group)
        now = down_now()
        if now != down:
            down = now
            series.append((round(e.t - since, 3), down))
            if down > most:
                most, most_at = down, e.t - since
        if e.group not in mixed and two_revisions(e.group):
            mixed[e.group] = e.t - since
        if done is None and done_now():
            done = e.t - since
    updated = sum(1 for s in status.values() if s == new_revision)
    return Rollout(most, most_at, mixed, done, updated, series)


def max_unavailable(value: int | str, groups: int) -> int:
    """Kthena's maxUnavailable in groups: an int, or a percentage of the groups rounded down
    (utils.GetMaxUnavailable, intstr.GetScaledValueFromIntOrPercent(..., false) at v1.0.0)."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(\d+)%", value.strip())
    if not m:
        return int(value)
    return int(m[1]) * groups // 100


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
