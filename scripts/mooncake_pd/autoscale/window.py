"""Sliding windows (window:37-183), immutable: each operation returns a new window; and a
role's state, its five history windows. Citations are `file:lines` of volcano-sh/kthena@3cc0572,
abbreviated as listed in mooncake_pd.autoscale."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mooncake_pd.autoscale.policy import Behavior


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
