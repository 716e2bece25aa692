"""A release's pods over time as a watch saw them (PodEvent): the bring-up and the rollout judged,
and Kthena's maxUnavailable in groups."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.growth import summary


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
