"""The data path's capacity, judged (issue 41 item 5; harness/datapath_capacity.py measures it):
what the PD proxy and Kthena's router add to a PD request's time to first token, against the
same stand-in engines reached straight (the baseline), and the request rate at which each one,
on one core, adds more than SATURATION_MS at the 99th percentile.

Pure: percentiles, the added figures, the search over offered rates and the crossings it finds,
the sizing arithmetic, and the bounds docs/scale-datapath.md documents (a table like
docs/failure-modes.md's, read by `bounds`), held against a run's flat figures by `breaks`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness import growth

# Where a component saturates: its added P99 TTFT passes this (issue 41).
SATURATION_MS = 10.0
# An open-loop step whose completed requests fall short of this share of those offered, or that
# fails any request, is past saturation whatever its latency says.
ACHIEVED_SHARE = 0.9
# A component whose median request waits this long in it (added P50 TTFT) does not keep up
# with the offered rate: its queue grows for as long as the load lasts.
BEHIND_MS = 250.0
# A baseline (the stand-ins reached straight) slower than this at P99 means the harness itself
# queues requests (its core is busy, or shared with the machine's other work).
HARNESS_P99_MS = 50.0
# A harness (load generator and stand-ins, on their own core) busier than this share of its core
# queues requests itself: its baseline is no longer the engines' answer alone.
HARNESS_BUSY = 0.85


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of `values` as scale.percentile computes it (linear between the
    closest ranks, numpy's default); nan for no values, so that a step without answers is a figure
    no bound holds for rather than an error."""
    return growth.percentile(values, q) if values else math.nan


@dataclass(frozen=True)
class Latency:
    """A load's TTFT figures (ms) and what it completed in its window: `offered` requests were
    started there (open loop: arrived), `requests` of them answered in full, `failed` failed."""

    offered: int
    requests: int
    failed: int
    p50: float
    p90: float
    p99: float
    max: float
    rate: float  # completed requests per second of the window

    @classmethod
    def of(cls, ttft_ms: Sequence[float], failed: int, window_s: float, offered: int | None = None) -> Latency:
        return cls(
            offered=len(ttft_ms) + failed if offered is None else offered,
            requests=len(ttft_ms),
            failed=failed,
            p50=percentile(ttft_ms, 50),
            p90=percentile(ttft_ms, 90),
            p99=percentile(ttft_ms, 99),
            max=max(ttft_ms) if ttft_ms else math.nan,
            rate=len(ttft_ms) / window_s if window_s > 0 else math.nan,
        )

    @property
    def share(self) -> float:
        """Of the requests started in the window, the share answered in full."""
        return self.requests / self.offered if self.offered else math.nan


@dataclass(frozen=True)
class Added:
    """What a component adds: its percentiles less the baseline's, at the same load."""

    p50: float
    p99: float

    @classmethod
    def of(cls, through: Latency, baseline: Latency) -> Added:
        return cls(p50=through.p50 - baseline.p50, p99=through.p99 - baseline.p99)


@dataclass(frozen=True)
class Step:
    """One offered rate, open loop: the component's figures and the baseline's at that rate."""

    rate: float
    through: Latency
    baseline: Latency

    @property
    def added(self) -> Added:
        return Added.of(self.through, self.baseline)

    def behind(self) -> str:
        """Why the component does not keep up at this rate ('' when it does): it fails requests,
        leaves them unanswered, or its median request waits BEHIND_MS in its queue."""
        if self.through.failed:
            return f"{self.through.failed} failed requests"
        if not self.through.share >= ACHIEVED_SHARE:
            return f"{self.through.requests} of {self.through.offered} requests completed"
        if self.added.p50 > BEHIND_MS:
            return f"added P50 TTFT {self.added.p50:.0f} ms > {BEHIND_MS:g} ms"
        return ""

    def past(self, limit_ms: float = SATURATION_MS) -> str:
        """Why this step is past saturation ('' when it is not): behind, or its added P99 over
        `limit_ms`."""
        if reason := self.behind():
            return reason
        if self.added.p99 > limit_ms:
            return f"added P99 TTFT {self.added.p99:.1f} ms > {limit_ms:g} ms"
        return ""

    def baseline_sound(self) -> bool:
        """The baseline itself kept up: no failures, the offered rate completed, its P99 within
        HARNESS_P99_MS (past that the harness queues: what is added is no longer measurable)."""
        return (
            not self.baseline.failed and self.baseline.share >= ACHIEVED_SHARE and self.baseline.p99 <= HARNESS_P99_MS
        )


@dataclass(frozen=True)
class Saturation:
    """Where a component crosses a limit: `rate` (requests/s) is the interpolated crossing
    between the last step within it and the first past it. None where no step was past it (then
    `at_least` is the highest rate measured within it), or where the lowest rate measured was
    already past it (then `below` is that rate)."""

    rate: float | None
    at_least: float | None
    below: float | None
    last_within: float | None
    first_past: float | None
    reason: str


