"""The chart behind Kthena's router on the local cluster, with the pods Kthena creates running as
processes (tests/test_e2e_kthena.py and harness/drills.py start from here): the values the router
needs, the release applied as rendered, the process kubelet, and the router."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mooncake_pd import manifests, paths
from support.kube.api import Client, pods_brief, wait_for
from support.kube.cluster import Cluster, apply_all
from support.kube.kubelet import ProcessKubelet, scheduling_values
from support.localpods import get_text, post_json
from support.pdcheck import LocalRun, PdSetup

PORT = 7100  # one workloadPort for both roles (the chart requires it with router.type kthena)
LABEL = "modelserving.volcano.sh"
# What the router needs of the chart: its type, one port for both roles (the ModelServer has one
# workloadPort), and the pods on the process kubelet's nodes. The readiness probe's delay is
# shortened (the engines are ready sooner than the 60 s it waits by default).
VALUES: dict[str, Any] = {
    "router.type": "kthena",
    "decode.port": PORT,
    "decode.kvPort": 18000,
    **{f"{role}.{key}": value for role in ("prefill", "decode") for key, value in scheduling_values().items()},
    "prefill.readinessProbe.initialDelaySeconds": 5,
    "decode.readinessProbe.initialDelaySeconds": 5,
}
# The helm hooks (the test pod, the benchmark Job): run as processes against the router instead.
HOOK_KINDS = ("Pod", "Job")
# What the run deletes again, the last applied first (the cluster may serve another run).
OWNED_KINDS = (
    *("ModelServing", "ModelServer", "ModelRoute", "ConfigMap", "Service"),
    *("ServiceAccount", "Role", "RoleBinding"),  # the KV canary's access to the API server
)


def engine_pods(api: Client) -> dict[str, dict[str, Any]]:
    """The release's engine pods that are not being deleted, by name."""
    pods = api.list("v1", "Pod", "default", labelSelector=f"{LABEL}/name={paths.RELEASE}")
    return {p["metadata"]["name"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}


def annotate(api: Client, pods: list[dict[str, Any]], key: str, value: str) -> None:
    """Set annotation `key` on each pod (an update event for whoever watches them)."""
    for pod in pods:
        meta = pod["metadata"]
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": meta["name"]}}
        patch = {"metadata": {"annotations": {key: value}}}
        api.request("PATCH", api.path(probe, meta.get("namespace", "default")), patch, "application/merge-patch+json")


def ready(pod: dict[str, Any]) -> bool:
    conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
    return conditions.get("Ready") == "True"


def wait_ready_pods(
    api: Client, count: int, timeout: float, detail: Callable[[], str] | None = None
) -> dict[str, dict[str, Any]]:
    """Wait until the release has `count` engine pods, every one Ready; them, by name. On time
    out, the pods last seen and their states; `detail()` after them (the kubelet's events)."""
    last: list[dict[str, Any]] = []

    def all_ready() -> dict[str, dict[str, Any]] | None:
        pods = engine_pods(api)
        last[:] = pods.values()
        return pods if len(pods) == count and all(ready(p) for p in pods.values()) else None

    return wait_for(
        f"{count} engine pods Ready", all_ready, timeout, interval=1, seen=lambda: pods_brief(last), detail=detail
    )


def role_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"][f"{LABEL}/role"])


def metrics(pod: dict[str, Any]) -> str:
    return get_text(f"http://{pod['status']['podIP']}:{PORT}/metrics")


def engine_count(objects: list[manifests.Manifest]) -> int:
    spec = manifests.one(objects, "ModelServing")["spec"]
    return int(spec["replicas"]) * sum(int(r.get("replicas", 1)) for r in spec["template"]["roles"])


# The engine pods Kthena makes, Ready on the process kubelet (scheduling, the start script, the
# engine's load, the readiness probe). Measured: 27 s after the apply, an added replica in 79 s
# (README, "End-to-end run", 2026-12-02); one engine alone takes 25-48 s, four at once 136 s. A
# one-core CPU hog about doubles it: 480 s is three times that.
PODS_READY_TIMEOUT = 480.0
# The router routing once it listens (its informers synced, its store holding the pods).
# Measured: 0.3 s after its start (README); 120 s is for a loaded machine and the store's periodic
# update. A router that misses the pods for good answers 400 "no decode pod found", and says so.
ROUTE_TIMEOUT = 120.0
# One completion of two tokens through the router while waiting for it to route: well under a
# second on vLLM 0.13.0 (TTFT 106 ms through the router, README); the slowest request measured
# took 31 s (vLLM 0.32.0's decode, 16 tokens, under load). One that runs out is tried again until
# ROUTE_TIMEOUT.
ROUTE_REQUEST_TIMEOUT = 30.0


def address(url: str) -> tuple[str, int]:
    """(host, port) of an http://host:port URL (the router's base URL)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def routes(router: str, seen: list[str] | None = None) -> bool:
    """A two-token completion through the router answers. Where it does not, False, and what it
    answered (HTTP status and body, or the error) appended to `seen`."""
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 2, "temperature": 0}
    try:
        answer = post_json(f"{router}/v1/completions", body, timeout=ROUTE_REQUEST_TIMEOUT)
    except urllib.error.HTTPError as e:
        said = f"HTTP {e.code}: {e.read()[:200].decode(errors='replace')}"
    except OSError as e:  # refused, reset, or no answer within ROUTE_REQUEST_TIMEOUT
        said = f"{type(e).__name__}: {e}"
    else:
        if answer.get("choices"):
            return True
        said = f"no choices: {str(answer)[:200]}"
    if seen is not None:
        seen.append(said)
    return False


@dataclass
class KthenaDeployment:
    cluster: Cluster
    api: Client
    kubelet: ProcessKubelet
    setup: PdSetup
    pods: dict[str, dict[str, Any]]
    router: str
    timings: dict[str, float]

    def apply(self, objects: list[manifests.Manifest]) -> None:
        """Apply a render of the release (an upgrade, as helm would send it) but its hooks."""
        apply_all(self.api, [o for o in objects if o["kind"] not in HOOK_KINDS])


def kubelet_story(kubelet: ProcessKubelet, lines: int = 15) -> Callable[[], str]:
    """The process kubelet's last events and errors, for a wait's message."""

    def story() -> str:
        events = "\n".join(f"{at:8.1f} {text}" for at, text in kubelet.events[-lines:])
        errors = f"\nits last error: {kubelet.errors[-1][-600:]}" if kubelet.errors else ""
        return f"the process kubelet's last events:\n{events or '(none)'}{errors}"

    return story


@contextmanager
def kthena_deployment(run: LocalRun, cluster: Cluster, setup: PdSetup) -> Iterator[KthenaDeployment]:
    """`setup`'s release applied, its pods Ready on the process kubelet's nodes and Kthena's router
    routing to them; on the way out the kubelet stops every process it started, and the release's
    objects and the kubelet's nodes are deleted, and the router stopped."""
    api = cluster.client()
    kubelet = ProcessKubelet(api, run.processes, run.base / "kubelet")
    timings: dict[str, float] = {}
    try:
        # The router first, as on a cluster where it is installed before the models: started
        # beside pods that are already Ready, Kthena v1.0.0's router may leave them out of its
        # prefill/decode pairs for good (docs/troubleshooting.md, "no decode pod found").
        clock = time.monotonic()
        router = cluster.start_router([(pod_ip, PORT) for pod_ip in kubelet.addresses()])
        timings["router_started"] = time.monotonic() - clock
        clock = time.monotonic()
        kubelet.start()
        apply_all(api, [o for o in setup.objects if o["kind"] not in HOOK_KINDS])
        pods = wait_ready_pods(api, engine_count(setup.objects), PODS_READY_TIMEOUT, detail=kubelet_story(kubelet))
        timings["pods_ready"] = time.monotonic() - clock
        clock = time.monotonic()
        # Listening is not routing: until its store has the pods (its periodic update, after its
        # informers synced) the router answers 400 "no decode pod found".
        answers: list[str] = []
        wait_for(
            "a completion through Kthena's router",
            lambda: routes(router, answers),
            ROUTE_TIMEOUT,
            interval=1,
            seen=lambda: f"{len(answers)} tries, the last answer: {answers[-1] if answers else 'none'}",
            detail=lambda: cluster.log_end("kthena-router", 30),
        )
        timings["router_routes"] = time.monotonic() - clock
        yield KthenaDeployment(cluster, api, kubelet, setup, pods, router, timings)
    finally:
        cluster.stop_router()
        kubelet.close()
        for obj in reversed(setup.objects):
            if obj["kind"] in OWNED_KINDS:
                api.delete(obj)
        for node in kubelet.node_objects():
            api.delete(node)
