"""Render the chart with a helm binary."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from mooncake_pd import paths
from mooncake_pd.errors import MooncakePdError

# The oldest helm of each major the chart supports (JSON Schema values validation, --set-json,
# toJson/fromJson); the tests run the pinned 3.17.2 and 4.1.4 (paths.HELM_VERSIONS).
SUPPORTED = {3: (3, 8, 0), 4: (4, 0, 0)}


class HelmError(MooncakePdError):
    """helm failed; the message is helm's own error output."""

    prefix = "helm failed:\n"


def resolve(helm: Path | str) -> Path:
    """A helm given as a path, or as a bare name looked up on PATH."""
    text = str(helm)
    if "/" not in text:
        found = shutil.which(text)
        if not found:
            raise HelmError(f"{text} is not on PATH: install helm or leave HELM unset to use the pinned one")
        return Path(found)
    return Path(text)


def version(helm: Path) -> tuple[int, int, int]:
    """helm's own version, e.g. (3, 17, 2)."""
    proc = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, check=False)
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", proc.stdout.strip())
    if proc.returncode != 0 or not match:
        raise HelmError(f"{helm}: cannot read its version ({(proc.stderr or proc.stdout).strip()})")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def check_supported(helm: Path) -> str:
    """'v3.17.2' for a supported helm; HelmError naming the supported versions otherwise."""
    found = version(helm)
    text = "v" + ".".join(map(str, found))
    floor = SUPPORTED.get(found[0])
    if floor is None or found < floor:
        wanted = " or ".join(f"{'.'.join(map(str, v))}+" for v in SUPPORTED.values())
        raise HelmError(f"{helm} is helm {text}; the chart needs helm {wanted}: leave HELM unset for the pinned one")
    return text


def template(
    helm: Path,
    values_files: Iterable[Path | str] = (),
    set_json: Mapping[str, object] | None = None,
    *,
    chart: Path = paths.CHART,
    release: str = paths.RELEASE,
    namespace: str = paths.NAMESPACE,
    extra_args: Iterable[str] = (),
) -> str:
    """`helm template` and return the manifests; raise HelmError with helm's message."""
    if not Path(helm).exists():
        raise HelmError(f"{helm} is missing: run `make tools` (scripts/install-helm.sh) first")
    cmd = [str(helm), "template", release, str(chart), "--namespace", namespace]
    for f in values_files:
        cmd += ["--values", str(f)]
    for key, value in (set_json or {}).items():
        cmd += ["--set-json", f"{key}={json.dumps(value)}"]
    cmd += list(extra_args)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HelmError(proc.stderr.strip() or f"helm exited {proc.returncode}")
    return proc.stdout
