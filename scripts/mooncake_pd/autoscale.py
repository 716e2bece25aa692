"""Kthena's autoscaler as pure functions: replay a metric series through an AutoscalingPolicy.

A model of volcano-sh/kthena at commit 3cc057284c34469fcb0ed22a12dac84b1d120719 (just after
v1.0.0). Every rule cites the Go source it follows, as `file:lines` at that commit, with these
abbreviations:

- types: pkg/apis/workload/v1alpha1/autoscalingpolicy_types.go
- mutator: pkg/autoscaler/webhook/autoscalingpolicy_mutator.go
- validator: pkg/autoscaler/webhook/autoscalingpolicy_validator.go
- controller: pkg/autoscaler/controller/autoscale_controller.go
- dscaler: pkg/autoscaler/autoscaler/disaggregated_scaler.go
- scaler: pkg/autoscaler/autoscaler/scaler.go
- status: pkg/autoscaler/autoscaler/status.go
- collector: pkg/autoscaler/autoscaler/metric_collector.go
- recommendation: pkg/autoscaler/algorithm/recommendation.go
- revision: pkg/autoscaler/algorithm/revision.go
- ratio: pkg/autoscaler/algorithm/disaggregated_ratio.go
- window: pkg/autoscaler/datastructure/sliding_window.go

What the model takes as given: the metric values Kthena would have collected at each reconcile
(for a pod source, the sum over the role's ready entry pods, collector:339 and 443-453; for a
Prometheus source, the query's single value, collector:477-523), the number of not-ready pods,
and that a replica patch is seen by the next reconcile (the controller reads the ModelServing
spec, not the pods: controller:426-448). It does not model pods that failed or restarted
(collector:271-282 then drops that metric for the cycle) nor histogram quantiles (collector:454-471).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import yaml

from mooncake_pd import manifests

# Kthena's reconcile period (pkg/autoscaler/util/settings.go:20; the chart's
# controllerManager.autoscalingSyncPeriodSeconds overrides it).
SYNC_PERIOD_SECONDS = 15
# Kthena stamps windows with wall-clock milliseconds and uses 0 as "never" (status:54,
# window:143-151); simulated time is shifted by this so that t=0 is not mistaken for "never".
EPOCH_MS = 1_000_000_000_000
HOMOGENEOUS_UNIT = "replicas"
UNREADY = "@unready"
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)


class AutoscaleError(ValueError):
    """A policy or a metric series the simulator cannot use; the message names the problem."""


# ---------------------------------------------------------------------------------------------
# Policy model


@dataclass(frozen=True)
class StablePolicy:
    """types:96-119 (scaleDown, and scaleUp.stablePolicy)."""

    instances: int
    percent: int
    period_ms: int
    select_policy: str
    stabilization_window_ms: int


@dataclass(frozen=True)
class PanicPolicy:
    """types:130-148."""

    percent: int
    period_ms: int
    threshold_percent: int | None
    hold_ms: int


@dataclass(frozen=True)
class Behavior:
    scale_up: StablePolicy
    panic: PanicPolicy
    scale_down: StablePolicy


@dataclass(frozen=True)
class Metric:
    """One metric of a role: its policy key, target value and source kind ("pod" or "prometheus")."""

    name: str
    target: float
    source: str


@dataclass(frozen=True)
class Role:
    name: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[Metric, ...]

    @property
    def fixed(self) -> bool:
        """dscaler:269-271: min == max (> 0) is a fixed role, never autoscaled."""
        return self.max_replicas > 0 and self.min_replicas == self.max_replicas


@dataclass(frozen=True)
class RatioConstraint:
    numerator: str
    denominator: str
    min_ratio: float
    max_ratio: float


@dataclass(frozen=True)
class Policy:
    """target is "disaggregated" (roles of one ModelServing) or "homogeneous" (its spec.replicas,
    modelled as one unit named `replicas`)."""

    target: str
    tolerance_percent: int
    behavior: Behavior
    roles: tuple[Role, ...]
    ratio: RatioConstraint | None = None

    def role(self, name: str) -> Role:
        for r in self.roles:
            if r.name == name:
                return r
        raise AutoscaleError(f"policy has no role {name!r}")


# ---------------------------------------------------------------------------------------------
# Parsing: Go durations, resource.Quantity, and the policy with the API server's defaults


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9}
_DURATION_NS["h"] = 3600 * 10**9


def parse_duration_ms(value: Any, where: str) -> int:
    """A metav1.Duration string (Go time.ParseDuration: "15s", "1m30s", "500ms", "0") as whole
    milliseconds, truncated like Duration.Milliseconds() (status:35-61)."""
    if not isinstance(value, str):
        raise AutoscaleError(f'{where}: {value!r} is not a duration string such as "15s" or "1m"')
    text = value.strip()
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("+-")
    if text == "0":
        return 0
    pos, total = 0, Fraction(0)
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m:
            raise AutoscaleError(f'{where}: {value!r} is not a duration such as "15s", "1m30s" or "500ms"')
        total += Fraction(m.group(1)) * _DURATION_NS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise AutoscaleError(f'{where}: {value!r} is not a duration such as "15s", "1m30s" or "500ms"')
    return sign * int(int(total) / 10**6)


_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))?$"
)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(value: Any, where: str) -> float:
    """A resource.Quantity (int, or a string matching the CRD's pattern: "0.5", "250m", "1k",
    "1e3") as a float, like Quantity.AsFloat64Slow (dscaler:258, ratio:77-78). A YAML float is
    refused as the API server refuses it: the field is int-or-string."""
    if isinstance(value, (bool, float)):
        raise AutoscaleError(f'{where}: {value!r} must be an integer or a quoted string such as "0.5"')
    if isinstance(value, int):
        return float(value)
    m = _QUANTITY.match(value) if isinstance(value, str) else None
    if not m:
        raise AutoscaleError(f'{where}: {value!r} is not a Kubernetes quantity such as "0.5", "250m" or "10"')
    number, suffix = Fraction(m.group("num")), m.group("suffix") or ""
    if suffix in _BINARY_SI:
        number *= 2 ** _BINARY_SI[suffix]
    elif suffix in _DECIMAL_SI:
        number *= Fraction(10) ** _DECIMAL_SI[suffix]
    else:
        number *= Fraction(10) ** int(Fraction(suffix[1:]))
    return float(number)


def _crd_defaults(behavior: dict[str, Any]) -> dict[str, Any]:
    """Structural defaults of the CRD, applied to objects that are present (types:98-115,
    132-147; the CRD carries no default for behavior, scaleUp, scaleDown or their policies)."""
    stable = {"instances": 1, "percent": 100, "period": "15s", "selectPolicy": "Or"}
    panic = {"percent": 1000, "panicThresholdPercent": 200, "panicModeHold": "60s"}
    out = dict(behavior)
    if isinstance(out.get("scaleDown"), dict):
        out["scaleDown"] = {**stable, **out["scaleDown"]}
    if isinstance(out.get("scaleUp"), dict):
        up = dict(out["scaleUp"])
        if isinstance(up.get("stablePolicy"), dict):
            up["stablePolicy"] = {**stable, **up["stablePolicy"]}
        if isinstance(up.get("panicPolicy"), dict):
            up["panicPolicy"] = {**panic, **up["panicPolicy"]}
        out["scaleUp"] = up
    return out


def _stable_is_zero(p: Mapping[str, Any] | None) -> bool:
    """Go's `== AutoscalingPolicyStablePolicy{}`: pointers nil and selectPolicy empty."""
    p = p or {}
    return all(p.get(k) is None for k in ("instances", "percent", "period", "stabilizationWindow")) and not p.get(
        "selectPolicy"
    )


