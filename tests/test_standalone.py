"""The repository stands alone: a copy with nothing beside it (no ../shared, no KTHENA_CRDS_DIR)
renders, validates and runs its CRD and seed-parity tests; release files exist; NOTES tell the
user how to prove the KV transfer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mooncake_pd import paths


def _files() -> list[str]:
    """What a clone of the working tree holds: tracked and untracked-but-not-ignored files."""
    listed = subprocess.run(
        ["git", "-C", str(paths.REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return [f for f in listed if f and (paths.REPO / f).is_file()]


@pytest.fixture(scope="module")
def lone(tmp_path_factory) -> Path:
    """The working tree copied as a clone would hold it, alone in an empty folder; the pinned
    tools are linked in (a clone installs them with `make tools`)."""
    root = tmp_path_factory.mktemp("lone") / "mooncake-pd"
    for name in _files():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.REPO / name, target)
    (root / ".tools").symlink_to(paths.TOOLS_DIR)
    assert not (root.parent / "shared").exists()
    return root


def _env(clone: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KTHENA_CRDS_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(clone / "scripts")
    return env


def _python(clone: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd or clone, env=_env(clone), capture_output=True, text=True, check=False
    )


def test_lone_copy_uses_its_own_package_and_crds(lone: Path):
    proc = _python(lone, "-c", "from mooncake_pd import paths; print(paths.PACKAGE); print(paths.crds_dir())")
    assert proc.returncode == 0, proc.stderr
    package, crds = (Path(line) for line in proc.stdout.split())
    assert package == lone / "scripts" / "mooncake_pd"
    assert crds == lone / "scripts" / "mooncake_pd" / "crds" / "kthena" / paths.DEFAULT_KTHENA
    assert sorted(p.name for p in crds.glob("*.yaml")) == sorted(p.name for p in paths.crds_dir().glob("*.yaml"))


def test_lone_copy_renders_and_validates(lone: Path, tmp_path: Path):
    out = tmp_path / "deploy.yaml"
    proc = _python(lone, "-m", "mooncake_pd", "--helm", str(paths.helm_binary()), "render", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "validated against Kubernetes" in proc.stdout
    assert "the Kthena CRDs" in proc.stdout
    assert "kind: ModelServing" in out.read_text()


def test_lone_copy_runs_crd_monitor_and_seed_parity_tests_without_skipping(lone: Path):
    """The tests that used to need ../shared run, and none skips, on a copy alone."""
    proc = _python(
        lone,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-rs",
        "-k",
        "helm4 and not conformance",
        "tests/test_seed_parity.py",
        "tests/test_rollouts_and_draining.py",
        "tests/test_monitoring.py",
        "tests/test_scale_out.py::test_scheduling_and_placement",
    )
    summary = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "passed" in summary
    assert "skipped" not in summary, proc.stdout[-3000:]


def test_make_render_installs_only_what_render_needs(lone: Path):
    plan = subprocess.run(["make", "-n", "-B", "render"], cwd=lone, capture_output=True, text=True, check=True).stdout
    assert "checkov" not in plan
    assert "conformance" not in plan
    assert "requirements-test.txt" not in plan
    assert "install-helm.sh 4.1.4" in plan
    with_own_helm = subprocess.run(
        ["make", "-n", "-B", "render", "HELM=helm"], cwd=lone, capture_output=True, text=True, check=True
    ).stdout
    assert "install-helm.sh" not in with_own_helm
    assert "--helm helm render" in with_own_helm


def test_render_with_a_helm_on_path_says_so(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy2(paths.helm_binary("3.17.2"), bin_dir / "helm")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [sys.executable, "-m", "mooncake_pd", "--helm", "helm", "render", "--out", str(tmp_path / "o.yaml")],
        cwd=paths.REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "rendered with helm v3.17.2" in first
    assert "the helm on PATH" in first


def test_render_refuses_an_unsupported_helm(tmp_path: Path):
    old = tmp_path / "helm"
    old.write_text("#!/bin/sh\necho v3.5.4+g1b5edb6\n")
    old.chmod(0o755)
    proc = subprocess.run(
        [sys.executable, "-m", "mooncake_pd", "--helm", str(old), "render", "--out", str(tmp_path / "o.yaml")],
        cwd=paths.REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "helm v3.5.4" in proc.stderr
    assert "3.8.0+" in proc.stderr
    assert not (tmp_path / "o.yaml").exists()


@pytest.mark.parametrize("version", paths.HELM_VERSIONS)
def test_helm_show_readme_prints_the_chart_readme(version: str):
    proc = subprocess.run(
        [str(paths.helm_binary(version)), "show", "readme", str(paths.CHART)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == (paths.CHART / "README.md").read_text().strip()
    assert "helm install" in proc.stdout


def test_release_files():
    assert "Apache License" in (paths.REPO / "LICENSE").read_text()
    assert (paths.CHART / "LICENSE").read_text() == (paths.REPO / "LICENSE").read_text()
    chart = yaml.safe_load((paths.CHART / "Chart.yaml").read_text())
    changelog = (paths.REPO / "CHANGELOG.md").read_text()
    assert f"## [{chart['version']}]" in changelog, "CHANGELOG.md has no section for the chart's version"
    annotations = chart["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    images = {i["image"] for i in yaml.safe_load(annotations["artifacthub.io/images"])}
    # Every image the chart runs by default on some profile: the engines', the proxy's and the
    # benchmark client's of each accelerator's default engine version (profiles.yaml), and the
    # helm-test pod's. Another engine.version's images are the user's choice, not listed.
    table = yaml.safe_load((paths.CHART / "files" / "profiles.yaml").read_text())
    values = yaml.safe_load((paths.CHART / "values.yaml").read_text())
    expected = {f"{values['test']['image']['repository']}:{values['test']['image']['tag']}"}
    defaults = {row["engineVersion"] for row in table["accelerators"].values()}
    for engine in (table["engines"][v] for v in sorted(defaults)):
        for image in [*engine["images"].values(), engine["proxyImage"], engine["benchmarkImage"]]:
            expected.add(f"{image['repository']}:{image['tag']}")
    assert images == expected
    assert chart["icon"].startswith("https://")
    for project in ("volcano-sh/kthena", "vllm-project/vllm-ascend", "kvcache-ai/Mooncake"):
        assert any(project in s for s in chart["sources"])


def _notes(*extra: str) -> str:
    """NOTES as `helm install` prints them. helm 4's client-side dry run needs no cluster; helm 3's
    asks the API server for its version even then, so NOTES are rendered with helm 4 only."""
    proc = subprocess.run(
        [str(paths.helm_binary("4.1.4")), "install", "demo", str(paths.CHART), "-n", "llm", "--dry-run=client", *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.split("NOTES:", 1)[1]


def test_notes_give_the_verify_command_helm_test_and_whole_logs():
    notes = _notes()
    assert "mooncake-pd verify --release demo --namespace llm\n" in notes
    assert "helm test demo -n llm --logs" in notes
    greps = [line for line in notes.splitlines() if "grep" in line]
    assert len(greps) == 2
    for line in greps:
        # Each pod's whole log: a label selector alone prints the last 10 lines per pod.
        assert "logs --tail=-1" in line
        assert re.search(r"get pods -o name -l modelserving\.volcano\.sh/name=demo,", line)
    kthena = _notes("--set", "router.type=kthena", "--set", "decode.port=7100")
    assert "mooncake-pd verify --release demo --namespace llm --url http://127.0.0.1:8080" in kthena


def test_notes_show_the_replicas_the_autoscaler_owns():
    fixed = _notes()
    assert "prefill: 1 group(s) x 1 replica(s), TP 2 x DP 4" in fixed
    preset = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena-autoscaling-cost-first.yaml"
    scaled = _notes("-f", str(preset))
    lines = [line.strip() for line in scaled.splitlines() if "replica(s)" in line]
    assert len(lines) == 2 and all(re.search(r"x \d+-\d+ replica\(s\) \(autoscaled\)", line) for line in lines), lines


def test_notes_say_how_to_install_the_cli_of_this_chart_version():
    """Issue #27 item 12: where a user looks after `helm install`, the CLI's pip install, pinned to
    the chart's version (the release workflow publishes both at one version)."""
    version = yaml.safe_load((paths.CHART / "Chart.yaml").read_text())["version"]
    assert f"pip install mooncake-pd-tools=={version}" in _notes()
