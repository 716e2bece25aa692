"""Figures of a measured run: percentiles and summaries, and how a time grows with the fleet's size
(power-law and linear fits on log-log axes)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


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
