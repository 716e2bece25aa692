"""chart-testing's checks pass here as `ct lint` runs them in CI: ct.yaml matches the layout, helm
lint --strict with each chart/ci values file, those values render and validate, yamllint,
Chart.yaml, and a chart change bumps its version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import Renderer, assert_valid
from mooncake_pd import chartcheck, paths

CI_VALUES = sorted((paths.CHART / "ci").glob("*-values.yaml"))


def test_ct_config_matches_the_layout():
    ct = yaml.safe_load((paths.REPO / "ct.yaml").read_text())
    assert ct["target-branch"] == "main"
    for folder in ct["chart-dirs"]:
        assert (paths.REPO / folder).is_dir()
    assert [paths.REPO / c for c in ct["charts"]] == [paths.CHART]
    assert len(CI_VALUES) >= 4


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_helm_lint_strict_with_each_ci_values_file(render: Renderer, values: Path):
    proc = subprocess.run(
        [str(render.binary), "lint", "--strict", str(paths.CHART), "--values", str(values)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("values", CI_VALUES, ids=[p.stem for p in CI_VALUES])
def test_ci_values_render_and_validate(render: Renderer, crds, values: Path):
    assert_valid(render((values,)), crds)


def test_yamllint():
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "yamllint"), "--strict", "."], cwd=paths.REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_chart_yaml():
    assert chartcheck.chart_yaml_problems() == []


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True, capture_output=True
    )


@pytest.fixture
def chart_repo(tmp_path: Path) -> Path:
    (tmp_path / "chart" / "templates").mkdir(parents=True)
    (tmp_path / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 0.1.0\n")
    (tmp_path / "chart" / "templates" / "a.yaml").write_text("a: 1\n")
    (tmp_path / "README.md").write_text("readme\n")
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "base")
    git(tmp_path, "checkout", "-qb", "feature")
    return tmp_path


def test_version_bump_required_when_the_chart_changes(chart_repo: Path):
    assert chartcheck.version_bump_problem(chart_repo) is None, "nothing changed yet"
    (chart_repo / "README.md").write_text("docs only\n")
    git(chart_repo, "commit", "-qam", "docs")
    assert chartcheck.version_bump_problem(chart_repo) is None, "a change outside the chart needs no bump"
    (chart_repo / "chart" / "templates" / "a.yaml").write_text("a: 2\n")
    git(chart_repo, "commit", "-qam", "template")
    problem = chartcheck.version_bump_problem(chart_repo)
    assert problem and "version 0.1.0 must be above 0.1.0 on main" in problem
    (chart_repo / "chart" / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 0.1.1\n")
    git(chart_repo, "commit", "-qam", "bump")
    assert chartcheck.version_bump_problem(chart_repo) is None
    assert chartcheck.version_bump_problem(chart_repo, base="no-such-branch") is None


def test_version_order():
    assert chartcheck.version_key("0.2.0") > chartcheck.version_key("0.2.0-rc.1") > chartcheck.version_key("0.1.9")
