"""Measure how long the tests take on this machine and where the time goes, and check them for flaky waits.

Each run runs pytest once per stage, the stages in order. A stage is `--stage NAME=PYTEST_ARGS`
(repeatable; PYTEST_ARGS split as a shell would), or the arguments after `--`, which make one
stage named "tests". The JUnit XML of each run and stage goes to OUT/junit-RUN-STAGE.xml, and
the summary to OUT/summary.json: every run's and stage's wall time, pytest exit code, counts and
failures with their causes (the failed test's id and the first lines of its message); the
runs' minimum, median and maximum wall times; the last run's test times per file and its
slowest tests; the flaky tests (those that failed in some runs but not all).

Time (`make test-time`): the arguments of `make unit` after `--`, RUNS times. Speed targets are
measured here, not asserted by timed tests: with --budget S the exit code is 1 when the median
run took longer than S seconds. Without --keep-going a failing run stops the measurement at
once (a failing run measures nothing) and the exit code is pytest's.

Flaky waits (`make flake-check`): the gate's cluster and e2e stages, RUNS times, beside
--hog N busy loops that each take one core, with --keep-going so that every run goes on and
each failure is reported with its cause; the exit code is 1 when any run failed:

  measure_tests.py --runs 5 --hog 1 --keep-going --out out/flake-check \\
      --stage cluster='-m cluster' --stage e2e='-m "e2e and not full"'

The hogs are stopped by PID when the runs end, fail or are interrupted (Ctrl-C, SIGTERM), and
each hog also stops by itself when this script's process goes away (even on SIGKILL).


Over 400 lines: the driver of `make test-time` and `make flake-check`: the runs, the CPU hogs and
the pytest processes it stops, and the report it writes; test_measure_tests loads it by path and
checks both halves."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "out" / "test-time"
# Where every bounded wait of the cluster and e2e tests records itself (tests/support/waits.py).
WAITS = REPO / "out" / "waits.jsonl"
CLOSEST = 5
CAUSE_CHARS = 300
# A busy loop that takes one core, until its parent (argv[1]) is gone: it checks every ~20 ms.
HOG = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(500_000):\n"
    "        pass\n"
)
# Seconds a stopped pytest has to tear its fixtures down: the e2e stops each engine with a 10 s
# grace (localpods), a cluster's components with 10 s each (STOP_GRACE in tests/support/kube).
TEARDOWN_GRACE = 120.0
# What pytest's exit codes mean (pytest.ExitCode), for a stage that failed without a failed test.
EXIT_CODES = {1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}


@dataclass(frozen=True)
class TestTime:
    file: str
    name: str
    seconds: float


@dataclass(frozen=True)
class Failure:
    """A failed or errored test case, or a stage that failed without one (test is then the stage)."""

    test: str
    outcome: str  # "failed" or "error"
    cause: str


@dataclass(frozen=True)
class Outcomes:
    passed: int
    failed: int
    error: int
    skipped: int
    failures: tuple[Failure, ...]


@dataclass(frozen=True)
class Stage:
    name: str
    pytest_args: tuple[str, ...]


def _file(classname: str, name: str) -> str:
    """The test file of a test case from the class name pytest writes (tests.test_x.Class ->
    tests/test_x.py); a collection error has none, and its name is the module (tests.test_x)."""
    parts = (classname or name).split(".")
    return "/".join(p for p in parts if not p[:1].isupper()) + ".py"


def case_id(case: ET.Element) -> str:
    """file::name of a JUnit test case, or the file alone for a collection error."""
    classname, name = case.get("classname", ""), case.get("name", "")
    return f"{_file(classname, name)}::{name}" if classname else _file(classname, name)


def parse_junit(text: str) -> list[TestTime]:
    """Each test case of a JUnit XML report (pytest --junitxml) with its time (setup, call and
    teardown); its file from the class name pytest writes (tests.test_x.Class -> tests/test_x.py)."""
    found = []
    for case in ET.fromstring(text).iter("testcase"):
        file = _file(case.get("classname", ""), case.get("name", ""))
        found.append(TestTime(file, case.get("name", ""), float(case.get("time") or 0)))
    return found


def cause(message: str, text: str = "", limit: int = CAUSE_CHARS) -> str:
    """The first lines of a failure's message (or, without one, the last line of its report),
    on one line, trimmed to `limit` characters."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        lines = [line.strip() for line in text.splitlines() if line.strip()][-1:]
    joined = " | ".join(lines) or "(no message)"
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


