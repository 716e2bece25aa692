"""helm against the local cluster, as a user runs it (the pinned helm 3 and 4 binaries, the
cluster's kubeconfig), and waits on what Kthena's controller makes of a release. Every call is
bounded in time."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mooncake_pd import manifests, paths
from support.kube.api import Client, wait_for
from support.kube.cluster import Cluster

HELM_TIMEOUT = 180
MODELSERVING = ("workload.serving.volcano.sh/v1alpha1", "ModelServing")


class HelmFailed(RuntimeError):
    pass


@dataclass
class Helm:
    cluster: Cluster
    version: str
    home: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        self.home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        argv = [str(paths.helm_binary(self.version)), *args]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
        if check and proc.returncode != 0:
            raise HelmFailed(f"helm {self.version} {' '.join(args)}:\n{proc.stderr.strip()}")
        return proc

    def install(self, release: str, namespace: str, *values: Path, sets: tuple[str, ...] = ()) -> None:
        args = ["install", release, str(paths.CHART), "-n", namespace, "--create-namespace", "--wait"]
        self.run(*args, "--timeout", "120s", *_values(values, sets))

    def upgrade(self, release: str, namespace: str, *values: Path, sets: tuple[str, ...] = ()) -> None:
        args = ["upgrade", release, str(paths.CHART), "-n", namespace, "--wait", "--timeout", "120s"]
        self.run(*args, *_values(values, sets))

    def rollback(self, release: str, namespace: str, revision: int) -> None:
        self.run("rollback", release, str(revision), "-n", namespace, "--wait", "--timeout", "120s")

    def uninstall(self, release: str, namespace: str) -> None:
        self.run("uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")

    def manifest(self, release: str, namespace: str) -> list[dict[str, Any]]:
        return manifests.parse(self.run("get", "manifest", release, "-n", namespace).stdout)


def record(path: Path, key: str, value: Any) -> None:
    """Merge one measurement into the JSON file `path` (out/cluster-*.json, which the docs cite)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _values(values: tuple[Path, ...], sets: tuple[str, ...]) -> list[str]:
    return [*(a for v in values for a in ("-f", str(v))), *(a for s in sets for a in ("--set", s))]


def pods_of(api: Client, namespace: str, modelserving: str) -> list[dict[str, Any]]:
    return api.list("v1", "Pod", namespace, labelSelector=f"modelserving.volcano.sh/name={modelserving}")


def wait_pods(
    api: Client, namespace: str, modelserving: str, names: set[str], timeout: float = 60
) -> list[dict[str, Any]]:
    """Wait until the ModelServing's pods are exactly `names` (none terminating), bound or not."""

    seen: list[str] = []

    def settled() -> list[dict[str, Any]] | None:
        pods = [p for p in pods_of(api, namespace, modelserving) if not p["metadata"].get("deletionTimestamp")]
        seen[:] = sorted(p["metadata"]["name"] for p in pods)
        return pods if set(seen) == names else None

    try:
        return wait_for(f"pods {sorted(names)} of ModelServing {namespace}/{modelserving}", settled, timeout)
    except TimeoutError as e:
        # What there was instead says whether Kthena made nothing, too few, or others.
        raise TimeoutError(f"{e}; the last pods seen: {seen or 'none'}") from None


def wait_gone(api: Client, namespace: str, modelserving: str, timeout: float = 60) -> None:
    def gone() -> bool:
        return not pods_of(api, namespace, modelserving) and not any(
            m["metadata"]["name"] == modelserving for m in api.list(*MODELSERVING, namespace)
        )

    wait_for(f"ModelServing {namespace}/{modelserving} and its pods deleted", gone, timeout)
