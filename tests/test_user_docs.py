"""What a user reads first (issue #27): the README's quick start with the prerequisites' install
commands and the published chart and CLI, the runbook for a deployment that does not come up, the
project's links in Chart.yaml and chart/README.md, every relative link and anchor of the docs, and
the release workflow that publishes what the quick start installs."""

from __future__ import annotations

import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from mooncake_pd import cli, paths

PROJECT = "https://github.com/mooncake-pd/mooncake-pd"
OWNER = PROJECT.rsplit("/", 2)[1]
README = paths.REPO / "README.md"
CHART_README = paths.CHART / "README.md"
TROUBLESHOOTING = paths.REPO / "docs" / "troubleshooting.md"
RELEASE = paths.REPO / ".github" / "workflows" / "release.yaml"
DOCS = [README, *sorted((paths.REPO / "docs").glob("*.md")), CHART_README, paths.REPO / "CHANGELOG.md"]
RUNBOOK = "Runbook: a deployment that does not come up"

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def chart_meta() -> dict:
    return yaml.safe_load((paths.CHART / "Chart.yaml").read_text())


def chart_version() -> str:
    return str(chart_meta()["version"])


def prose(text: str) -> str:
    """Markdown without code: links and headings inside code blocks and spans are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: code and link markup dropped, lower case, punctuation other
    than - and _ removed, each space a hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", page.read_text())):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def headings(page: Path) -> list[str]:
    return [m.group(1) for m in HEADING.finditer(FENCE.sub("", page.read_text()))]


def section(page: Path, title: str) -> str:
    """The text of a section, from its heading to the next heading of the same or a higher level."""
    text = page.read_text()
    match = re.search(rf"^(#+) {re.escape(title)}\s*$", text, re.M)
    assert match, f"{page.name} has no heading {title!r}"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, match.end())
    return text[match.end() : end.start() if end else len(text)]


def link_problem(page: Path, target: str) -> str | None:
    """Why a link does not lead anywhere, or None. Relative links must name a file of the
    repository (and a heading of it); links into the project on GitHub are checked the same way
    against the working tree, so that the chart README, which Artifact Hub shows, stays right."""
    if target.startswith(PROJECT):
        rest = target[len(PROJECT) :]
        path, _, fragment = rest.partition("#")
        path = path.strip("/")
        if path.startswith(("blob/main/", "tree/main/")):
            file = paths.REPO / path.split("/", 2)[2]
        elif path in ("", "releases", "issues"):
            file = README if path == "" else None
        else:
            return f"{target}: not a link to a file on main"
    elif re.match(r"[a-z][a-z0-9+.-]*:", target):
        return None
    else:
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
    if file is None:
        return None
    if not file.exists():
        return f"{target}: {file.relative_to(paths.REPO) if file.is_relative_to(paths.REPO) else file} does not exist"
    if fragment and file.suffix == ".md" and fragment not in anchors(file):
        return f"{target}: no heading of {file.name} has the anchor #{fragment}"
    return None


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(paths.REPO)) for p in DOCS])
def test_every_link_resolves(page: Path):
    problems = [p for t in LINK.findall(prose(page.read_text())) if (p := link_problem(page, t))]
    assert problems == []


def test_slug_follows_github():
    conformance = "What `make conformance` proves, and what it cannot"
    assert slug(conformance) == "what-make-conformance-proves-and-what-it-cannot"
    assert slug("Recovery and rollouts: what Kthena does") == "recovery-and-rollouts-what-kthena-does"
    assert slug("4. Install, test, verify") == "4-install-test-verify"
    assert slug(RUNBOOK) == "runbook-a-deployment-that-does-not-come-up"
    assert link_problem(README, "docs/troubleshooting.md#no-such-heading")
    assert link_problem(README, "docs/no-such-page.md")
    assert link_problem(CHART_README, f"{PROJECT}/blob/main/docs/no-such-page.md")
    assert link_problem(README, "#quick-start") is None


def test_readme_serves_users_first():
    titles = headings(README)
    assert titles.index("Quick start") < titles.index("Developing") < titles.index("Two commands")
    quick = section(README, "Quick start")
    # The steps, in order, each linked from the prerequisites table where it installs something.
    steps = [
        "1. Prerequisites",
        "Install Volcano",
        "Install Kthena",
        "Install a device plugin",
        "2. Install the CLI",
        "3. Values for your model",
        "4. Install, test, verify",
    ]
    positions = [titles.index(s) for s in steps]
    assert positions == sorted(positions)
    for step in ("Install Volcano", "Install Kthena", "Install a device plugin"):
        assert f"](#{slug(step)})" in quick, f"the prerequisites table does not link {step!r}"
    assert f"(docs/troubleshooting.md#{slug(RUNBOOK)})" in quick
    assert PROJECT in README.read_text().split("## Quick start")[0], "the project's home, before the quick start"


def test_readme_keeps_the_two_commands():
    """The project's guide: the README gives `make render` and `make test`, verbatim."""
    block = section(README, "Two commands")
    assert "\nmake render   # " in block
    assert "\nmake test     # " in block


