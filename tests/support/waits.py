"""What every bounded wait of the cluster and e2e tests shares (kube.api.wait_for,
localpods.wait_ready, series.Recorder's settle).

How a bound is set: from a figure measured on the 2-core machine (README, docs/, the commit
messages, out/), with room for a one-core CPU hog beside the run (`make flake-check`: about twice
as slow) and a margin on top. A bound too wide only costs time when something is broken; one too
tight fails a change that works. Each bound's comment gives its figure.

What a wait that runs out says, on its first line (measure_tests.py keeps 300 characters of a
failure): what it waited for, and what it last saw (the pods and their states, an object's
status, the last HTTP answer or error); a log's tail may follow on the next lines.

Every wait_for and wait_ready adds one line to out/waits.jsonl (what, seconds, bound, whether it
came, the load): the figure the next bound is set from, and under what load it was taken.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

WAITS = Path(__file__).resolve().parents[2] / "out" / "waits.jsonl"
# What was seen, on the message's first line; a log's tail after it.
SEEN_CHARS = 240
DETAIL_CHARS = 3000


def brief(value: object, limit: int = SEEN_CHARS) -> str:
    """`value` on one line, at most `limit` characters (a timeout's message stays short)."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def record_wait(what: str, seconds: float, bound: float, ok: bool) -> None:
    """One line of out/waits.jsonl: what was waited for, how long, its bound, whether it came,
    and the machine's load at the end (1-minute average per core; above 1 the cores are shared)."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
        line = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "what": what,
            "seconds": round(seconds, 1),
            "bound": bound,
            "ok": ok,
            "load_per_cpu": round(load, 2),
        }
        WAITS.parent.mkdir(parents=True, exist_ok=True)
        with WAITS.open("a") as out:
            out.write(json.dumps(line) + "\n")
    except OSError:
        pass  # the record is a measurement, never a reason to fail the wait
