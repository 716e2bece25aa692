"""Metric series: the values Kthena would have collected at each reconcile, from CSV or JSON.
Citations are `file:lines` of volcano-sh/kthena@3cc0572, abbreviated as listed in
mooncake_pd.autoscale."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mooncake_pd.autoscale.policy import AutoscaleError, Policy

# The column suffix of a role's not-ready pod count (`<role>/@unready`).
UNREADY = "@unready"


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
    for r in policy.roles:
        if r.metrics and not any((r.name, m.name) in seen for m in r.metrics):
            wanted = ", ".join(f"{r.name}/{m.name}" for m in r.metrics)
            raise AutoscaleError(f"no column gives role {r.name}'s metrics (expected one of: {wanted})")
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