def _panic_is_zero(p: Mapping[str, Any] | None) -> bool:
    """Go's `== AutoscalingPolicyPanicPolicy{}`: pointers nil and period zero."""
    p = p or {}
    period = p.get("period")
    zero_period = period is None or (isinstance(period, str) and parse_duration_ms(period, "period") == 0)
    return zero_period and all(p.get(k) is None for k in ("percent", "panicThresholdPercent", "panicModeHold"))


_MUTATOR_SCALE_DOWN = {
    "instances": 0,
    "percent": 100,
    "period": "1m",
    "selectPolicy": "Or",
    "stabilizationWindow": "5m",
}
_MUTATOR_STABLE_UP = {"instances": 4, "percent": 100, "period": "1m", "selectPolicy": "Or", "stabilizationWindow": "0s"}
_MUTATOR_PANIC = {"percent": 0, "period": "0s", "panicThresholdPercent": 200, "panicModeHold": "0s"}


def defaulted_behavior(behavior: Mapping[str, Any] | None) -> dict[str, Any]:
    """spec.behavior as stored: the CRD's defaults, then Kthena's mutating webhook (enabled by
    default, charts/kthena/values.yaml:29-31), which fills whole missing parts with different
    defaults (mutator:81-144): a missing scaleDown gets instances 0, period 1m, window 5m; a
    missing scaleUp gets stablePolicy instances 4, period 1m and a panicPolicy with hold 0s,
    i.e. panic mode off."""
    b = _crd_defaults(dict(behavior or {}))
    down, up = b.get("scaleDown") or {}, b.get("scaleUp") or {}
    if _stable_is_zero(down) and _stable_is_zero(up.get("stablePolicy")) and _panic_is_zero(up.get("panicPolicy")):
        return {
            "scaleUp": {"stablePolicy": dict(_MUTATOR_STABLE_UP), "panicPolicy": dict(_MUTATOR_PANIC)},
            "scaleDown": dict(_MUTATOR_SCALE_DOWN),
        }
    if _stable_is_zero(down):
        down = dict(_MUTATOR_SCALE_DOWN)
    elif down.get("stabilizationWindow") is None:
        down = {**down, "stabilizationWindow": "5m"}
    if _stable_is_zero(up.get("stablePolicy")) and _panic_is_zero(up.get("panicPolicy")):
        return {
            "scaleUp": {"stablePolicy": dict(_MUTATOR_STABLE_UP), "panicPolicy": dict(_MUTATOR_PANIC)},
            "scaleDown": down,
        }
    stable = up.get("stablePolicy")
    if _stable_is_zero(stable):
        stable = dict(_MUTATOR_STABLE_UP)
    elif stable.get("stabilizationWindow") is None:
        stable = {**stable, "stabilizationWindow": "0s"}
    panic = up.get("panicPolicy")
    if _panic_is_zero(panic):
        panic = dict(_MUTATOR_PANIC)
    return {"scaleUp": {"stablePolicy": stable, "panicPolicy": panic}, "scaleDown": down}