def parse_outcomes(text: str) -> Outcomes:
    """The counts of a JUnit XML report's test cases by outcome, and each failed or errored one
    with its cause."""
    counts: Counter[str] = Counter()
    failures = []
    for case in ET.fromstring(text).iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            outcome = "failed" if bad.tag == "failure" else "error"
            failures.append(Failure(case_id(case), outcome, cause(bad.get("message", ""), bad.text or "")))
        else:
            outcome = "skipped" if case.find("skipped") is not None else "passed"
        counts[outcome] += 1
    return Outcomes(counts["passed"], counts["failed"], counts["error"], counts["skipped"], tuple(failures))


def stage_result(run: int, stage: str, seconds: float, exit_code: int, junit_text: str | None) -> dict[str, Any]:
    """What one stage of one run found. A stage that exited non-zero without a failed test case
    (no tests collected, a usage error, no report at all) gets one failure naming the stage."""
    outcomes = parse_outcomes(junit_text) if junit_text else Outcomes(0, 0, 0, 0, ())
    failures = list(outcomes.failures)
    if exit_code != 0 and not failures:
        meaning = EXIT_CODES.get(exit_code, "killed by a signal" if exit_code < 0 else "unknown")
        missing = "" if junit_text else ", no JUnit report"
        failures.append(Failure(f"stage {stage}", "error", f"pytest exited {exit_code} ({meaning}{missing})"))
    return {
        "run": run,
        "stage": stage,
        "wall_seconds": round(seconds, 1),
        "exit_code": exit_code,
        "passed": outcomes.passed,
        "failed": outcomes.failed,
        "error": outcomes.error,
        "skipped": outcomes.skipped,
        "failures": [asdict(f) for f in failures],
    }


