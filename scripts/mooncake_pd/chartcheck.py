"""What `ct lint` checks beyond helm lint: Chart.yaml's fields, and that a change to the chart
bumps its version against the target branch."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from mooncake_pd import paths

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
REQUIRED = (
    "apiVersion",
    "name",
    "version",
    "appVersion",
    "description",
    "type",
    "kubeVersion",
    "keywords",
    "sources",
    "icon",
    "maintainers",
)
ARTIFACT_HUB = (
    "artifacthub.io/category",
    "artifacthub.io/license",
    "artifacthub.io/images",
    "artifacthub.io/links",
    "artifacthub.io/changes",
)


def chart_yaml_problems(chart: Path = paths.CHART) -> list[str]:
    """Missing or malformed Chart.yaml fields, as messages."""
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    problems = [f"Chart.yaml: {field} is missing" for field in REQUIRED if not meta.get(field)]
    if meta.get("apiVersion") != "v2":
        problems.append("Chart.yaml: apiVersion must be v2")
    if not SEMVER.match(str(meta.get("version", ""))):
        problems.append(f"Chart.yaml: version {meta.get('version')!r} is not semantic versioning")
    for maintainer in meta.get("maintainers") or []:
        if not maintainer.get("name"):
            problems.append("Chart.yaml: every maintainer needs a name")
    if not (chart / "README.md").is_file():
        problems.append("chart/README.md is missing: `helm show readme` and Artifact Hub show it")
    if not (chart / "LICENSE").is_file():
        problems.append("chart/LICENSE is missing: the packaged chart carries its license")
    annotations = meta.get("annotations") or {}
    for key in ARTIFACT_HUB:
        if key not in annotations:
            problems.append(f"Chart.yaml: annotation {key} is missing")
    for key in ("artifacthub.io/images", "artifacthub.io/links", "artifacthub.io/changes"):
        if key in annotations and not isinstance(yaml.safe_load(annotations[key]), list):
            problems.append(f"Chart.yaml: annotation {key} must hold a YAML list")
    return problems


def version_key(version: str) -> tuple:
    match = SEMVER.match(version)
    if not match:
        raise ValueError(f"{version!r} is not semantic versioning")
    major, minor, patch, pre = match.groups()
    # A release sorts after its pre-releases.
    return (int(major), int(minor), int(patch), pre is None, pre or "")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)


def version_bump_problem(repo: Path = paths.REPO, base: str = "main", chart: str = "chart") -> str | None:
    """None when the commits since the branch left `base` leave the chart alone or raise its
    version; else the message. On `base` itself, or without it (a shallow clone), there is
    nothing to compare."""
    if _git(repo, "rev-parse", "--verify", "--quiet", base).returncode != 0:
        return None
    merge_base = _git(repo, "merge-base", base, "HEAD").stdout.strip()
    if not merge_base:
        return None
    changed = _git(repo, "diff", "--name-only", merge_base, "HEAD", "--", chart).stdout.split()
    if not changed:
        return None
    old = _git(repo, "show", f"{merge_base}:{chart}/Chart.yaml")
    if old.returncode != 0:
        return None  # the chart is new on this branch
    before = yaml.safe_load(old.stdout)["version"]
    after = yaml.safe_load(_git(repo, "show", f"HEAD:{chart}/Chart.yaml").stdout)["version"]
    if version_key(after) <= version_key(before):
        return (
            f"{chart}/Chart.yaml: version {after} must be above {before} on {base}: "
            f"the chart changed ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})"
        )
    return None