def test_quick_start_commands_are_current():
    quick = section(README, "Quick start")
    version = chart_version()
    chart = f"oci://ghcr.io/{OWNER}/charts/{chart_meta()['name']}"
    # Every command that names the published chart or a tag, in every page, names this version.
    for page in DOCS:
        text = page.read_text()
        named = [
            *re.findall(rf"{re.escape(chart)} --version (\d[\w.+-]*\w)", text),
            *re.findall(rf"{PROJECT}@v(\d[\w.+-]*\w)", text),
            *re.findall(rf"raw\.githubusercontent\.com/{OWNER}/mooncake-pd/v(\d[\w.+-]*\w)/", text),
        ]
        assert set(named) <= {version}, f"{page.name} names chart {named}, Chart.yaml is {version}: update it"
    assert re.search(rf"helm install my-model {re.escape(chart)} --version {re.escape(version)} ", quick)
    assert re.search(r"^pip install mooncake-pd-tools\s", quick, re.M)
    assert f'pip install "git+{PROJECT}@v{version}"' in quick
    assert f"chart {version}" in quick
    for command in ("mooncake-pd generate --model-dir", "helm test my-model", "mooncake-pd verify --release my-model"):
        assert command in quick, command
    # The prerequisites' commands, each pinned.
    kthena = yaml.safe_load((paths.CHART / "values.yaml").read_text())["kthena"]["version"]
    assert f"oci://ghcr.io/volcano-sh/charts/kthena --version {kthena}" in quick
    assert re.search(r"helm install volcano volcano-sh/volcano --version \d+\.\d+\.\d+ ", quick)
    assert re.search(r"nvdp/nvidia-device-plugin .*\n.*--version \d+\.\d+\.\d+", quick)
    assert "Volcano Scheduler add-on 1.20.15" in quick, "the vendor guide's Volcano requirement, explained"
    chart_readme = CHART_README.read_text()
    assert f"{chart} --version {version}" in chart_readme


def test_runbook_is_there_and_linked():
    assert RUNBOOK in headings(TROUBLESHOOTING)
    link = f"docs/troubleshooting.md#{slug(RUNBOOK)}"
    assert f"]({link})" in README.read_text()
    assert f"]({PROJECT}/blob/main/{link})" in CHART_README.read_text()
    runbook = section(TROUBLESHOOTING, RUNBOOK)
    # In the order an engineer debugs: helm, the ModelServing, Volcano, Kthena, admission, scheduling,
    # the preflight, readiness, requests.
    order = [
        "helm status my-model",
        "get modelserving my-model",
        "get podgroup -l modelserving.volcano.sh/name=my-model -o wide",
        "Unschedulable",
        "involvedObject.kind=ModelServing",
        "-n kthena-system logs deploy/kthena-controller-manager",
        "violates PodSecurity",
        "pod-security.kubernetes.io/enforce=privileged",
        "FailedScheduling",
        "Insufficient huawei.com/ascend-1980",
        "Exit Code 78",
        "engine.startupProbe.failureThreshold",
        "helm test my-model",
        "mooncake-pd verify --release my-model",
    ]
    positions = [runbook.find(text) for text in order]
    assert -1 not in positions, [t for t, p in zip(order, positions, strict=True) if p == -1]
    assert positions == sorted(positions), "the runbook's steps are out of order"
    titles = headings(TROUBLESHOOTING)
    assert titles.index(RUNBOOK) < titles.index("Security"), "the runbook comes before the Security section"


def test_chart_yaml_links_back_to_the_project():
    meta = chart_meta()
    assert meta["home"] == PROJECT
    assert meta["sources"][0] == PROJECT
    for upstream in ("volcano-sh/kthena", "vllm-project/vllm-ascend", "kvcache-ai/Mooncake"):
        assert any(upstream in s for s in meta["sources"]), upstream
    assert CHART_README.read_text().startswith(f"# {meta['name']}\n\nProject: <{PROJECT}>")


def workflow() -> dict:
    return yaml.safe_load(RELEASE.read_text())


def test_release_triggers_on_tags_only():
    flow = workflow()
    assert flow["on"] == {"push": {"tags": ["v*"]}}
    assert flow["permissions"] == {"contents": "read"}
    # Its actions' pins, inputs and scripts: tests/test_ci_workflows.py (actionlint, every workflow).


