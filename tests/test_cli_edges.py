"""What a first try with the tool hits at its edges (issue #27 items 11 and 13): its version, a
pipe closed early, the mode of the files it writes, which helm it uses outside a checkout, and
the pinned helm download on a machine it has no binary for."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mooncake_pd import paths, values_file


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mooncake_pd", *args], capture_output=True, text=True, **kwargs)


def test_version_names_the_tool_and_the_chart():
    proc = cli("--version")
    assert proc.returncode == 0
    chart = next(line for line in (paths.CHART / "Chart.yaml").read_text().splitlines() if line.startswith("version:"))
    assert proc.stdout.startswith("mooncake-pd ") and f"chart mooncake-pd {chart.split()[1]}" in proc.stdout


def test_a_reader_that_goes_away_ends_no_traceback(tmp_path: Path):
    """`mooncake-pd render ... | head -1`: the tool stops quietly when its reader closes."""
    tool = subprocess.Popen(
        [sys.executable, "-m", "mooncake_pd", "render", "--out", str(tmp_path / "d.yaml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=paths.REPO,
    )
    assert tool.stdout is not None and tool.stderr is not None
    tool.stdout.read(1)
    tool.stdout.close()  # what head does after its line
    stderr = tool.stderr.read().decode()
    assert tool.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def test_a_new_file_gets_the_umask_mode_and_an_old_one_keeps_its_own(tmp_path: Path):
    old_mask = os.umask(0o022)
    try:
        new = tmp_path / "values.yaml"
        values_file.write_atomic(new, "a: 1\n", backup=False)
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        new.chmod(0o600)
        values_file.write_atomic(new, "a: 2\n", backup=False)
        assert stat.S_IMODE(new.stat().st_mode) == 0o600
    finally:
        os.umask(old_mask)


def test_a_device_or_pipe_is_written_in_place_not_replaced(tmp_path: Path):
    """`render --out /dev/null`: a rename would put a regular file where the device was (as
    root it replaced the machine's /dev/null, and every non-root open of it failed after)."""
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    values_file.write_atomic(fifo, "a: 1\n", backup=False)
    reader.join(timeout=10)
    assert got == ["a: 1\n"] and stat.S_ISFIFO(fifo.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left


def test_outside_a_checkout_the_default_helm_is_the_one_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("HELM", raising=False)
    monkeypatch.setattr(paths, "IN_CHECKOUT", False)
    assert paths.default_helm() == "helm"
    monkeypatch.setattr(paths, "IN_CHECKOUT", True)
    monkeypatch.setattr(paths, "TOOLS_DIR", tmp_path)  # a checkout before `make tools`
    assert paths.default_helm() == "helm"
    monkeypatch.setattr(paths, "TOOLS_DIR", paths.REPO / ".tools")
    assert paths.default_helm() == str(paths.helm_binary())
    monkeypatch.setenv("HELM", "/opt/helm/bin/helm")
    assert paths.default_helm() == "/opt/helm/bin/helm"


@pytest.mark.parametrize("machine", ["Linux aarch64", "Darwin arm64"])
def test_install_helm_refuses_a_machine_it_has_no_binary_for(tmp_path: Path, machine: str):
    """A Kunpeng (aarch64) host or a Mac: one line naming the platform and how to give helm,
    before anything is fetched."""
    system, arch = machine.split()
    fake = tmp_path / "bin"
    fake.mkdir()
    uname = fake / "uname"
    uname.write_text(f'#!/bin/sh\ncase "$1" in -s) echo {system};; -m) echo {arch};; esac\n')
    uname.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(paths.REPO / "scripts" / "install-helm.sh"), "3.17.2"],
        env={**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert f"this machine is {system}/{arch}" in line and "HELM=<path>" in line


def test_a_folder_other_users_cannot_enter_is_seen(tmp_path: Path):
    """What makes the harness stage the image Pythons for a container's user (issue #27 item 14)."""
    from support import localpods

    inner = tmp_path / "a" / "clone"
    inner.mkdir(parents=True)
    for folder in (tmp_path, tmp_path / "a", inner):
        folder.chmod(0o755)
    open_all = all(p.stat().st_mode & stat.S_IXOTH for p in tmp_path.parents)
    assert localpods.traversable_by_others(inner) is open_all
    (tmp_path / "a").chmod(0o700)
    assert not localpods.traversable_by_others(inner)
    assert localpods.traversable_by_others(Path("/usr/bin"))


def test_staged_copies_of_checkouts_that_are_gone_are_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A staged root's hard links keep its checkout's venv on the disk after the checkout is
    deleted (a CI clone): the next staging removes those whose checkout is gone."""
    from support import localpods

    monkeypatch.setattr(localpods, "STAGED_DIR", tmp_path)
    roots = {name: tmp_path / f"{localpods.STAGED_PREFIX}{name}" for name in ("live", "gone", "legacy")}
    for root in roots.values():
        (root / "e2e").mkdir(parents=True)
        Path(f"{root}.lock").touch()
    (roots["live"] / ".checkout").write_text(str(paths.REPO))
    (roots["gone"] / ".checkout").write_text(str(tmp_path / "deleted-clone"))
    localpods.prune_staged()
    assert roots["live"].is_dir() and Path(f"{roots['live']}.lock").exists()
    assert not roots["gone"].exists() and not Path(f"{roots['gone']}.lock").exists()
    assert not roots["legacy"].exists()


@pytest.mark.parametrize("version", paths.HELM_VERSIONS)
def test_a_misspelt_values_key_gets_a_did_you_mean(tmp_path: Path, version: str):
    values = tmp_path / "values.yaml"
    values.write_text(
        "prefil:\n  replicas: 2\ndecode:\n  replica: 1\n  parallelism:\n    tensr: 2\n  args:\n    max_num_seqs: 8\n"
    )
    proc = cli("--helm", str(paths.helm_binary(version)), "render", "-f", str(values), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    for hint in (
        "(did you mean prefill?)",
        "(did you mean decode.replicas?)",
        "(did you mean decode.parallelism.tensor?)",
    ):
        assert hint in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


def test_no_did_you_mean_without_a_near_key():
    from mooncake_pd import valuekeys

    line = "- (root): Additional property zzzzzz is not allowed"
    assert valuekeys.with_suggestions(line) == line


# Kubernetes client calls -> (API group, resource, verbs) RBAC must allow.
API_CALLS = {
    "list_namespaced_pod": ("", "pods", {"list"}),
    "read_namespaced_pod": ("", "pods", {"get"}),
    "read_namespaced_pod_log": ("", "pods/log", {"get"}),
    "connect_get_namespaced_pod_portforward": ("", "pods/portforward", {"get", "create"}),
    "read_namespaced_endpoints": ("", "endpoints", {"get"}),
    "list_namespaced_network_policy": ("networking.k8s.io", "networkpolicies", {"list"}),
    "list_namespaced_custom_object": ("workload.serving.volcano.sh", "modelservings", {"list"}),
    "get_namespaced_custom_object": ("workload.serving.volcano.sh", "modelservings", {"get"}),
    "list_namespaced_job": ("batch", "jobs", {"list"}),
    "read_namespaced_job": ("batch", "jobs", {"get"}),
    "create_namespaced_job": ("batch", "jobs", {"create"}),
}


def test_the_documented_role_covers_every_api_call_of_verify_and_bench():
    import re

    import yaml

    role = next(d for d in yaml.safe_load_all((paths.REPO / "examples" / "rbac" / "mooncake-pd-tool.yaml").read_text()))
    allowed: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        allowed |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    code = "".join((paths.PACKAGE / name).read_text() for name in ("verify.py", "bench.py", "commands/bench.py"))
    calls = set(re.findall(r"\.((?:list|read|create|connect_get|get|patch|delete)_namespaced_\w+)", code))
    assert calls, "no Kubernetes API call found"
    unknown = calls - set(API_CALLS)
    assert unknown == set(), f"add these calls to API_CALLS and the Role: {unknown}"
    missing = [(c, v) for c in calls for v in API_CALLS[c][2] if (API_CALLS[c][0], API_CALLS[c][1], v) not in allowed]
    assert missing == []