def _stable(p: Mapping[str, Any], where: str) -> StablePolicy:
    window = parse_duration_ms(p.get("stabilizationWindow", "0s"), f"{where}.stabilizationWindow")
    period = parse_duration_ms(p["period"], f"{where}.period")
    # validator:331-347 and 373-389: periods and windows between 0 and 30 minutes.
    for name, ms in (("period", period), ("stabilizationWindow", window)):
        if ms < 0 or ms > 30 * 60_000:
            raise AutoscaleError(f"{where}.{name}: must be between 0 and 30 minutes (Kthena's webhook refuses it)")
    return StablePolicy(int(p["instances"]), int(p["percent"]), period, str(p["selectPolicy"]), window)


def _panic(p: Mapping[str, Any], where: str) -> PanicPolicy:
    if "period" not in p:
        raise AutoscaleError(f"{where}.period: required by the CRD when panicPolicy is set")
    period = parse_duration_ms(p["period"], f"{where}.period")
    hold = parse_duration_ms(p.get("panicModeHold", "0s"), f"{where}.panicModeHold")
    for name, ms in (("period", period), ("panicModeHold", hold)):
        if ms < 0 or ms > 30 * 60_000:
            raise AutoscaleError(f"{where}.{name}: must be between 0 and 30 minutes (Kthena's webhook refuses it)")
    threshold = p.get("panicThresholdPercent")
    return PanicPolicy(int(p["percent"]), period, None if threshold is None else int(threshold), hold)