def _crossing(
    steps: Iterable[Step], judge: Callable[[Step], str], value: Callable[[Step], float], limit: float
) -> Saturation:
    """The last crossing from within to past: between the highest rate within and the lowest
    rate past above it. A rate past below the highest within (a noisy step: the P99 of a short
    window is its largest few requests) is named in the reason, not taken as the crossing."""
    ordered = sorted(steps, key=lambda s: s.rate)
    past = [s for s in ordered if judge(s)]
    within = [s for s in ordered if not judge(s)]
    if not past:
        top = within[-1].rate if within else None
        return Saturation(None, top, None, top, None, "no step measured past it")
    if not within:
        first = past[0]
        return Saturation(None, None, first.rate, None, first.rate, f"already at {first.rate:g}/s: {judge(first)}")
    last = within[-1]
    noisy = [s for s in past if s.rate < last.rate]
    note = f"; past at {', '.join(f'{s.rate:g}' for s in noisy)}/s below it (noise)" if noisy else ""
    above = [s for s in past if s.rate > last.rate]
    if not above:
        return Saturation(None, last.rate, None, last.rate, None, "no step measured past it above" + note)
    first = above[0]
    # Interpolated where the first rate past it answered what it was offered; else (failures,
    # requests left unanswered) the highest rate within: the crossing is no higher.
    crossing = last.rate
    a, b = value(last), value(first)
    if first.through.share >= ACHIEVED_SHARE and not first.through.failed and b > a and not math.isnan(a + b):
        crossing = last.rate + (first.rate - last.rate) * (limit - a) / (b - a)
    return Saturation(round(crossing, 1), last.rate, None, last.rate, first.rate, judge(first) + note)


def saturation(steps: Iterable[Step], limit_ms: float = SATURATION_MS) -> Saturation:
    """The rate at which the added P99 TTFT passes `limit_ms` (or the component falls behind)."""
    return _crossing(steps, lambda s: s.past(limit_ms), lambda s: s.added.p99, limit_ms)


def ceiling(steps: Iterable[Step]) -> Saturation:
    """The rate at which the component stops keeping up (Step.behind)."""
    return _crossing(steps, lambda s: s.behind(), lambda s: s.added.p50, BEHIND_MS)


def midpoint(steps: Iterable[Step], judge: Callable[[Step], str], tried: Iterable[float]) -> float | None:
    """The geometric midpoint between the highest rate within `judge` and the lowest past it above
    that (the crossing _crossing interpolates), when they are more than 15% apart and it was not
    tried; else None."""
    ordered = sorted(steps, key=lambda s: s.rate)
    within = [s.rate for s in ordered if not judge(s)]
    if not within:
        return None
    above = [s.rate for s in ordered if judge(s) and s.rate > within[-1]]
    if not above or above[0] / within[-1] < 1.15:
        return None
    rate = round(math.sqrt(within[-1] * above[0]), 1)
    return None if rate in set(tried) else rate


def next_rate(
    measured: dict[float, bool], start: float, ceiling: float, refinements: int, factor: float = 2.0
) -> float | None:
    """The next offered rate to try, given `measured` (rate -> past saturation): multiply `start`
    by `factor` until a rate is past it (or `ceiling` is reached), then try the geometric midpoint
    between the highest rate within and the lowest past, `refinements` times in all; where even
    `start` is past, halve it (down to start/8). None: done."""
    if not measured:
        return start
    past = sorted(r for r, p in measured.items() if p)
    within = sorted(r for r, p in measured.items() if not p)
    if not past:
        return None if within[-1] >= ceiling else min(within[-1] * factor, ceiling)
    below = [r for r in within if r < past[0]]
    if not below:
        lowest = min(measured)
        return lowest / 2 if lowest / 2 >= start / 8 else None
    ladder = [start * factor**k for k in range(0, 30)] + [start / 2**k for k in range(1, 4)] + [ceiling]
    refined = sum(1 for r in measured if not any(abs(r - rung) <= 1e-6 * rung for rung in ladder))
    if refined >= refinements or past[0] / below[-1] < 1.15:
        return None
    return round(math.sqrt(below[-1] * past[0]), 1)


def cpu_ms_per_request(cpu_s: float, requests: int) -> float:
    return cpu_s * 1000.0 / requests if requests else math.nan


def busy_share(cpu_s: float, wall_s: float) -> float:
    """Share of one core used over `wall_s`."""
    return cpu_s / wall_s if wall_s > 0 else math.nan


@dataclass(frozen=True)
class Sizing:
    """Proxy replicas for a request rate, from one replica's saturation on one core."""

    per_replica_rps: float
    headroom: float

    def replicas(self, rate: float) -> int:
        """Replicas that carry `rate` requests/s with each at most `headroom` of its saturation."""
        return max(1, math.ceil(rate / (self.per_replica_rps * self.headroom)))


# -- documented bounds -------------------------------------------------------------------------
@dataclass(frozen=True)
class Bound:
    name: str
    op: str  # "<=" or ">="
    value: float

    def holds(self, measured: float) -> bool:
        if math.isnan(measured):
            return False
        return measured <= self.value if self.op == "<=" else measured >= self.value


BOUND_ROW = re.compile(r"^\| `(?P<name>[a-z0-9.-]+)` \|.*\| (?P<op><=|>=) (?P<value>-?\d+(?:\.\d+)?) \|$")


def bounds(doc: Path) -> dict[str, Bound]:
    """The bounds table of docs/scale-datapath.md: rows whose first column is a figure's name in
    backticks and whose last column is `<= N` or `>= N`."""
    found = {}
    for line in doc.read_text().splitlines():
        m = BOUND_ROW.match(line.strip())
        if m:
            found[m["name"]] = Bound(m["name"], m["op"], float(m["value"]))
    return found


def breaks(figures: dict[str, float], documented: dict[str, Bound]) -> list[str]:
    """Each documented bound the figures break, or that they do not give (a figure missing is a
    break: a run that measured less than documented does not pass)."""
    problems = []
    for name, bound in sorted(documented.items()):
        if name not in figures:
            problems.append(f"{name}: not measured (documented {bound.op} {bound.value:g})")
        elif not bound.holds(figures[name]):
            problems.append(f"{name}: {figures[name]:.2f}, documented {bound.op} {bound.value:g}")
    return problems


def as_dict(value: Any) -> dict[str, Any]:
    """A dataclass as JSON-ready data, nan as None."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and math.isnan(x):
            return None
        if isinstance(x, float):
            return round(x, 3)
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    result: dict[str, Any] = clean(asdict(value))
    return result
