"""harness/measure_tests.py, which `make test-time` runs: the wall time of the tests and where it
goes, measured, with the budget checked by the script rather than by a timed test; and `make
flake-check`: the stages run again and again beside a CPU hog, each failure reported with its cause."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mooncake_pd import paths

SCRIPT = paths.REPO / "harness" / "measure_tests.py"
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one[helm3]" time="1.5" />
<testcase classname="tests.test_a" name="test_one[helm4]" time="0.5" />
<testcase classname="tests.test_b.TestGroup" name="test_two" time="3.25" />
<testcase classname="tests.test_c" name="test_skipped" time="" />
</testsuite></testsuites>"""


@pytest.fixture(scope="module")
def measure():
    spec = importlib.util.spec_from_file_location("measure_tests", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["measure_tests"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["measure_tests"]


def test_junit_times_add_up_per_file(measure):
    times = measure.parse_junit(JUNIT)
    assert [(t.file, t.seconds) for t in times] == [
        ("tests/test_a.py", 1.5),
        ("tests/test_a.py", 0.5),
        ("tests/test_b.py", 3.25),
        ("tests/test_c.py", 0.0),
    ]
    assert measure.per_file(times) == [
        ("tests/test_b.py", 3.2, 1),
        ("tests/test_a.py", 2.0, 2),
        ("tests/test_c.py", 0.0, 1),
    ]


@pytest.mark.parametrize(("budget", "within"), [(None, None), (120.0, True), (100.0, False)])
def test_the_budget_is_checked_on_the_median_run(measure, budget, within):
    result = measure.summary([130.0, 110.0, 95.0], measure.parse_junit(JUNIT), budget)
    assert (result["wall_min"], result["wall_median"], result["wall_max"]) == (95.0, 110.0, 130.0)
    assert result["within_budget"] is within
    assert result["slowest"][0] == {"test": "tests/test_b.py::test_two", "seconds": 3.25}
    assert result["test_seconds"] == 5.2


FAILING = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_ok" time="0.1" />
<testcase classname="tests.test_a.TestWait" name="test_pods[p1]" time="60.0">
<failure message="TimeoutError: pods not ready after 60 s&#10;saw: p-0 Pending">traceback</failure></testcase>
<testcase classname="tests.test_b" name="test_setup" time="0.2">
<error message="failed on setup with &quot;OSError: port in use&quot;">trace</error></testcase>
<testcase classname="tests.test_b" name="test_no_message" time="0.2">
<failure message="">line one&#10;E   AssertionError: last line&#10;</failure></testcase>
<testcase classname="tests.test_c" name="test_skip" time="0"><skipped message="no cluster" /></testcase>
<testcase classname="" name="tests.test_d" time="0"><error message="collection failure">boom</error></testcase>
</testsuite></testsuites>"""


def test_a_junit_report_gives_counts_and_each_failure_with_its_cause(measure):
    outcomes = measure.parse_outcomes(FAILING)
    assert (outcomes.passed, outcomes.failed, outcomes.error, outcomes.skipped) == (1, 2, 2, 1)
    assert [(f.test, f.outcome, f.cause) for f in outcomes.failures] == [
        ("tests/test_a.py::test_pods[p1]", "failed", "TimeoutError: pods not ready after 60 s | saw: p-0 Pending"),
        ("tests/test_b.py::test_setup", "error", 'failed on setup with "OSError: port in use"'),
        ("tests/test_b.py::test_no_message", "failed", "E   AssertionError: last line"),
        ("tests/test_d.py", "error", "collection failure"),
    ]
    assert measure.parse_outcomes(JUNIT).failures == ()


def test_a_cause_is_trimmed(measure):
    assert measure.cause("x" * 1000) == "x" * 299 + "…"
    assert len(measure.cause("a\n" * 400)) == 300
    assert measure.cause("", "") == "(no message)"


@pytest.mark.parametrize(
    ("exit_code", "junit", "cause"),
    [
        (5, JUNIT.replace("testcase", "nothing"), "pytest exited 5 (no tests collected)"),
        (4, None, "pytest exited 4 (usage error, no JUnit report)"),
        (-9, None, "pytest exited -9 (killed by a signal, no JUnit report)"),
    ],
)
def test_a_stage_failing_without_a_failed_test_is_a_failure_of_the_stage(measure, exit_code, junit, cause):
    result = measure.stage_result(2, "e2e", 1.23, exit_code, junit)
    assert result["failures"] == [{"test": "stage e2e", "outcome": "error", "cause": cause}]
    assert (result["run"], result["stage"], result["wall_seconds"], result["exit_code"]) == (2, "e2e", 1.2, exit_code)


def test_a_report_cut_short_counts_as_none(measure):
    assert measure._parses(JUNIT) and not measure._parses(JUNIT[:200])


def test_flaky_tests_failed_in_some_runs_but_not_all(measure):
    ok = measure.stage_result(1, "cluster", 1.0, 0, JUNIT)
    bad = measure.stage_result(2, "cluster", 1.0, 1, FAILING)
    again = measure.stage_result(3, "cluster", 1.0, 1, FAILING.replace("test_pods[p1]", "test_pods[p2]"))
    some, every = measure.flaky([[ok, ok], [bad, ok], [ok, again]])
    assert some == [
        {"test": "tests/test_a.py::test_pods[p1]", "failed_in_runs": [2]},
        {"test": "tests/test_a.py::test_pods[p2]", "failed_in_runs": [3]},
        {"test": "tests/test_b.py::test_no_message", "failed_in_runs": [2, 3]},
        {"test": "tests/test_b.py::test_setup", "failed_in_runs": [2, 3]},
        {"test": "tests/test_d.py", "failed_in_runs": [2, 3]},
    ]
    assert every == []
    assert measure.flaky([[bad], [bad]])[1][0] == "tests/test_a.py::test_pods[p1]"


def test_the_summary_counts_runs_failures_and_flaky_tests(measure):
    ok = measure.stage_result(1, "cluster", 10.0, 0, JUNIT)
    bad = measure.stage_result(2, "e2e", 20.0, 1, FAILING)
    result = measure.summary([30.0, 40.0], measure.parse_junit(JUNIT), None, per_run=[[ok, ok], [ok, bad]], hogs=1)
    assert (result["runs"], result["hogs"], result["failed_runs"], result["failures"]) == (2, 1, 1, 4)
    assert [r["ok"] for r in result["per_run"]] == [True, False]
    assert result["per_run"][1]["stages"][1]["failures"][0]["test"] == "tests/test_a.py::test_pods[p1]"
    assert len(result["flaky_tests"]) == 4 and result["always_failing"] == []
    text = measure.report(result)
    assert "run 2 e2e: tests/test_a.py::test_pods[p1] failed: TimeoutError: pods not ready" in text
    assert "2 run(s), 1 failed, 4 failure(s), 4 flaky test(s), beside 1 CPU hog(s)" in text


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("cluster=-m cluster", "cluster", ("-m", "cluster")),
        ('e2e=-m "e2e and not full"', "e2e", ("-m", "e2e and not full")),
        ("all=", "all", ()),
    ],
)
def test_a_stage_is_a_name_and_pytest_args_split_as_a_shell_would(measure, text, name, args):
    assert measure.parse_stage(text) == measure.Stage(name, args)


@pytest.mark.parametrize("text", ["-m cluster", "=x", "a b=-x", 'e2e=-m "open'])
def test_a_malformed_stage_is_refused(measure, text):
    with pytest.raises(argparse.ArgumentTypeError):
        measure.parse_stage(text)


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def test_hogs_run_while_the_block_does_and_are_stopped_after_it_even_on_failure(measure):
    with pytest.raises(RuntimeError), measure.hogs(2) as pids:
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        raise RuntimeError
    assert not any(_alive(p) for p in pids)
    with measure.hogs(0) as none:
        assert none == []


def test_a_hog_stops_by_itself_when_its_parent_is_gone(measure):
    """Even when the script is killed (SIGKILL) and stops nothing, its hogs go."""
    spawn = "import json, os, subprocess, sys\ncmd = json.loads(sys.argv[1])\ncmd[-1] = str(os.getpid())\n"
    spawn += "print(subprocess.Popen(cmd).pid)\n"
    proc = subprocess.run(
        [sys.executable, "-c", spawn, json.dumps(measure.hog_command(0))], capture_output=True, text=True, check=True
    )
    assert _gone(int(proc.stdout))


def _stage(name: str, path: Path) -> str:
    return f"--stage={name}={shlex.quote(str(path))} -p no:cacheprovider"


def test_keep_going_runs_every_stage_of_every_run_beside_the_hogs_and_reports_each_failure(tmp_path: Path):
    """The flake check as `make flake-check` runs it: a test that fails in the first run only is
    flaky, its cause reported; the hogs are gone when the script returns."""
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    marker = tmp_path / "ran-once"
    (tmp_path / "test_flaky.py").write_text(
        "from pathlib import Path\n\n\ndef test_first_time_fails():\n"
        f"    marker = Path({str(marker)!r})\n    first = not marker.exists()\n    marker.touch()\n"
        "    assert not first, 'pods not ready after 60 s'\n"
    )
    out = tmp_path / "out"
    argv = [sys.executable, str(SCRIPT), "--runs", "2", "--hog", "1", "--keep-going", "--out", str(out)]
    argv += [_stage("ok", tmp_path / "test_ok.py"), _stage("flaky", tmp_path / "test_flaky.py")]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    pids = [int(p) for p in re.search(r"CPU hog\(s\) beside the runs, PIDs ([\d ]+)", proc.stdout)[1].split()]
    assert len(pids) == 1 and not _alive(pids[0])
    assert sorted(p.name for p in out.glob("junit-*.xml")) == [
        "junit-1-flaky.xml",
        "junit-1-ok.xml",
        "junit-2-flaky.xml",
        "junit-2-ok.xml",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runs"], summary["hogs"], summary["failed_runs"], summary["failures"]) == (2, 1, 1, 1)
    assert [
        [(s["stage"], s["exit_code"], s["passed"], s["failed"]) for s in r["stages"]] for r in summary["per_run"]
    ] == [
        [("ok", 0, 1, 0), ("flaky", 1, 0, 1)],
        [("ok", 0, 1, 0), ("flaky", 0, 1, 0)],
    ]
    failure = summary["per_run"][0]["stages"][1]["failures"][0]
    assert failure["test"].endswith("test_flaky.py::test_first_time_fails")
    assert failure["cause"].startswith("AssertionError: pods not ready after 60 s")
    assert summary["flaky_tests"] == [{"test": failure["test"], "failed_in_runs": [1]}]
    assert "run 1 flaky: " in proc.stdout and "1 flaky test(s), beside 1 CPU hog(s)" in proc.stdout


def test_sigterm_stops_the_hogs_and_the_running_tests_after_their_teardown(tmp_path: Path):
    """The running tests get SIGTERM and tear down as the suite's conftest makes them (a
    fixture's finalizer runs: it is what stops a cluster or an engine), then they are gone."""
    started, torn_down = tmp_path / "pid", tmp_path / "torn-down"
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(paths.REPO / 'tests')!r})\n"
        "from support import teardown\n\nteardown.install()\n"
    )
    (tmp_path / "test_slow.py").write_text(
        "import os, time\nfrom pathlib import Path\n\nimport pytest\n\n\n@pytest.fixture\ndef server():\n"
        f"    yield\n    Path({str(torn_down)!r}).touch()\n\n\ndef test_slow(server):\n"
        f"    Path({str(started)!r}).write_text(str(os.getpid()))\n    time.sleep(60)\n"
    )
    argv = [sys.executable, str(SCRIPT), "--hog", "1", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen([*argv, _stage("slow", tmp_path / "test_slow.py")], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        hog = int(re.search(r"PIDs (\d+)", line)[1])
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists() and _alive(hog)
        proc.terminate()
        assert proc.wait(timeout=15) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert _gone(hog) and _gone(int(started.read_text()))
    assert torn_down.exists()


def _run(tmp_path: Path, test_body: str, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(f"def test_sample():\n    {test_body}\n")
    argv = [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *options]
    argv += ["--", str(tmp_path / "test_sample.py"), "-p", "no:cacheprovider"]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def test_a_run_over_budget_exits_1_with_its_summary(tmp_path: Path):
    proc = _run(tmp_path, "assert True", "--budget", "0")
    assert proc.returncode == 1, proc.stderr
    assert "median OVER the budget of 0.0 s" in proc.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["tests"] == 1 and summary["runs"] == 1 and summary["within_budget"] is False


def test_a_failing_run_measures_nothing(tmp_path: Path):
    proc = _run(tmp_path, "assert False", "--budget", "1000")
    assert proc.returncode == 1
    assert "a failing run measures nothing" in proc.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_make_test_time_runs_the_tests_as_make_unit_does():
    def pytest_line(target: str) -> str:
        plan = subprocess.run(["make", "-n", target], cwd=paths.REPO, capture_output=True, text=True, check=True)
        return next(line for line in plan.stdout.splitlines() if "pytest" in line or "measure_tests" in line)

    assert pytest_line("test-time").endswith(pytest_line("unit").split("-m pytest ", 1)[1])


def test_the_command_line_of_make_flake_check(measure):
    """The recipe of `make flake-check`, split as the shell running it does."""
    recipe = (
        "--runs 5 --hog 1 --keep-going --out out/flake-check "
        "--stage cluster='-m cluster' --stage e2e='-m \"e2e and not full\"'"
    )
    args = measure.parse_args(shlex.split(recipe))
    assert (args.runs, args.hog, args.keep_going, args.out) == (5, 1, True, Path("out/flake-check"))
    assert args.stages == [
        measure.Stage("cluster", ("-m", "cluster")),
        measure.Stage("e2e", ("-m", "e2e and not full")),
    ]
    make_test_time = measure.parse_args(shlex.split('--runs 3 --budget 150 -- -m "not e2e and not cluster" -n 2'))
    assert make_test_time.stages == [measure.Stage("tests", ("-m", "not e2e and not cluster", "-n", "2"))]
    assert (make_test_time.hog, make_test_time.keep_going) == (0, False)


@pytest.mark.parametrize(
    "argv", [["--stage", "a=-x", "--", "-x"], ["--stage", "a=", "--stage", "a=-x"], ["--hog", "-1"]]
)
def test_a_contradictory_command_line_is_refused(measure, argv):
    with pytest.raises(SystemExit):
        measure.parse_args(argv)


def test_the_report_gives_each_bounded_waits_closest_approach(measure, tmp_path: Path):
    """The flake check's figure of how near the waits came to their bounds is read from the waits
    the measured runs recorded (out/waits.jsonl past its size at the start), not by hand: those
    before the offset and a line cut short do not count; a wait that ran out is named."""
    waits = tmp_path / "waits.jsonl"
    old = json.dumps({"what": "before", "seconds": 99, "bound": 100, "ok": True}) + "\n"
    waits.write_text(old)
    new = [
        {"what": "engine ready", "seconds": 30.0, "bound": 120, "ok": True, "load_per_cpu": 1.5},
        {"what": "pods bound", "seconds": 45.0, "bound": 60, "ok": True, "load_per_cpu": 2.0},
        {"what": "router pool", "seconds": 90.0, "bound": 90, "ok": False, "load_per_cpu": 3.0},
    ]
    with waits.open("a") as out:
        out.write("".join(json.dumps(w) + "\n" for w in new) + '{"what": "cut')
    found = measure.closest_waits(measure.read_waits(waits, len(old)), top=2)
    assert found["waits"] == 3 and found["ran_out"] == ["router pool"]
    assert [(w["what"], w["fraction"]) for w in found["closest"]] == [("pods bound", 0.75), ("engine ready", 0.25)]
    text = measure.report({**measure.summary([1.0], [], None), "waits": found})
    assert "bounded waits: 3, 1 ran out; the closest to its bound:" in text
    assert " 75.0%  45.0 s of 60 s  pods bound (load 2.0/CPU)" in text
