"""Series recorded from the real engines, for `promtool test rules` (tests/test_alerts.py).

Recorder scrapes each engine's /metrics every `interval` seconds in a thread, as Prometheus
would: a sample holds the families the chart's alerts read, with their labels, plus `up` (1 when
the scrape answered within Prometheus's scrape timeout, 0 when it did not: what Prometheus itself
writes) and the seconds the scrape took. The e2e run marks its
phases (a healthy PD run, traffic sent to decode alone, a broken side channel, prefill stopped,
traffic through a prefill restarted under the engine_id decode had met), so
each phase's samples become one promtool test: the series as the engines exported them, with the
labels the chart's PodMonitor adds (namespace, modelserving, role, pod). The recording is written
to out/e2e/series.json; `python -m support.series` turns one into the fixture
tests/fixtures/alerts/series.json, which the alert tests read.

Time is the one thing changed: samples taken `interval` seconds apart become promtool samples
the test's `interval` apart (the alert tests render the rules with a window and `for` in that scale), so
that a phase of half a minute exercises windows meant for minutes. Counters keep their values, so
every ratio and every zero an alert compares is the engines' own.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mooncake_pd.verify import METRIC_LINE
from support.localpods import get_text
from support.waits import record_wait

LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')
# The labels the chart's PodMonitor puts on every series (chart/templates/_metrics.tpl relabelings,
# and the Prometheus Operator's namespace), for release deepseek-pd in namespace default.
TARGET_LABELS = {"namespace": "default", "modelserving": "deepseek-pd"}
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "alerts" / "series.json"
# Prometheus's default scrape_timeout (10s, prometheus/prometheus docs/configuration/configuration.md),
# which the chart's PodMonitor keeps: it sets an interval only (chart/templates/metrics.yaml). An
# engine's answer time does not shrink with the recording's time scale, so a scrape waits as long
# as Prometheus's would: an engine that answers in 3 s while busy is up, and its sample is late.
# (With a 2 s timeout, vLLM 0.32.0's decode, busy on 2 cores, read as down for 3 samples in a
# row in CI on 2026-12-02, and the recording fired MooncakePdEngineDown on a live engine.)
SCRAPE_TIMEOUT = 10.0


def parse(text: str, keep: frozenset[str]) -> dict[str, float]:
    """{series (name{labels}, labels sorted): value} of the families in `keep`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if not m or m["name"] not in keep:
            continue
        labels = sorted((lm["key"], lm["value"]) for lm in LABEL.finditer((m[2] or "{}")[1:-1]))
        key = m["name"] + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
        out[key] = out.get(key, 0.0) + float(m["value"])
    return out


@dataclass
class Recorder:
    """Scrape `targets` ({role: (pod, url)}) every `interval` s until close(); at most `limit` rounds.
    A round whose scrapes take longer than `interval` starts the next one at once."""

    targets: dict[str, tuple[str, str]]
    keep: frozenset[str]
    interval: float = 1.0
    timeout: float = SCRAPE_TIMEOUT
    # A round starts at most every `interval`, however fast the machine: 2000 rounds at 1 s are
    # 33 min, past the longest recording (the vLLM 0.32.0 e2e run: 445-581 s of wall time).
    limit: int = 2000
    samples: list[dict[str, Any]] = field(default_factory=list)
    phases: dict[str, list[int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Recorder:
        self._thread = threading.Thread(target=self._loop, name="series-recorder", daemon=True)
        self._thread.start()
        return self

    def _scrape(self, url: str) -> str | None:
        """The page, or None where the scrape fails (Prometheus writes up 0)."""
        try:
            return get_text(url, timeout=self.timeout)
        except OSError:
            return None

    def _loop(self) -> None:
        for _ in range(self.limit):
            if self._stop.is_set():
                return
            began = time.monotonic()
            round_: dict[str, Any] = {"t": time.time(), "targets": {}}
            for role, (pod, url) in self.targets.items():
                asked = time.monotonic()
                text = self._scrape(url)
                seconds = round(time.monotonic() - asked, 3)
                series = parse(text, self.keep) if text is not None else {}
                up = int(text is not None)
                round_["targets"][role] = {"pod": pod, "up": up, "seconds": seconds, "series": series}
            self.samples.append(round_)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - began)))

    @contextlib.contextmanager
    def phase(self, name: str, settle: float = 0.0) -> Iterator[Phase]:
        """The samples taken while the block runs (and `settle` s after it) are phase `name`.
        The block gets the phase (its samples so far), to keep its traffic going until the
        phase holds enough samples however long a scrape takes (Phase.samples)."""
        start = len(self.samples)
        try:
            yield Phase(self, start)
        finally:
            self.settle(settle)
            self.phases[name] = [start, len(self.samples)]

    def settle(self, seconds: float) -> int:
        """Wait `seconds`, and until as many samples as `seconds` holds at `interval` have been
        taken since the call: a round of scrapes takes up to `timeout` a target when an engine is
        busy (10-16 s for vLLM 0.32.0's decode on 2 shared cores, docs/operations.md), so a
        fixed sleep holds fewer samples on a slower machine. Bounded by those rounds at their
        slowest; the samples taken."""
        if seconds <= 0:
            return 0
        begun, first = time.monotonic(), len(self.samples)
        want = first + math.ceil(seconds / self.interval)
        slowest = seconds + (want - first + 1) * (len(self.targets) * self.timeout + self.interval)
        time.sleep(seconds)
        while len(self.samples) < want and time.monotonic() - begun < slowest and self.recording():
            time.sleep(0.2)
        taken = len(self.samples) - first
        what = f"{want - first} recorder samples in a {seconds:g} s settle"
        record_wait(what, time.monotonic() - begun, slowest, len(self.samples) >= want)
        return taken

    def recording(self) -> bool:
        """The recorder's thread still takes samples (not closed, `limit` not reached)."""
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            # A round in progress ends within one timeout a target.
            self._thread.join(timeout=len(self.targets) * self.timeout + self.interval)

    def dump(self, path: Path, source: str = "") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        recorded = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.samples[0]["t"])) if self.samples else ""
        data = {
            "source": source,
            "recorded": recorded,
            "interval": self.interval,
            "scrape_timeout": self.timeout,
            "phases": self.phases,
            "samples": self.samples,
        }
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


