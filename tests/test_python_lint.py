"""The Python tooling, the chart's programs and the tests are ruff clean (lint and format); the
tooling, the test support and the chart's programs type-check (mypy, pyproject.toml's [tool.mypy])."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mooncake_pd import paths

RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_check():
    proc = subprocess.run(
        [str(RUFF), "check", "scripts", "harness", "tests", "chart/files"],
        cwd=paths.REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


def test_ruff_format():
    cmd = [str(RUFF), "format", "--check", "scripts", "harness", "tests", "chart/files"]
    proc = subprocess.run(cmd, cwd=paths.REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_mypy():
    """The files and settings are pyproject.toml's; `make lint` runs the same command."""
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=paths.REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_the_pinned_one():
    pinned = re.search(r"^mypy==(\S+)$", (paths.REPO / "requirements-test.txt").read_text(), re.M)
    assert pinned, "requirements-test.txt pins mypy"
    version = subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[:2] == ["mypy", pinned[1]], version.stdout
