"""Parsing: Go durations, resource.Quantity, and the policy with the API server's defaults.
Citations are `file:lines` of volcano-sh/kthena@3cc0572, abbreviated as listed in
mooncake_pd.autoscale."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any, cast

import yaml

from mooncake_pd import manifests
from mooncake_pd.autoscale.policy import (
    HOMOGENEOUS_UNIT,
    AutoscaleError,
    Behavior,
    Metric,
    PanicPolicy,
    Policy,
    RatioConstraint,
    Role,
    StablePolicy,
)

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
    stable = up.get("stablePolicy") or {}
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
    num, den = cast(str, num), cast(str, den)  # role names: the loop above checked them
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