@dataclass
class Phase:
    """A phase being recorded: its samples so far."""

    recorder: Recorder
    start: int

    @property
    def samples(self) -> int:
        return len(self.recorder.samples) - self.start


# What a phase of traffic must hold for the alert tests (tests/test_alerts.py): they judge from
# the fourth sample on and want traffic rising over at least five. One more for the settle's edge.
PHASE_SAMPLES = 6
# The least a phase of traffic lasts (the alerts' windows, scaled, as before) and the most: on a
# machine whose scrapes take their full timeout, six samples take 6 x 2 x 10 s plus the traffic.
PHASE_MIN_S = 15.0
PHASE_MAX_S = 180.0


def traffic_until(
    phase: Phase,
    send: Callable[[], Any],
    what: str,
    min_rounds: int = 1,
    min_s: float = PHASE_MIN_S,
    max_s: float = PHASE_MAX_S,
    max_rounds: int = 500,
) -> int:
    """Call `send` (one round of traffic) until the phase holds PHASE_SAMPLES, `min_s` has passed
    and `min_rounds` were sent: by samples and time, never by a count of rounds alone, which a
    fast machine spends before the alerts' window fills and a slow one needs longer for. Bounded
    by `max_s` and `max_rounds`; the rounds sent. The wait goes to out/waits.jsonl."""
    begun, rounds = time.monotonic(), 0
    while rounds < max_rounds:
        elapsed = time.monotonic() - begun
        enough = rounds >= min_rounds and elapsed >= min_s and phase.samples >= PHASE_SAMPLES
        if enough or (rounds >= min_rounds and elapsed >= max_s):
            break
        send()
        rounds += 1
    ok = phase.samples >= PHASE_SAMPLES
    record_wait(f"{PHASE_SAMPLES} recorder samples of {what} traffic", time.monotonic() - begun, max_s, ok)
    return rounds


def input_series(recording: dict[str, Any], phase: str) -> list[dict[str, str]]:
    """promtool's input_series for one phase: each series with the PodMonitor's labels, its values
    sample by sample (`_` where a scrape failed: a gap, as in Prometheus), and `up`."""
    start, end = recording["phases"][phase]
    rounds = recording["samples"][start:end]
    names: dict[str, dict[str, str]] = {}
    for round_ in rounds:
        for role, target in round_["targets"].items():
            for key in target["series"]:
                names.setdefault(f"{role}\t{key}", {"role": role, "pod": target["pod"]})
            names.setdefault(f"{role}\tup{{}}", {"role": role, "pod": target["pod"]})
    out = []
    for ident, extra in sorted(names.items()):
        role, key = ident.split("\t")
        name, _, labels = key.partition("{")
        labels = labels.rstrip("}")
        values = []
        for round_ in rounds:
            target = round_["targets"].get(role)
            if name == "up":
                values.append(str(target["up"]) if target else "_")
            elif target and key in target["series"]:
                values.append(repr(target["series"][key]))
            else:
                values.append("_")
        target_labels = ",".join(f'{k}="{v}"' for k, v in {**TARGET_LABELS, **extra}.items())
        series = f"{name}{{{target_labels}{',' if labels else ''}{labels}}}"
        out.append({"series": series, "values": " ".join(values)})
    return out


def main(argv: list[str] | None = None) -> int:
    """Copy a recording (default out/e2e/series.json) to the alert tests' fixture."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("recording", nargs="?", type=Path, default=Path("out/e2e/series.json"))
    parser.add_argument("--to", type=Path, default=FIXTURE)
    args = parser.parse_args(argv)
    data = json.loads(args.recording.read_text())
    args.to.parent.mkdir(parents=True, exist_ok=True)
    args.to.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.to} ({len(data['samples'])} samples, phases {', '.join(data['phases'])}; {data.get('source')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
