"""Render the chart with a helm binary."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from mooncake_pd import paths


class HelmError(RuntimeError):
    """helm failed; the message is helm's own error output."""


def template(
    helm: Path,
    values_files: Iterable[Path] = (),
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