def _metrics(items: Any, where: str) -> list[tuple[str, float]]:
    if not isinstance(items, list):
        raise AutoscaleError(f"{where}: must be a list of {{name, targetValue}}")
    out: list[tuple[str, float]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not item.get("name") or "targetValue" not in item:
            raise AutoscaleError(f"{where}[{i}]: needs name and targetValue")
        target = parse_quantity(item["targetValue"], f"{where}[{i}].targetValue")
        # validator:196-203 and 254-256.
        if target <= 0 or math.isinf(target):
            raise AutoscaleError(f"{where}[{i}].targetValue: must be > 0 (Kthena's webhook refuses {target:g})")
        if any(name == item["name"] for name, _ in out):
            raise AutoscaleError(f"{where}[{i}].name: duplicate metric {item['name']!r}")
        out.append((str(item["name"]), target))
    return out


def _with_sources(metrics: list[tuple[str, float]], sources: Any, where: str) -> tuple[Metric, ...]:
    """Each metric needs a source: without one Kthena never collects it (collector:157-161);
    pod sources feed the per-pod path, prometheus sources the external one (collector:163-170)."""
    sources = sources or {}
    out = []
    for name, target in metrics:
        src = sources.get(name)
        if not isinstance(src, dict) or not (("pod" in src) ^ ("prometheus" in src)):
            raise AutoscaleError(
                f"{where}.metricSources[{name}]: missing, or not exactly one of pod/prometheus; "
                "Kthena would never collect this metric"
            )
        out.append(Metric(name, target, "pod" if "pod" in src else "prometheus"))
    return tuple(out)


def _bounds(params: Mapping[str, Any], where: str) -> tuple[int, int]:
    try:
        lo, hi = int(params["minReplicas"]), int(params["maxReplicas"])
    except (KeyError, TypeError, ValueError):
        raise AutoscaleError(f"{where}: needs integer minReplicas and maxReplicas") from None
    if lo < 0 or hi < 1:
        raise AutoscaleError(f"{where}: minReplicas must be >= 0 and maxReplicas >= 1 (CRD minimums)")
    if lo > hi:  # validator:235-237
        raise AutoscaleError(f"{where}: minReplicas {lo} > maxReplicas {hi}")
    return lo, hi


def policy_from_spec(spec: Mapping[str, Any]) -> Policy:
    """A Policy from AutoscalingPolicy.spec, with the defaults the API server and Kthena's
    mutating webhook apply, refusing what Kthena's validating webhook refuses (validator:86-315)."""
    if not isinstance(spec, Mapping):
        raise AutoscaleError("the policy spec is not a mapping")
    tolerance = int(spec.get("tolerancePercent", 10))  # CRD default 10 (types:32-39)
    b = defaulted_behavior(spec.get("behavior"))
    behavior = Behavior(
        scale_up=_stable(b["scaleUp"]["stablePolicy"], "spec.behavior.scaleUp.stablePolicy"),
        panic=_panic(b["scaleUp"]["panicPolicy"], "spec.behavior.scaleUp.panicPolicy"),
        scale_down=_stable(b["scaleDown"], "spec.behavior.scaleDown"),
    )
    targets = [k for k in ("homogeneousTarget", "heterogeneousTarget", "disaggregatedTarget") if spec.get(k)]
    if len(targets) != 1:  # validator:125-146
        raise AutoscaleError(
            "the spec must set exactly one of homogeneousTarget, heterogeneousTarget, disaggregatedTarget"
        )
    top = _metrics(spec.get("metrics") or [], "spec.metrics")
    if targets[0] == "heterogeneousTarget":
        raise AutoscaleError("heterogeneousTarget (the cost optimizer) is not simulated; use a disaggregated target")
    if targets[0] == "homogeneousTarget":
        h = spec["homogeneousTarget"]
        lo, hi = _bounds(h, "spec.homogeneousTarget")
        if not top:  # validator:96-100
            raise AutoscaleError("spec.metrics: at least one metric is required for a homogeneousTarget")
        sources = (h.get("target") or {}).get("metricSources")
        metrics = _with_sources(top, sources, "spec.homogeneousTarget.target")
        return Policy("homogeneous", tolerance, behavior, (Role(HOMOGENEOUS_UNIT, lo, hi, metrics),))
    d = spec["disaggregatedTarget"]
    roles_spec = d.get("roles")
    if not isinstance(roles_spec, dict) or not 1 <= len(roles_spec) <= 2:  # types:497-499
        raise AutoscaleError("spec.disaggregatedTarget.roles: a map of one or two roles")
    roles = []
    for name in sorted(roles_spec):  # dscaler:140-144 sorts role names
        where = f"spec.disaggregatedTarget.roles[{name}]"
        params = roles_spec[name] or {}
        lo, hi = _bounds(params, where)
        role = Role(name, lo, hi, ())
        if role.fixed:  # dscaler:248-251: no metrics for a fixed role
            roles.append(role)
            continue
        own = _metrics(params["metrics"], f"{where}.metrics") if params.get("metrics") else top
        if not own:  # validator:241-243
            raise AutoscaleError(f"{where}.metrics: required on a non-fixed role when spec.metrics is empty")
        roles.append(replace(role, metrics=_with_sources(own, params.get("metricSources"), where)))
    ratio = None
    if d.get("ratioConstraint"):
        ratio = _ratio(d["ratioConstraint"], {r.name: r for r in roles})
    return Policy("disaggregated", tolerance, behavior, tuple(roles), ratio)


def _ratio(c: Mapping[str, Any], roles: Mapping[str, Role]) -> RatioConstraint:
    where = "spec.disaggregatedTarget.ratioConstraint"
    num, den = c.get("numeratorRole"), c.get("denominatorRole")
    if num == den:  # CEL rule (types:540), validator:279-281
        raise AutoscaleError(f"{where}: numeratorRole and denominatorRole must differ")
    for key, role in (("numeratorRole", num), ("denominatorRole", den)):
        if role not in roles:  # validator:282-289
            raise AutoscaleError(f"{where}.{key}: {role!r} is not one of the roles {sorted(roles)}")
    lo = parse_quantity(c.get("minRatio"), f"{where}.minRatio")
    hi = parse_quantity(c.get("maxRatio"), f"{where}.maxRatio")
    n, d = roles[num], roles[den]
    # validator:290-310
    if lo > hi:
        raise AutoscaleError(f"{where}: minRatio {lo:g} > maxRatio {hi:g}")
    if (n.min_replicas == 0) != (d.min_replicas == 0):
        raise AutoscaleError(f"{where}: ratio roles must be scalable-to-zero together (both minReplicas 0 or neither)")
    if lo < 0 or hi <= 0:
        raise AutoscaleError(f"{where}: minRatio must be >= 0 and maxRatio > 0")
    if d.max_replicas > 0 and n.min_replicas / d.max_replicas > hi:
        raise AutoscaleError(f"{where}: not achievable within the roles' replica bounds")
    if d.min_replicas > 0 and n.max_replicas / d.min_replicas < lo:
        raise AutoscaleError(f"{where}: not achievable within the roles' replica bounds")
    return RatioConstraint(num, den, lo, hi)


def find_policy_spec(text: str, name: str | None = None, key: str | None = None) -> dict[str, Any]:
    """The AutoscalingPolicy spec in a YAML text: a rendered manifest stream (the one
    AutoscalingPolicy, or the one named `name`), or, with `key` ("a.b.c"), the mapping at that
    path of a values-like file, which is either an AutoscalingPolicy spec or holds one under `spec`."""
    try:
        docs = [d for d in manifests.load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise AutoscaleError(f"the policy file is not YAML: {str(e).splitlines()[0]}") from None
    if key:
        if len(docs) != 1:
            raise AutoscaleError("--key needs a file with one YAML document")
        node: Any = docs[0]
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise AutoscaleError(f"the policy file has no key {key!r} (stopped at {part!r})")
            node = node[part]
        if isinstance(node, dict) and isinstance(node.get("spec"), dict):
            node = node["spec"]
        if not isinstance(node, dict):
            raise AutoscaleError(f"{key!r} is not a mapping")
        return node
    policies = [d for d in docs if isinstance(d, dict) and d.get("kind") == "AutoscalingPolicy"]
    if name:
        policies = [d for d in policies if (d.get("metadata") or {}).get("name") == name]
    if not policies:
        if len(docs) == 1 and isinstance(docs[0], dict) and not name and _looks_like_spec(docs[0]):
            return docs[0]
        raise AutoscaleError(
            "the policy file holds no AutoscalingPolicy"
            + (f" named {name!r}" if name else "")
            + " (or give --key for a values-like file)"
        )
    if len(policies) > 1:
        names = [(p.get("metadata") or {}).get("name") for p in policies]
        raise AutoscaleError(f"the policy file holds several AutoscalingPolicies {names}: choose one with --policy")
    spec = policies[0].get("spec")
    if not isinstance(spec, dict):
        raise AutoscaleError("the AutoscalingPolicy has no spec")
    return spec


def _looks_like_spec(doc: Mapping[str, Any]) -> bool:
    return any(k in doc for k in ("disaggregatedTarget", "homogeneousTarget", "heterogeneousTarget"))


# ---------------------------------------------------------------------------------------------
# Metric series


@dataclass(frozen=True)
class Sample:
    """What the collector would hand the algorithm at one reconcile: per role, metric key ->
    value (absent = not collected this cycle) and the count of not-ready pods."""

    time: float
    metrics: Mapping[str, Mapping[str, float]]
    unready: Mapping[str, int] = field(default_factory=dict)


def _number(value: Any, where: str) -> float | None:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    if isinstance(value, bool):
        raise AutoscaleError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AutoscaleError(f"{where}: {value!r} is not a number") from None
    if math.isnan(number) or math.isinf(number):
        raise AutoscaleError(f"{where}: {value!r} is not a finite number")
    return number


def _column(policy: Policy, column: str) -> tuple[str, str]:
    """`<role>/<metric>` or `<role>/@unready`; a bare `<metric>` when the policy has one role."""
    if "/" in column:
        role, key = column.split("/", 1)
    elif len(policy.roles) == 1:
        role, key = policy.roles[0].name, column
    else:
        raise AutoscaleError(f"column {column!r}: name it <role>/<metric> (roles: {[r.name for r in policy.roles]})")
    names = [r.name for r in policy.roles]
    if role not in names:
        raise AutoscaleError(f"column {column!r}: {role!r} is not a role of the policy {names}")
    if key != UNREADY and key not in {m.name for m in policy.role(role).metrics}:
        known = [m.name for m in policy.role(role).metrics]
        raise AutoscaleError(f"column {column!r}: role {role} has no metric {key!r} (its metrics: {known})")
    return role, key


def series_from_rows(policy: Policy, rows: Sequence[Mapping[str, Any]]) -> list[Sample]:
    """Samples from rows of {"time": seconds, "<role>/<metric>": value, "<role>/@unready": n};
    an empty or null value is a metric not collected at that reconcile."""
    if not rows:
        raise AutoscaleError("the metric series is empty")
    samples: list[Sample] = []
    seen: set[tuple[str, str]] = set()
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise AutoscaleError(f"row {i}: not an object of column -> value")
        t = _number(row.get("time"), f"row {i}: time")
        if t is None or t < 0:
            raise AutoscaleError(f"row {i}: needs a time in seconds >= 0")
        if samples and t <= samples[-1].time:
            raise AutoscaleError(f"row {i}: time {t:g} is not after the previous row's {samples[-1].time:g}")
        metrics: dict[str, dict[str, float]] = {}
        unready: dict[str, int] = {}
        for column, raw in row.items():
            if column == "time":
                continue
            role, key = _column(policy, str(column))
            seen.add((role, key))
            value = _number(raw, f"row {i}, column {column!r}")
            if value is None:
                continue
            if key == UNREADY:
                if value < 0 or value != int(value):
                    raise AutoscaleError(f"row {i}, column {column!r}: a pod count must be a whole number >= 0")
                unready[role] = int(value)
            else:
                metrics.setdefault(role, {})[key] = value
        samples.append(Sample(t, metrics, unready))
    for role in policy.roles:
        if role.metrics and not any((role.name, m.name) in seen for m in role.metrics):
            wanted = ", ".join(f"{role.name}/{m.name}" for m in role.metrics)
            raise AutoscaleError(f"no column gives role {role.name}'s metrics (expected one of: {wanted})")
    return samples


def parse_series(policy: Policy, text: str, fmt: str) -> list[Sample]:
    """The series from CSV (a header row of column names) or JSON (a list of row objects)."""
    if fmt == "json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise AutoscaleError(f"the metric series is not JSON: {e.msg} at line {e.lineno}") from None
        if not isinstance(rows, list):
            raise AutoscaleError("a JSON metric series is a list of row objects")
        return series_from_rows(policy, rows)
    if fmt != "csv":
        raise AutoscaleError(f"unknown series format {fmt!r} (csv or json)")
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "time" not in reader.fieldnames:
        raise AutoscaleError("the CSV metric series needs a header row with a 'time' column")
    rows = []
    for i, row in enumerate(reader, start=1):
        if None in row:
            raise AutoscaleError(f"CSV row {i}: more cells than header columns")
        rows.append(row)
    return series_from_rows(policy, rows)


# ---------------------------------------------------------------------------------------------
# Sliding windows (window:37-183), immutable: each operation returns a new window.


def _fresh(fresh_ms: int, now: int, stamp: int) -> bool:
    return stamp + fresh_ms >= now  # window:33-35


@dataclass(frozen=True)
class RecordWindow:
    """RmqRecordSlidingWindow: best (max or min) value appended within the last fresh_ms."""

    fresh_ms: int
    keep_max: bool
    records: tuple[tuple[int, int], ...] = ()

    def _better(self, a: int, b: int) -> bool:
        return a > b if self.keep_max else a < b

    def _expired(self, now: int) -> tuple[tuple[int, int], ...]:
        recs = self.records
        while recs and not _fresh(self.fresh_ms, now, recs[0][0]):  # window:66-73
            recs = recs[1:]
        return recs

    def append(self, now: int, value: int) -> RecordWindow:
        recs = list(self._expired(now))
        while recs and not self._better(recs[-1][1], value):  # window:75-85
            recs.pop()
        recs.append((now, value))
        return replace(self, records=tuple(recs))

    def best(self, now: int) -> int | None:
        recs = self._expired(now)
        if not recs or self.fresh_ms == 0:  # window:87-94
            return None
        return recs[0][1]


@dataclass(frozen=True)
class LineWindow:
    """RmqLineChartSlidingWindow: best value that was in force at any time within fresh_ms
    (each value holds from its append until the next one), or the given current value."""

    fresh_ms: int
    keep_max: bool
    records: tuple[tuple[int, int], ...] = ()
    drifting: int = 0
    drift_ts: int = 0

    def _better(self, a: int, b: int) -> bool:
        return a > b if self.keep_max else a < b

    def _expired(self, now: int) -> LineWindow:
        recs = self.records
        while recs and not _fresh(self.fresh_ms, now, recs[0][0]):  # window:136-146
            recs = recs[1:]
        drift_ts = self.drift_ts if _fresh(self.fresh_ms * 2, now, self.drift_ts) else 0
        return replace(self, records=recs, drift_ts=drift_ts)

    def append(self, now: int, value: int) -> LineWindow:
        w = self._expired(now)
        recs = list(w.records)
        if w.drift_ts > 0:  # window:148-162: the previous value ends now
            while recs and not self._better(recs[-1][1], w.drifting):
                recs.pop()
            recs.append((now, w.drifting))
        return replace(w, records=tuple(recs), drifting=value, drift_ts=now)

    def best(self, now: int, current: int) -> int | None:
        if self.fresh_ms == 0:  # window:164-183
            return None
        w = self._expired(now)
        value = current
        if w.drift_ts > 0 and self._better(w.drifting, value):
            value = w.drifting
        if w.records and self._better(w.records[0][1], value):
            value = w.records[0][1]
        return value


@dataclass(frozen=True)
class RoleState:
    """status:26-64: panic deadline and the five history windows of one role."""

    panic_ends_at: int
    max_recommendation: RecordWindow
    min_recommendation: RecordWindow
    max_corrected: LineWindow
    min_corrected_stable: LineWindow
    min_corrected_panic: LineWindow

    def in_panic(self, behavior: Behavior, now: int) -> bool:
        return behavior.panic.hold_ms > 0 and now <= self.panic_ends_at  # status:85-87


def initial_state(behavior: Behavior) -> RoleState:
    """status:32-64: the windows' lengths come from the behavior."""
    return RoleState(
        panic_ends_at=0,
        max_recommendation=RecordWindow(behavior.scale_down.stabilization_window_ms, keep_max=True),
        min_recommendation=RecordWindow(behavior.scale_up.stabilization_window_ms, keep_max=False),
        max_corrected=LineWindow(behavior.scale_down.period_ms, keep_max=True),
        min_corrected_stable=LineWindow(behavior.scale_up.period_ms, keep_max=False),
        min_corrected_panic=LineWindow(behavior.panic.period_ms, keep_max=False),
    )


# ---------------------------------------------------------------------------------------------
# The algorithm


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


# ---------------------------------------------------------------------------------------------
# Output


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
