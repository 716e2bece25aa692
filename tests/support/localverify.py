"""verify and the helm-test pod against the e2e's local 'pods' (processes on loopback): the
CoreV1Api and CustomObjectsApi calls verify.collect() makes, answered by the processes and their
logs; the canary's HTTP to http://<pod>:<port> sent to 127.0.0.1:<port>; a container of the
helm-test pod run to its end (tests/test_e2e.py, tests/test_e2e_mooncake.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mooncake_pd import chartfiles, engines, manifests, paths, release_io
from support.kube.api import Client
from support.kube.serviceaccount import project
from support.localpods import AUTH, Network, Processes, prepare, run_to_end


@dataclass
class LocalCore:
    """The CoreV1Api calls verify.collect() makes, answered by the local processes: the engine
    'pods' and their logs since the pods were listed (verify lists them before its request)."""

    pods: list[dict[str, Any]]
    logs: dict[str, Path]
    offsets: dict[str, int] = field(default_factory=dict)

    def list_namespaced_pod(self, namespace, label_selector):
        self.offsets = {name: path.stat().st_size for name, path in self.logs.items()}
        items = [type("Pod", (), {"to_dict": lambda self, p=p: p})() for p in self.pods]
        return type("PodList", (), {"items": items})()

    def read_namespaced_pod_log(self, name, namespace, container, since_seconds):
        with self.logs[name].open("rb") as log:
            log.seek(self.offsets.get(name, 0))
            return log.read().decode(errors="replace")


class LocalCustom:
    """The CustomObjectsApi call verify.collect() makes: the release's ModelServing."""

    def __init__(self, modelserving):
        self.modelserving = modelserving

    def list_namespaced_custom_object(self, *args, **kwargs):
        return {"items": [self.modelserving]}


def pod_view(pod: engines.PodIdentity, role: dict[str, Any]) -> dict[str, Any]:
    """The pod as verify reads it from the API: Kthena's labels and the template's, Ready."""
    labels = {**role["entryTemplate"]["metadata"]["labels"], **pod.labels()}
    return {
        "metadata": {"name": pod.name, "labels": labels},
        "spec": {"containers": [{"name": role["name"]}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "container_statuses": []},
    }


def local_canary_io() -> release_io.CanaryIO:
    """verify's canary HTTP to the local 'pods': http://<pod>:<port> is 127.0.0.1:<port> here; the
    engines' key of the runs here goes with each request (localpods.AUTH), as the canary's
    OPENAI_API_KEY does in a pod."""
    canary = chartfiles.program("kv_canary")

    def local(url: str) -> str:
        return re.sub(r"^http://[^:/]+:", "http://127.0.0.1:", url)

    return (lambda url, body, timeout, headers: canary._post(local(url), body, timeout, {**headers, **AUTH})), (
        lambda url, timeout: canary._get(local(url), timeout)
    )


def helm_test_container(
    objects,
    name: str,
    work: Path,
    network: Network,
    processes: Processes,
    api: Client | None = None,
    again: str = "",
) -> tuple[int, str]:
    """One container of the helm-test pod (chat, kv-canary), run to its end. With `api` (a local
    cluster), its projected ServiceAccount volumes are laid out and the API server's address is
    in its env, as the kubelet gives them (the KV canary behind Kthena's router lists the pods).
    `again`: a suffix for a second run's folder and log."""
    spec = manifests.one(objects, "Pod", f"{paths.RELEASE}-test")["spec"]
    container = next(c for c in spec["containers"] if c["name"] == name)
    prepared = prepare(objects, spec, container, work / f"test-{name}{again}", network)
    if api is not None:
        prepared.env.update(project(api, "default", spec, prepared.mounts, container.get("volumeMounts", [])))
    return run_to_end(processes, prepared, 300, f"test-{name}{again}")
