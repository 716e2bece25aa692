"""Measure how long the tests take on this machine, and where the time goes.

Runs pytest with the arguments given after `--` (`make test-time` passes those of `make unit`:
everything but the e2e, in two processes) RUNS times, then prints each run's wall time, their
minimum, median and maximum, the tests' own time per file and the slowest tests, and writes the
same to out/test-time/summary.json. Speed targets are measured here, not asserted by timed
tests: with --budget S the exit code is 1 when the median run took longer than S seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "out" / "test-time"


@dataclass(frozen=True)
class TestTime:
    file: str
    name: str
    seconds: float


def parse_junit(text: str) -> list[TestTime]:
    """Each test case of a JUnit XML report (pytest --junitxml) with its time (setup, call and
    teardown); its file from the class name pytest writes (tests.test_x.Class -> tests/test_x.py)."""
    found = []
    for case in ET.fromstring(text).iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = [p for p in parts if not p[:1].isupper()]
        found.append(TestTime("/".join(module) + ".py", case.get("name", ""), float(case.get("time") or 0)))
    return found


def per_file(times: list[TestTime]) -> list[tuple[str, float, int]]:
    """(file, seconds, tests) for each file, the slowest first."""
    seconds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for t in times:
        seconds[t.file] += t.seconds
        counts[t.file] += 1
    return [(f, round(s, 1), counts[f]) for f, s in seconds.most_common()]


def summary(walls: list[float], times: list[TestTime], budget: float | None, slowest: int = 15) -> dict:
    """What a measurement found: walls of every run, and the last run's test times."""
    median = statistics.median(walls)
    return {
        "runs": len(walls),
        "wall_seconds": [round(w, 1) for w in walls],
        "wall_min": round(min(walls), 1),
        "wall_median": round(median, 1),
        "wall_max": round(max(walls), 1),
        "budget_seconds": budget,
        "within_budget": None if budget is None else median <= budget,
        "tests": len(times),
        "test_seconds": round(sum(t.seconds for t in times), 1),
        "per_file": [{"file": f, "seconds": s, "tests": n} for f, s, n in per_file(times)],
        "slowest": [
            {"test": f"{t.file}::{t.name}", "seconds": round(t.seconds, 2)}
            for t in sorted(times, key=lambda t: -t.seconds)[:slowest]
        ],
    }


def report(result: dict) -> str:
    lines = [
        f"wall: {', '.join(f'{w:.1f}' for w in result['wall_seconds'])} s "
        f"(min {result['wall_min']}, median {result['wall_median']}, max {result['wall_max']})",
        f"{result['tests']} tests, their own times add up to {result['test_seconds']} s",
    ]
    if result["budget_seconds"] is not None:
        verdict = "within" if result["within_budget"] else "OVER"
        lines.append(f"median {verdict} the budget of {result['budget_seconds']} s")
    lines.append("per file (s, tests):")
    lines += [f"  {e['seconds']:7.1f} {e['tests']:5d}  {e['file']}" for e in result["per_file"]]
    lines.append("slowest tests (s):")
    lines += [f"  {e['seconds']:7.2f}  {e['test']}" for e in result["slowest"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="measure_tests.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1, help="how many times to run the tests (default: 1)")
    parser.add_argument("--budget", type=float, help="seconds the median run may take; exit 1 beyond them")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write summary.json (default: {OUT})")
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments, after --")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    junit = args.out / "junit.xml"
    walls = []
    for run in range(args.runs):
        command = [sys.executable, "-m", "pytest", *args.pytest_args, "-q", f"--junitxml={junit}"]
        print(f"run {run + 1}/{args.runs}: {' '.join(command[1:])}", flush=True)
        start = time.monotonic()
        proc = subprocess.run(command, cwd=REPO, check=False)
        walls.append(time.monotonic() - start)
        if proc.returncode != 0:
            print(f"measure_tests: pytest exited {proc.returncode}; a failing run measures nothing", file=sys.stderr)
            return proc.returncode
    result = summary(walls, parse_junit(junit.read_text()), args.budget)
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    return 1 if result["within_budget"] is False else 0


if __name__ == "__main__":
    sys.exit(main())
