"""The Python tooling, the chart's preflight program and the tests are ruff clean (lint and format)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mooncake_pd import paths

RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_check():
    proc = subprocess.run(
        [str(RUFF), "check", "scripts", "tests", "chart/files"], cwd=paths.REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_ruff_format():
    cmd = [str(RUFF), "format", "--check", "scripts", "tests", "chart/files"]
    proc = subprocess.run(cmd, cwd=paths.REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