def test_release_publishes_after_the_checks():
    jobs = workflow()["jobs"]
    for publisher in ("publish-chart", "publish-pypi"):
        assert {"version", "test", "build"} <= set(jobs[publisher]["needs"]), publisher
    assert {"publish-chart", "publish-pypi"} <= set(jobs["github-release"]["needs"])
    assert any("make test" in s.get("run", "") for s in jobs["test"]["steps"])
    build = "\n".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert "helm package chart" in build and "python -m build" in build
    push = "\n".join(s.get("run", "") for s in jobs["publish-chart"]["steps"])
    assert 'helm push "dist/chart/mooncake-pd-${VERSION}.tgz" "oci://ghcr.io/${owner}/charts"' in push
    assert 'owner="${GITHUB_REPOSITORY_OWNER,,}"' in push
    assert jobs["publish-chart"]["permissions"]["packages"] == "write"
    pypi = jobs["publish-pypi"]
    assert pypi["permissions"] == {"id-token": "write"}
    assert pypi["environment"]["name"] == "pypi"
    assert [s["uses"].split("@")[0] for s in pypi["steps"]][-1] == "pypa/gh-action-pypi-publish"
    assert jobs["github-release"]["permissions"] == {"contents": "write"}


def test_release_smoke_check_matches_the_cli(monkeypatch):
    """The build job greps `mooncake-pd --version` of the installed wheel; the pattern is the
    CLI's own line when the tool's and the chart's versions are the tag's."""
    run = next(s["run"] for s in workflow()["jobs"]["build"]["steps"] if "mooncake-pd --version" in s.get("run", ""))
    pattern = re.search(r'grep -F "([^"]+)"', run).group(1)
    version = chart_version()
    monkeypatch.setattr(metadata, "version", lambda name: version)
    assert pattern.replace("${VERSION}", version) in cli.version_text()


def version_check(tmp_path: Path, tag: str, chart: str, package: str, changelog: str) -> subprocess.CompletedProcess:
    """The release's version job, run on a copy of the three files it reads."""
    run = next(s["run"] for s in workflow()["jobs"]["version"]["steps"] if s.get("id") == "check")
    (tmp_path / "chart").mkdir(exist_ok=True)
    text = (paths.CHART / "Chart.yaml").read_text()
    (tmp_path / "chart" / "Chart.yaml").write_text(re.sub(r"(?m)^version: .*$", f"version: {chart}", text))
    text = (paths.REPO / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{package}"', text, count=1))
    (tmp_path / "CHANGELOG.md").write_text(f"# Changelog\n\n## [Unreleased]\n\n## [{changelog}]\n")
    out = tmp_path / "github_output"
    out.write_text("")
    env = {**os.environ, "TAG": tag, "GITHUB_OUTPUT": str(out)}
    proc = subprocess.run(["bash", "-e", "-c", run], cwd=tmp_path, env=env, capture_output=True, text=True)
    proc.stdout += out.read_text()
    return proc


@pytest.mark.parametrize(
    ("tag", "chart", "package", "changelog", "refusal"),
    [
        ("v1.2.3", "1.2.3", "1.2.3", "1.2.3", None),
        ("v1.2.4", "1.2.3", "1.2.4", "1.2.4", "chart/Chart.yaml has version 1.2.3"),
        ("v1.2.3", "1.2.3", "0.1.0", "1.2.3", "pyproject.toml has version 0.1.0"),
        ("v1.2.3", "1.2.3", "1.2.3", "1.2.2", "CHANGELOG.md has no section ## [1.2.3]"),
        ("1.2.3", "1.2.3", "1.2.3", "1.2.3", "does not start with v"),
    ],
)
def test_release_refuses_a_tag_that_is_not_the_version(tmp_path, tag, chart, package, changelog, refusal):
    proc = version_check(tmp_path, tag, chart, package, changelog)
    if refusal is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "version=1.2.3\n" in proc.stdout
    else:
        assert proc.returncode != 0
        assert "::error::" in proc.stdout and refusal in proc.stdout
        assert "version=" not in proc.stdout


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


def test_make_help_lists_every_documented_target():
    """Each target with a `## ` description is in `make help` (the e2e ones have digits)."""
    makefile = (paths.REPO / "Makefile").read_text()
    documented = re.findall(r"^([A-Za-z0-9_.-]+):.*## ", makefile, flags=re.M)
    shown = subprocess.run(["make", "-s", "help"], cwd=paths.REPO, capture_output=True, text=True, check=True).stdout
    listed = re.findall(r"^  make (\S+)", shown, flags=re.M)
    assert listed == documented
    assert {"e2e", "e2e-2p1d", "e2e-venv"} <= set(listed)
