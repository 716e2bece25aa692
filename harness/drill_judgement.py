"""Fault drills' judgement (harness/drills.py runs them, `make drills`): each request of a bounded
load is classed against the greedy reference, each drill summed up, and the summary held against
the thresholds docs/failure-modes.md documents (a drill worse than documented fails).

A request is
- `ok`: answered in full, the reference's text;
- `failed`: refused or not answered (connection error, HTTP error): the client knows;
- `truncated`: its stream ended before the end of the answer: the client knows;
- `wrong`: answered in full, not the reference's text: the silent one, which must never happen.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("ok", "failed", "truncated", "wrong")


@dataclass(frozen=True)
class Request:
    """One request of the load: when it was sent and ended (seconds on the drill's clock), which
    prompt, and what came back (text None: nothing; complete False: the stream broke)."""

    start: float
    end: float
    prompt: int
    text: str | None
    complete: bool
    error: str = ""


def classify(request: Request, reference: list[str]) -> str:
    if request.text is None:
        return "failed"
    if not request.complete:
        return "truncated"
    return "ok" if request.text == reference[request.prompt] else "wrong"


@dataclass(frozen=True)
class Summary:
    drill: str
    requests: int
    counts: dict[str, int]
    # Seconds from the fault to the end of the first right answer to a request sent after it (or
    # after the fault settled: settled_s); None: no such request was answered right.
    recovery_s: float | None
    errors: list[str]
    # The classes of the requests in flight when the fault hit (sent before it, ended after).
    in_flight: dict[str, int]
    # A few requests that were not ok: prompt, class, what came back, the reference, the error.
    samples: list[dict[str, object]] = field(default_factory=list)
    # A fault that takes a while to play out (a rollout): seconds from it until it was done.
    settled_s: float | None = None
    # The longest time from the fault on in which no right answer ended (outage()).
    outage_s: float = 0.0
    # What the drill itself observed beside the requests (e.g. a workaround it applied).
    notes: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "drill": self.drill,
            "requests": self.requests,
            **{kind: self.counts.get(kind, 0) for kind in KINDS},
            "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 1),
            "in_flight": {kind: self.in_flight.get(kind, 0) for kind in KINDS},
            "errors": self.errors,
            "samples": self.samples,
            "outage_s": self.outage_s,
            **self.notes,
            **({} if self.settled_s is None else {"settled_s": self.settled_s}),
        }


def outage(requests: list[Request], kinds: list[str], fault_at: float) -> float:
    """The longest time from the fault on without a right answer ending: between the fault (or
    a right answer's end) and the next right answer's end, or the last request's end."""
    ends = sorted(r.end for r, kind in zip(requests, kinds, strict=True) if kind == "ok" and r.end >= fault_at)
    points = [fault_at, *ends, max((r.end for r in requests), default=fault_at)]
    return max(0.0, *(b - a for a, b in itertools.pairwise(points)))


def summarize(
    drill: str, requests: list[Request], reference: list[str], fault_at: float, settled_at: float | None = None
) -> Summary:
    """`settled_at`: where the fault takes a while (a rollout), when it was done; recovery then
    counts until the first right answer to a request sent after that."""
    kinds = [classify(r, reference) for r in requests]
    since = fault_at if settled_at is None else settled_at
    after = [r.end for r, kind in zip(requests, kinds, strict=True) if kind == "ok" and r.start >= since]
    errors = sorted({r.error for r in requests if r.error})[:5]
    in_flight = Counter(kind for r, kind in zip(requests, kinds, strict=True) if r.start < fault_at <= r.end)
    recovery = min(after) - fault_at if after else None
    # The silent ones first, then the truncated ones: what a reader of the summary must see.
    order = {"wrong": 0, "truncated": 1, "failed": 2}
    bad = sorted(((r, k) for r, k in zip(requests, kinds, strict=True) if k != "ok"), key=lambda rk: order[rk[1]])
    samples: list[dict[str, object]] = [
        {
            "kind": k,
            "sent_s": round(r.start - fault_at, 2),
            "text": r.text,
            "reference": reference[r.prompt],
            "error": r.error,
        }
        for r, k in bad[:4]
    ]
    settled = None if settled_at is None else round(settled_at - fault_at, 1)
    return Summary(
        drill,
        len(requests),
        dict(Counter(kinds)),
        recovery,
        errors,
        dict(in_flight),
        samples,
        settled,
        round(outage(requests, kinds, fault_at), 1),
    )


@dataclass(frozen=True)
class Threshold:
    failed: int
    truncated: int
    wrong: int
    recovery_s: float


def thresholds(doc: Path) -> dict[str, Threshold]:
    """The table of docs/failure-modes.md whose first column is the drill's name in backticks and
    whose last four columns are the documented worst: failed, truncated, wrong, recovery (s)."""
    found = {}
    for line in doc.read_text().splitlines():
        m = re.match(
            r"^\| `(?P<name>[a-z-]+)` \|.*\| (?P<f>\d+) \| (?P<t>\d+) \| (?P<w>\d+) \| (?P<r>\d+(?:\.\d+)?) \|$", line
        )
        if m:
            found[m["name"]] = Threshold(int(m["f"]), int(m["t"]), int(m["w"]), float(m["r"]))
    return found


def worse_than_documented(summary: Summary, limit: Threshold | None) -> list[str]:
    """What of a drill's summary exceeds its documented worst ([] when within)."""
    if limit is None:
        return [f"{summary.drill}: no documented threshold in docs/failure-modes.md"]
    problems = []
    for kind in ("failed", "truncated", "wrong"):
        count, most = summary.counts.get(kind, 0), getattr(limit, kind)
        if count > most:
            problems.append(f"{summary.drill}: {count} {kind} requests, documented at most {most}")
    if summary.recovery_s is None:
        problems.append(f"{summary.drill}: no right answer after the fault")
    elif summary.recovery_s > limit.recovery_s:
        problems.append(f"{summary.drill}: recovered in {summary.recovery_s:.1f} s, documented {limit.recovery_s:g} s")
    return problems