def flaky(per_run: list[list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The tests that failed in some runs but not all (with those runs, 1-based), and those that
    failed in every run; per_run holds each run's stage results."""
    failed_in: defaultdict[str, set[int]] = defaultdict(set)
    for run, stages in enumerate(per_run, 1):
        for stage in stages:
            for failure in stage["failures"]:
                failed_in[failure["test"]].add(run)
    runs = len(per_run)
    some = [{"test": t, "failed_in_runs": sorted(r)} for t, r in sorted(failed_in.items()) if len(r) < runs]
    return some, sorted(t for t, r in failed_in.items() if len(r) == runs)


def per_file(times: list[TestTime]) -> list[tuple[str, float, int]]:
    """(file, seconds, tests) for each file, the slowest first."""
    seconds: defaultdict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for t in times:
        seconds[t.file] += t.seconds
        counts[t.file] += 1
    return [(f, round(s, 1), counts[f]) for f, s in sorted(seconds.items(), key=lambda item: -item[1])]


def summary(
    walls: list[float],
    times: list[TestTime],
    budget: float | None,
    slowest: int = 15,
    per_run: list[list[dict[str, Any]]] | None = None,
    hogs: int = 0,
) -> dict[str, Any]:
    """What a measurement found: walls of every run, the last run's test times, and each run's
    stages with their failures and causes."""
    median = statistics.median(walls)
    per_run = per_run or []
    some, every = flaky(per_run) if per_run else ([], [])
    return {
        "runs": len(walls),
        "hogs": hogs,
        "cpus": os.cpu_count(),
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
        "per_run": [
            {
                "run": run,
                "wall_seconds": round(wall, 1),
                "ok": all(s["exit_code"] == 0 for s in stages),
                "stages": stages,
            }
            for run, (wall, stages) in enumerate(zip(walls, per_run, strict=False), 1)
        ],
        "failed_runs": sum(any(s["exit_code"] != 0 for s in stages) for stages in per_run),
        "failures": sum(len(s["failures"]) for stages in per_run for s in stages),
        "flaky_tests": some,
        "always_failing": every,
    }


def read_waits(path: Path, offset: int) -> list[dict[str, Any]]:
    """The bounded waits recorded in `path` past byte `offset` (those of this measurement); a
    line cut short or foreign is skipped."""
    if not path.exists():
        return []
    with path.open("rb") as lines:
        lines.seek(offset)
        found = []
        for raw in lines:
            try:
                wait = json.loads(raw)
            except ValueError:
                continue
            if isinstance(wait, dict) and {"what", "seconds", "bound", "ok"} <= set(wait) and wait["bound"]:
                found.append(wait)
    return found


def closest_waits(waits: list[dict[str, Any]], top: int = CLOSEST) -> dict[str, Any]:
    """How near its bound each wait came: the count, those that ran out, and the `top` closest
    of those that came in time (seconds over bound), each with the load it was taken under."""
    came = sorted((w for w in waits if w["ok"]), key=lambda w: -w["seconds"] / w["bound"])
    return {
        "waits": len(waits),
        "ran_out": [w["what"] for w in waits if not w["ok"]],
        "closest": [
            {
                "what": w["what"],
                "seconds": w["seconds"],
                "bound": w["bound"],
                "fraction": round(w["seconds"] / w["bound"], 3),
                "load_per_cpu": w.get("load_per_cpu"),
            }
            for w in came[:top]
        ],
    }


def _counts(stage: dict[str, Any]) -> str:
    found = [f"{stage[k]} {k}" for k in ("passed", "failed", "error", "skipped") if stage[k]]
    return f"{stage['stage']} {', '.join(found) or 'no tests'} (exit {stage['exit_code']}, {stage['wall_seconds']} s)"


def failure_lines(stages: list[dict[str, Any]]) -> list[str]:
    """Each failure of some stage results, with its run, stage and cause, one a line."""
    return [
        f"  run {s['run']} {s['stage']}: {f['test']} {f['outcome']}: {f['cause']}"
        for s in stages
        for f in s["failures"]
    ]


def report(result: dict[str, Any]) -> str:
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
    lines.append(f"runs ({result['hogs']} CPU hog(s) beside them, {result['cpus']} CPUs):")
    lines += [
        f"  run {r['run']}: {r['wall_seconds']} s, {'ok' if r['ok'] else 'FAILED'}; "
        + "; ".join(_counts(s) for s in r["stages"])
        for r in result["per_run"]
    ]
    every_stage = [s for r in result["per_run"] for s in r["stages"]]
    if result["failures"]:
        lines.append("failures:")
        lines += failure_lines(every_stage)
    lines += [
        f"flaky: {e['test']} failed in run(s) {', '.join(map(str, e['failed_in_runs']))}" for e in result["flaky_tests"]
    ]
    lines += [f"failed in every run: {t}" for t in result["always_failing"]]
    waits = result.get("waits")
    if waits and waits["waits"]:
        lines.append(f"bounded waits: {waits['waits']}, {len(waits['ran_out'])} ran out; the closest to its bound:")
        lines += [
            f"  {w['fraction']:6.1%}  {w['seconds']} s of {w['bound']} s  {w['what']} (load {w['load_per_cpu']}/CPU)"
            for w in waits["closest"]
        ]
    lines.append(
        f"{result['runs']} run(s), {result['failed_runs']} failed, {result['failures']} failure(s), "
        f"{len(result['flaky_tests'])} flaky test(s), beside {result['hogs']} CPU hog(s)"
    )
    return "\n".join(lines)


def hog_command(parent: int) -> list[str]:
    """A busy loop that takes one core until the process `parent` is gone."""
    return [sys.executable, "-c", HOG, str(parent)]


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def hogs(count: int) -> Iterator[list[int]]:
    """`count` busy loops, one core each, while the block runs; their PIDs. They are stopped in a
    `finally`, also on an exception, Ctrl-C or (in the main thread) SIGTERM."""
    procs: list[subprocess.Popen[bytes]] = []
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm) if main_thread else None
    try:
        for _ in range(count):
            procs.append(subprocess.Popen(hog_command(os.getpid()), stdin=subprocess.DEVNULL))
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_to_end(command: list[str]) -> int:
    """Run pytest and return its exit code. When this script is stopped (SIGTERM, Ctrl-C), pytest
    gets SIGTERM and TEARDOWN_GRACE seconds to tear its fixtures down (tests/conftest.py turns
    SIGTERM into an interrupt), so the clusters and engines it started are stopped by their own
    fixtures; subprocess.run would SIGKILL it and leave them running."""
    proc = subprocess.Popen(command, cwd=REPO)
    try:
        return proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(timeout=TEARDOWN_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


def parse_stage(text: str) -> Stage:
    """NAME=PYTEST_ARGS, the arguments split as a shell would (cluster='-m cluster')."""
    name, sep, rest = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise argparse.ArgumentTypeError(f"expected NAME=PYTEST_ARGS with NAME of letters, digits, _.-: {text!r}")
    try:
        return Stage(name, tuple(shlex.split(rest)))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from e


def _parses(text: str) -> bool:
    try:
        ET.fromstring(text)
    except ET.ParseError:
        return False
    return True


def run_stage(run: int, stage: Stage, out: Path) -> tuple[dict[str, Any], list[TestTime]]:
    """Run one stage's pytest once: its result and its tests' times."""
    junit = out / f"junit-{run}-{stage.name}.xml"
    junit.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", *stage.pytest_args, "-q", f"--junitxml={junit}"]
    print(f"run {run} {stage.name}: {shlex.join(command[1:])}", flush=True)
    start = time.monotonic()
    returncode = run_to_end(command)
    seconds = time.monotonic() - start
    text = junit.read_text() if junit.exists() else None
    if text is not None and not _parses(text):
        text = None  # a report cut short counts as none
    result = stage_result(run, stage.name, seconds, returncode, text)
    print(f"run {run} {_counts(result)}", flush=True)
    return result, parse_junit(text) if text else []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, its stages (Stage) in args.stages."""
    parser = argparse.ArgumentParser(
        prog="measure_tests.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1, help="how many times to run the tests (default: 1)")
    parser.add_argument("--budget", type=float, help="seconds the median run may take; exit 1 beyond them")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write summary.json (default: {OUT})")
    parser.add_argument("--hog", type=int, default=0, metavar="N", help="busy loops beside the runs, one core each")
    parser.add_argument("--keep-going", action="store_true", help="go on after a failing run; exit 1 at the end")
    parser.add_argument(
        "--stage", type=parse_stage, action="append", default=[], metavar="NAME=PYTEST_ARGS", help="a stage of a run"
    )
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments, after --: one stage named tests")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.hog < 0:
        parser.error("--hog must be at least 0")
    if args.stage and args.pytest_args:
        parser.error("give the stages with --stage or the pytest arguments after --, not both")
    args.stages = args.stage or [Stage("tests", tuple(args.pytest_args))]
    if len({s.name for s in args.stages}) < len(args.stages):
        parser.error("the stages' names must differ")
    return args


Runs = tuple[list[float], list[list[dict[str, Any]]], list[TestTime]]


def run_all(stages: list[Stage], runs: int, out: Path, keep_going: bool) -> Runs | int:
    """Every run's wall time and stage results, and the last run's test times; or, without
    keep_going, the exit code of the first failing stage."""
    walls: list[float] = []
    per_run: list[list[dict[str, Any]]] = []
    times: list[TestTime] = []
    for run in range(1, runs + 1):
        start, results, times = time.monotonic(), [], []
        for stage in stages:
            result, stage_times = run_stage(run, stage, out)
            results.append(result)
            times += stage_times
            if result["exit_code"] != 0 and not keep_going:
                print("\n".join(failure_lines([result])), file=sys.stderr)
                print(
                    f"measure_tests: pytest exited {result['exit_code']}; a failing run measures nothing",
                    file=sys.stderr,
                )
                return int(result["exit_code"])
        walls.append(time.monotonic() - start)
        per_run.append(results)
    return walls, per_run, times


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    waits_offset = WAITS.stat().st_size if WAITS.exists() else 0
    with hogs(args.hog) as pids:
        if pids:
            print(f"{len(pids)} CPU hog(s) beside the runs, PIDs {' '.join(map(str, pids))}", flush=True)
        found = run_all(args.stages, args.runs, args.out, args.keep_going)
    if isinstance(found, int):
        return found
    walls, per_run, times = found
    result = summary(walls, times, args.budget, per_run=per_run, hogs=args.hog)
    result["waits"] = closest_waits(read_waits(WAITS, waits_offset))
    (args.out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    return 1 if result["within_budget"] is False or result["failed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
