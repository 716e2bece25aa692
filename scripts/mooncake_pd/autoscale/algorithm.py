"""The algorithm: recommendation, correction, ratio enforcement, one reconcile (`step`) and the
replay of a series (`simulate`). Citations are `file:lines` of volcano-sh/kthena@3cc0572,
abbreviated as listed in mooncake_pd.autoscale."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mooncake_pd.autoscale.policy import AutoscaleError, Behavior, Policy, RatioConstraint, Role
from mooncake_pd.autoscale.samples import Sample
from mooncake_pd.autoscale.window import RoleState, initial_state

# Kthena's reconcile period (pkg/autoscaler/util/settings.go:20; the chart's
# controllerManager.autoscalingSyncPeriodSeconds overrides it).
SYNC_PERIOD_SECONDS = 15
# Kthena stamps windows with wall-clock milliseconds and uses 0 as "never" (status:54,
# window:143-151); simulated time is shifted by this so that t=0 is not mistaken for "never".
EPOCH_MS = 1_000_000_000_000
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


def _div(a: float, b: float) -> float:
    """Go float64 division: x/0 is ±Inf, 0/0 NaN."""
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def _ceil_instances(value: float) -> int:
    """recommendation:160-170 (Go turns -Inf into a negative int32, then max(0, .))."""
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return 1_000_000_000 if value > 0 else 0
    value = math.ceil(value)
    return max(0, int(value)) if value < 1_000_000_000 else 1_000_000_000


def _direction(ratio: float) -> int:
    return 1 if ratio >= 1.0 else -1  # recommendation:152-158


def _external_desired(current: int, tolerance: float, target: float, metric: float) -> int:
    """recommendation:86-98: desired = metric / target; inside the tolerance band of the
    current count, keep it."""
    desired = metric / target
    ratio = _div(desired, float(current))
    if abs(ratio - 1.0) <= tolerance:
        return current
    return _ceil_instances(desired)


def _instance_desired(
    current: int, tolerance: float, name: str, target: float, unready: int, ready: Sequence[Mapping[str, float]]
) -> int | None:
    """recommendation:100-150. Kthena passes one pre-summed "instance" (scaler:121), so the ratio
    is sum/target and the tolerance band is around 1, not around the current count."""
    total, missing, count = 0.0, 0, 0
    for instance in ready:
        if name in instance:
            count += 1
            total += instance[name]
        else:
            missing += 1
    if count == 0:
        return None
    ratio = total / count / target
    add_unready = unready > 0 and _direction(ratio) > 0
    if not add_unready and missing == 0:
        if abs(ratio - 1.0) <= tolerance:
            return current
        return _ceil_instances(ratio * count)
    count += missing
    if _direction(ratio) < 0:
        total += missing * target
    if add_unready:
        count += unready
    new_ratio = total / count / target
    if abs(new_ratio - 1.0) <= tolerance or _direction(ratio) != _direction(new_ratio):
        return current
    desired = _ceil_instances(new_ratio * count)
    if (_direction(new_ratio) < 0 and desired > current) or (_direction(new_ratio) > 0 and desired < current):
        return current
    return desired


def recommend(
    role: Role, current: int, tolerance_percent: int, values: Mapping[str, float], unready: int
) -> int | None:
    """GetRecommendedInstances (recommendation:38-75): None when no metric was collected
    (Kthena then skips the cycle). Pod-sourced values are the per-role sums (collector:339)."""
    if current < role.min_replicas:
        return role.min_replicas
    if current > role.max_replicas:
        return role.max_replicas
    tolerance = tolerance_percent * 0.01  # scaler:118
    ready = {m.name: values[m.name] for m in role.metrics if m.source == "pod" and m.name in values}
    recommended: int | None = None
    for m in role.metrics:
        if m.source == "prometheus" and m.name in values:
            desired: int | None = _external_desired(current, tolerance, m.target, values[m.name])
        else:
            desired = _instance_desired(current, tolerance, m.name, m.target, unready, [ready])
        if desired is not None:  # updateRecommendation (recommendation:77-84): the largest wins
            recommended = desired if recommended is None else max(recommended, desired)
    if recommended is None:
        return None
    return min(max(recommended, role.min_replicas), role.max_replicas)


def correct(
    behavior: Behavior, state: RoleState, now: int, panic: bool, role: Role, current: int, recommended: int
) -> int:
    """GetCorrectedInstances (revision:44-121): stabilization windows and per-period limits."""
    if panic:
        corrected = recommended
        past = state.min_corrected_panic.best(now, current)
        if past is not None and past > 0:  # revision:54-62
            corrected = min(corrected, past + int(past * behavior.panic.percent / 100.0))
        corrected = max(corrected, current)
    elif recommended < current:  # revision:77-98
        down = behavior.scale_down
        corrected = recommended
        better = state.max_recommendation.best(now)
        if better is not None:
            corrected = max(corrected, better)
        past = state.max_corrected.best(now, current)
        if past is not None:
            absolute = past - down.instances
            relative = past - past * down.percent // 100
            limit = {"Or": min(absolute, relative), "And": max(absolute, relative)}.get(down.select_policy, INT32_MIN)
            corrected = max(corrected, limit)
        corrected = min(corrected, current)
    elif recommended > current:  # revision:100-121
        up = behavior.scale_up
        corrected = recommended
        better = state.min_recommendation.best(now)
        if better is not None:
            corrected = min(corrected, better)
        past = state.min_corrected_stable.best(now, current)
        if past is not None:
            absolute = past + up.instances
            relative = past + past * up.percent // 100
            limit = {"Or": max(absolute, relative), "And": min(absolute, relative)}.get(up.select_policy, INT32_MAX)
            corrected = min(corrected, limit)
        corrected = max(corrected, current)
    else:
        corrected = recommended
    return min(max(corrected, role.min_replicas), role.max_replicas)  # revision:51


def record(
    behavior: Behavior, state: RoleState, now: int, refresh_panic: bool, recommended: int, corrected: int
) -> RoleState:
    """recordScaleOneTargetResult (scaler:153-159, status:66-83)."""
    ends = state.panic_ends_at
    if refresh_panic:
        ends = 0 if behavior.panic.hold_ms == 0 else now + behavior.panic.hold_ms
    return RoleState(
        panic_ends_at=ends,
        max_recommendation=state.max_recommendation.append(now, recommended),
        min_recommendation=state.min_recommendation.append(now, recommended),
        max_corrected=state.max_corrected.append(now, corrected),
        min_corrected_stable=state.min_corrected_stable.append(now, corrected),
        min_corrected_panic=state.min_corrected_panic.append(now, corrected),
    )


def enforce_ratio(
    replicas: Mapping[str, int], roles: Mapping[str, Role], constraint: RatioConstraint | None
) -> tuple[dict[str, int], bool]:
    """EnforceRoleRatio (ratio:37-133): raise the deficient role first; lower the other only
    when the first hits its max. Both at zero stays zero; one at zero is seeded to 1 first."""
    final = {n: min(max(v, roles[n].min_replicas), roles[n].max_replicas) for n, v in replicas.items()}
    if constraint is None:
        return final, False
    nb, db = roles[constraint.numerator], roles[constraint.denominator]
    num, den = final[nb.name], final[db.name]
    if num == 0 and den == 0:  # ratio:73-75
        return final, False
    lo, hi = constraint.min_ratio, constraint.max_ratio
    adjusted = False
    if num == 0:  # ratio:84-91
        num, adjusted = min(max(1, nb.min_replicas), nb.max_replicas), True
    if den == 0:
        den, adjusted = min(max(1, db.min_replicas), db.max_replicas), True
    ratio = num / den
    if ratio < lo:  # ratio:94-106
        raised = _ceil_int32(lo * den)
        if raised <= nb.max_replicas:
            num = max(raised, nb.min_replicas)
        elif lo > 0:
            num = nb.max_replicas
            den = min(max(_floor_int32(num / lo), db.min_replicas), db.max_replicas)
        adjusted = True
    elif ratio > hi:  # ratio:107-124
        if hi <= 0:
            num = 0
        else:
            raised = _ceil_int32(num / hi)
            if raised <= db.max_replicas:
                den = max(raised, db.min_replicas)
            else:
                den = db.max_replicas
                num = min(max(_floor_int32(hi * den), nb.min_replicas), nb.max_replicas)
        adjusted = True
    final[nb.name] = min(max(num, nb.min_replicas), nb.max_replicas)  # ratio:126-127
    final[db.name] = min(max(den, db.min_replicas), db.max_replicas)
    return final, adjusted


def _ceil_int32(value: float) -> int:
    return 0 if math.isnan(value) else int(min(max(math.ceil(value), INT32_MIN), INT32_MAX))


def _floor_int32(value: float) -> int:
    return 0 if math.isnan(value) else int(min(max(math.floor(value), INT32_MIN), INT32_MAX))


@dataclass(frozen=True)
class RoleTick:
    name: str
    current: int
    desired: int
    final: int
    mode: str


@dataclass(frozen=True)
class Tick:
    """One reconcile: per role the replicas read, the metric-derived count, the count written
    and the mode; `skipped` says why nothing was written."""

    time: float
    roles: tuple[RoleTick, ...]
    skipped: str | None = None
    ratio_adjusted: bool = False


def _role_values(role: Role, sample: Sample, current: int) -> dict[str, float]:
    values = dict(sample.metrics.get(role.name, {}))
    if current == 0:
        # No pods to scrape: "pod list is empty" drops pod metrics (collector:246-248).
        values = {k: v for k, v in values.items() if any(m.name == k and m.source != "pod" for m in role.metrics)}
    return values


def step(
    policy: Policy, states: Mapping[str, RoleState], current: Mapping[str, int], sample: Sample, now: int
) -> tuple[Tick, dict[str, RoleState]]:
    """One reconcile at `now` (ms; dscaler:127-236, or scaler:65-91 for a homogeneous target)."""
    desired: dict[str, int] = {}
    corrected: dict[str, int] = {}
    pending: dict[str, tuple[bool, int, int]] = {}
    b = policy.behavior
    for role in policy.roles:
        cur = current[role.name]
        if policy.target == "disaggregated" and role.fixed:  # dscaler:149-155
            desired[role.name] = corrected[role.name] = role.min_replicas
            continue
        state = states[role.name]
        values = _role_values(role, sample, cur)
        rec = recommend(role, cur, policy.tolerance_percent, values, sample.unready.get(role.name, 0))
        if rec is None:  # dscaler:186-189, scaler:83-86: nothing written, nothing recorded
            unchanged = tuple(
                RoleTick(r.name, current[r.name], current[r.name], current[r.name], _mode(policy, states, r, now))
                for r in policy.roles
            )
            return Tick(sample.time, unchanged, skipped=f"no metric collected for role {role.name}"), dict(states)
        panic = state.in_panic(b, now)
        refresh = False
        threshold = b.panic.threshold_percent
        if threshold is not None and rec * 100 >= cur * threshold:  # scaler:129-134
            refresh, panic = True, b.panic.hold_ms > 0
        desired[role.name] = rec
        corrected[role.name] = correct(b, state, now, panic, role, cur, rec)
        pending[role.name] = (refresh, rec, corrected[role.name])
    final, adjusted = enforce_ratio(corrected, {r.name: r for r in policy.roles}, policy.ratio)
    new_states = dict(states)
    for name, (refresh, rec, corr) in pending.items():  # dscaler:201-203: after the ratio
        new_states[name] = record(b, states[name], now, refresh, rec, corr)
    ticks = tuple(
        RoleTick(r.name, current[r.name], desired[r.name], final[r.name], _mode(policy, new_states, r, now))
        for r in policy.roles
    )
    return Tick(sample.time, ticks, ratio_adjusted=adjusted), new_states


def _mode(policy: Policy, states: Mapping[str, RoleState], role: Role, now: int) -> str:
    return "Panic" if states[role.name].in_panic(policy.behavior, now) else "Stable"  # dscaler:209-212


def simulate(policy: Policy, samples: Iterable[Sample], start: Mapping[str, int], reconcile_ms: int = 0) -> list[Tick]:
    """Replay the samples, one reconcile each; the replicas written at one reconcile are the
    ones read at the next (controller:426-448 reads the spec; an absent field counts as 1).

    Reconcile i runs at its sample's time plus i * reconcile_ms: Kthena starts the next period
    only after a reconcile returns (wait.Until, controller:117-119, is "sliding"), so real
    reconciles are a period plus the reconcile's duration apart. It matters at the edges of
    Kthena's windows, which include a record exactly one window old (window:33-35): rows exactly
    15 s apart with reconcile_ms 0 see the previous period's value once more."""
    current = {r.name: int(start.get(r.name, 1)) for r in policy.roles}
    unknown = sorted(set(start) - set(current))
    if unknown:
        raise AutoscaleError(f"--start names roles the policy does not have: {unknown}")
    if any(v < 0 for v in current.values()):
        raise AutoscaleError("starting replicas must be >= 0")
    if reconcile_ms < 0:
        raise AutoscaleError("the reconcile duration must be >= 0 ms")
    states = {r.name: initial_state(policy.behavior) for r in policy.roles}
    ticks = []
    for i, sample in enumerate(samples):
        now = EPOCH_MS + round(sample.time * 1000) + i * reconcile_ms
        tick, states = step(policy, states, current, sample, now)
        ticks.append(tick)
        current = {rt.name: rt.final for rt in tick.roles}
    return ticks


def parse_start(items: Sequence[str]) -> dict[str, int]:
    """ROLE=N pairs (several per item, comma-separated)."""
    out: dict[str, int] = {}
    for item in items:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            role, sep, count = pair.partition("=")
            if not sep or not count.strip().isdigit():
                raise AutoscaleError(f"--start {pair!r}: expected ROLE=N with N a whole number")
            out[role.strip()] = int(count)
    return out
