"""scripts/measure_tests.py, which `make test-time` runs: the wall time of the tests and where it
goes, measured, with the budget checked by the script rather than by a timed test."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mooncake_pd import paths

SCRIPT = paths.REPO / "scripts" / "measure_tests.py"
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
