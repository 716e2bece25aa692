"""A fleet on the real control plane (issue #41 items 1-4 and 6): `make scale`.

On the local cluster (tests/support/kube/cluster.py: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler standing in for Volcano's, KWOK, Kthena v1.0.0's controller-manager), with KWOK
nodes shaped like the ascend-a3 entry of cluster/nodes.yaml (16 huawei.com/ascend-1980 each):

1. Bring-up: at each size (nodes; --sizes), a release of the chart with nodes / 2 serving groups
   of 1P1D, each engine pod a whole node (TP 2 x DP 8: 16 devices), applied as rendered. Measured:
   seconds from the apply to each pod Running and Ready and to each group's last pod (P50, P90,
   P99), to every pod; Kthena's controller CPU seconds and peak RSS; the CPU of every component;
   kube-apiserver's requests (apiserver_request_total) by verb and resource; and a fit of the time
   against the number of groups (log-log and linear).
2. Rollout at the largest size: a start-script change (decode's max-num-seqs, which changes the
   rendered script's checksum) applied as `helm upgrade` sends it, rolled by Kthena's
   ServingGroupRollingUpdate with maxUnavailable from the values (--max-unavailable). A watch of
   the pods gives the total time, the most groups down at once and any group that served prefill
   and decode of two revisions together.
3. Autoscaling: decode from 1 to 32 and back under Kthena's autoscaler (the cost-first preset with
   its bounds and behavior set for the run, servingGroups 1 as the chart requires), the load given
   through the pod-metrics stand-in; the P:D ratio of the written replicas at every step, and the
   time of each step.
4. Short of capacity: 10 % of the nodes cordoned below what the groups need; how many groups end
   partly placed under kube-scheduler (no gang scheduling here) and the devices they hold.

Figures go to out/scale/fleet.json and out/scale/*.png; they are held against the bounds table of
docs/scale.md, and a broken bound makes the exit code 1 (2: the run could not be made). Every wait
is bounded and says what it waited for and what it last saw; every process started is stopped by
PID, also on failure or SIGTERM.


Over 400 lines: the driver of `make scale`: its phases (bring-up, rollout, autoscaling, short of
capacity) run in order on one live control plane and share its constants, pod watch and meter; the
judgement is in scale_judgement, pod_timeline and growth. A cut waits for a run to check it by (16
min on the local cluster)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import json
import math
import os
import platform
import shutil
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "scripts")]

from harness import growth, pod_timeline, scale_judgement  # noqa: E402
from harness.procstat import cpu_seconds, find_process, reset_peak, status_kib  # noqa: E402
from mooncake_pd import helm, manifests, paths  # noqa: E402
from support import teardown  # noqa: E402
from support.kube import build  # noqa: E402
from support.kube.api import ApiError, Client, pods_brief, wait_for  # noqa: E402
from support.kube.cluster import Cluster, apply_all, node_objects  # noqa: E402
from support.waits import brief  # noqa: E402

OUT = REPO / "out" / "scale"
DOC = REPO / "docs" / "scale.md"
# Nodes per size; serving groups are half of it (two whole-node pods a group).
FULL_SIZES = (50, 100, 200, 400)
QUICK_SIZES = (10, 20, 40, 80)
NODE_ENTRY = "ascend-a3"
RELEASE = paths.RELEASE
PRESET = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena.yaml"
AUTOSCALE_PRESET = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena-autoscaling-cost-first.yaml"
# Each engine pod a whole A3 node: TP 2 x DP 8 = 16 devices, so a group of 1P1D takes two nodes.
WHOLE_NODE: dict[str, Any] = {
    "prefill.parallelism.data": 8,
    "prefill.parallelism.dataLocal": 8,
    "decode.parallelism.data": 8,
}
# The rollout's start-script change (decode's script, so the pod template's checksum).
ROLLOUT_CHANGE: dict[str, Any] = {"decode.args.max-num-seqs": 4}
ROLES = {"prefill": 1, "decode": 1}
DEVICE = "huawei.com/ascend-1980"
LABEL = "modelserving.volcano.sh"
HOOK_KINDS = ("Pod", "Job")
OWNED_KINDS = ("ModelServing", "AutoscalingPolicy", "ModelServer", "ModelRoute", "ConfigMap", "Service")
# Autoscaling: decode from 1 to AUTOSCALE_TOP and back. The load is decode's running requests,
# all on its first pod (the autoscaler sums the role's pods): AUTOSCALE_TOP x the target.
AUTOSCALE_TOP = 32
# The behavior for the run: doubling up and halving down each period, no stabilization window,
# so the steps are the autoscaler's own (1, 2, 4, ... 32 and back) at its 15 s reconcile, not
# the presets' minutes (docs/scale.md).
AUTOSCALE_VALUES: dict[str, Any] = {
    "autoscaling.decode.maxReplicas": AUTOSCALE_TOP,
    "autoscaling.prefill.maxReplicas": AUTOSCALE_TOP,
    "autoscaling.behavior.scaleUp.stablePolicy": {
        "instances": 1, "percent": 100, "period": "15s", "selectPolicy": "Or", "stabilizationWindow": "0s",
    },
    "autoscaling.behavior.scaleUp.panicPolicy": {
        "percent": 100, "period": "15s", "panicThresholdPercent": 200, "panicModeHold": "15s",
    },
    "autoscaling.behavior.scaleDown": {
        "instances": 1, "percent": 50, "period": "15s", "selectPolicy": "Or", "stabilizationWindow": "0s",
    },
}  # fmt: skip
METRICS_PORT = 7100  # the presets' engine port, where the pod-metrics stand-in answers
SHORT_FRACTION = 0.10

# -- bounds of the waits (from the figures measured on the 2-core machine: docs/scale.md) ------
# New nodes Ready and untainted (KWOK marks them; the node lifecycle controller lifts the
# not-ready taint): a fixed part and a part per node.
NODES_READY_S = (60.0, 0.5)
# A release's pods Running and Ready after the apply; Kthena's controller creates them at its
# client's 5 requests per second (client-go's default, docs/scale.md): per pod about 0.5 s.
PODS_UP_S = (120.0, 1.5)
# The pods gone after the release is deleted (kube-controller-manager's garbage collector).
PODS_GONE_S = (120.0, 0.5)
# A rollout: every group deleted and made again, maxUnavailable at a time.
ROLLOUT_S = (180.0, 3.0)
# One autoscaling direction (five steps at a 15 s reconcile, each step's pods).
AUTOSCALE_S = 420.0
# Short of capacity: the pods made and the schedulable nodes filled.
SHORT_S = (120.0, 1.5)
OUT_EVENTS = [OUT]  # where the rollout's events go (main sets it to --out)
WATCH_TIMEOUT_S = 15
# A wait on the watch lists the pods again this often: what a watch may have missed shows.
RESYNC_S = 30.0  # one watch request; the watch is made again until stopped
WATCH_REQUEST_S = 60.0


MAX_UNAVAILABLE = "rolloutStrategy.rollingUpdateConfiguration.maxUnavailable"


def rollout_values(extra: dict[str, Any], groups: int) -> dict[str, Any]:
    """`extra` with its maxUnavailable, or 1 where that comes to no group at this size (the chart
    refuses a rollout that could never proceed; only the largest size rolls out)."""
    if pod_timeline.max_unavailable(extra[MAX_UNAVAILABLE], groups) < 1:
        return {**extra, MAX_UNAVAILABLE: 1}
    return extra


def bound(part: tuple[float, float], count: int) -> float:
    return part[0] + part[1] * count


class Meter:
    """What a phase costs: each component's CPU seconds, Kthena's controller peak RSS (VmHWM
    reset at the start where the kernel lets us, and VmRSS sampled every second), and
    kube-apiserver's requests by verb and resource."""

    def __init__(self, cluster: Cluster, api: Client):
        self.cluster, self.api = cluster, api
        self.controller = find_process(cluster.pids["kthena-controller-manager"], "kthena-controller-manager")
        self.pids = {name: pid for name, pid in cluster.pids.items() if not name.endswith("relay")}
        if self.controller:
            self.pids["kthena-controller-manager"] = self.controller

    def _cpu(self) -> dict[str, float]:
        found = {}
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                found[name] = cpu_seconds(pid)
        return found

    def _requests(self) -> dict[str, float]:
        return scale_judgement.requests_by_verb_resource(self.api.request("GET", "/metrics").get("text", ""))

    @contextlib.contextmanager
    def measure(self, into: dict[str, Any]) -> Iterator[None]:
        cpu, requests = self._cpu(), self._requests()
        reset = bool(self.controller) and reset_peak(self.controller or 0)
        peak = {"rss": 0}
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                with contextlib.suppress(OSError):
                    peak["rss"] = max(peak["rss"], (status_kib(self.controller or 0, "VmRSS") or 0))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        began = time.monotonic()
        try:
            yield
        finally:
            stop.set()
            sampler.join(timeout=5)
            after = self._cpu()
            into["cpu_s"] = {k: round(after[k] - cpu[k], 2) for k in after if k in cpu}
            into["wall_s"] = round(time.monotonic() - began, 2)
            if self.controller:
                with contextlib.suppress(OSError):
                    into["controller_peak_rss_mib"] = round(
                        max(peak["rss"], (status_kib(self.controller, "VmHWM") or 0) if reset else 0) / 1024, 1
                    )
                    into["controller_peak_rss_since"] = "phase" if reset else "samples every second"
            with contextlib.suppress(ApiError, OSError):
                grown = scale_judgement.difference(self._requests(), requests)
                into["apiserver_requests"] = {"total": sum(grown.values()), "by_verb_resource": grown}


# -- the pods' watch -----------------------------------------------------------------------------


def pod_event(t: float, kind: str, pod: dict[str, Any]) -> pod_timeline.PodEvent:
    meta, status = pod["metadata"], pod.get("status") or {}
    labels = meta.get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return pod_timeline.PodEvent(
        t,
        f"{meta['name']}@{meta.get('uid', '')[:8]}",  # a rolled group's pods come back under the same names
        labels.get(f"{LABEL}/group-name", ""),
        labels.get(f"{LABEL}/role", ""),
        labels.get(f"{LABEL}/revision", ""),
        status.get("phase") == "Running" and ready,
        bool(meta.get("deletionTimestamp")),
        kind == "DELETED",
        (pod.get("spec") or {}).get("nodeName") or "",
    )


def devices(pod: dict[str, Any]) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(DEVICE, 0))
    return total


class PodWatch:
    """A watch of a release's pods in one namespace (list, then watch from its resourceVersion,
    made again every WATCH_TIMEOUT_S seconds and after a 410), on a thread: every event as a
    scale.PodEvent on the run's clock, the pods as they are now, their devices and IPs."""

    def __init__(self, api: Client, namespace: str, clock: Callable[[], float], selector: str = ""):
        self.api, self.namespace, self.clock = api, namespace, clock
        self.selector = selector or f"{LABEL}/name={RELEASE}"
        self.events: list[pod_timeline.PodEvent] = []
        self.now: dict[str, pod_timeline.PodEvent] = {}
        self.devices: dict[str, int] = {}
        self.ips: dict[str, str] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error = ""
        self.version = ""
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodWatch:
        self._list()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=WATCH_TIMEOUT_S + 10)

    def _take(self, kind: str, pod: dict[str, Any]) -> None:
        event = pod_event(self.clock(), kind, pod)
        with self.lock:
            self.events.append(event)
            if event.gone:
                self.now.pop(event.name, None)
            else:
                self.now[event.name] = event
                self.devices[event.name] = devices(pod)
                ip = (pod.get("status") or {}).get("podIP")
                if ip:
                    self.ips[event.name] = ip

    def _list(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        answer = self.api.request("GET", path, query={"labelSelector": self.selector})
        listed = set()
        for pod in answer.get("items", []):
            self._take("ADDED", pod)
            listed.add(f"{pod['metadata']['name']}@{pod['metadata'].get('uid', '')[:8]}")
        with self.lock:  # a pod deleted while no watch ran: gone now
            for name in set(self.now) - listed:
                gone = dataclasses.replace(self.now.pop(name), t=self.clock(), gone=True)
                self.events.append(gone)
        self.version = answer["metadata"]["resourceVersion"]

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._watch()
            except Exception as e:  # the watch is made again; its last error shows in states()
                self.error = f"{type(e).__name__}: {brief(e, 200)}"
                self.stop.wait(1.0)
                with contextlib.suppress(OSError, ApiError, KeyError):
                    self._list()

    def _watch(self) -> None:
        url = urllib.parse.urlsplit(self.api.server)
        query = urllib.parse.urlencode({
            "labelSelector": self.selector, "watch": "1", "resourceVersion": self.version,
            "timeoutSeconds": str(WATCH_TIMEOUT_S), "allowWatchBookmarks": "true",
        })  # fmt: skip
        connection = http.client.HTTPSConnection(
            url.hostname or "127.0.0.1", url.port, timeout=WATCH_REQUEST_S, context=self.api._ssl()
        )
        try:
            connection.request(
                "GET",
                f"/api/v1/namespaces/{self.namespace}/pods?{query}",
                headers={"Authorization": f"Bearer {self.api.token}", "Accept": "application/json"},
            )
            answer = connection.getresponse()
            if answer.status != 200:
                raise ApiError(answer.status, answer.read(300).decode(errors="replace"))
            while not self.stop.is_set():
                line = answer.readline()
                if not line:
                    return
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:  # too old: list again
                        self._list()
                        return
                    raise ApiError(int(obj.get("code", 500)), str(obj.get("message")))
                self.version = obj.get("metadata", {}).get("resourceVersion", self.version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._take(str(kind), obj)
        finally:
            connection.close()

    def resync(self) -> None:
        """List the pods again (a pod whose deletion the watch missed is gone after it)."""
        with contextlib.suppress(OSError, ApiError, KeyError):
            self._list()

    def snapshot(self) -> tuple[list[pod_timeline.PodEvent], dict[str, pod_timeline.PodEvent]]:
        with self.lock:
            return list(self.events), dict(self.now)

    def states(self) -> str:
        """The pods now, counted by state, for a wait's message."""
        _, now = self.snapshot()
        counts: dict[str, int] = {}
        for pod in now.values():
            state = (
                "terminating" if pod.terminating else "serving" if pod.serving else "bound" if pod.node else "unbound"
            )
            key = f"{pod.role} {pod.revision[:10]} {state}"
            counts[key] = counts.get(key, 0) + 1
        said = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no pods"
        return said + (f"; the watch's last error: {self.error}" if self.error else "")


# -- the release ---------------------------------------------------------------------------------


def render(preset: Path, values: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The preset rendered with `values`, the helm hooks left out (the cluster runs no engine)."""
    text = helm.template(paths.helm_binary(), (preset,), values, namespace=namespace)
    return [o for o in manifests.parse(text) if o["kind"] not in HOOK_KINDS]


def apply_release(api: Client, objects: list[dict[str, Any]], namespace: str) -> None:
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    apply_all(api, [{**o, "metadata": {**o["metadata"], "namespace": namespace}} for o in objects], "scale")


def delete_release(api: Client, objects: list[dict[str, Any]], namespace: str, pods: int) -> float:
    """Delete the release's objects and wait for its pods to be gone: the seconds it took."""
    began = time.monotonic()
    # The ModelServing first (the garbage collector then deletes its pods and PodGroups), the
    # chart's per-replica Services in one request (two a group), then the rest.
    for obj in sorted(objects, key=lambda o: o["kind"] != "ModelServing"):
        if obj["kind"] in OWNED_KINDS and obj["kind"] != "Service":
            api.delete(obj, namespace)
        if obj["kind"] == "ModelServing":
            selector = f"app.kubernetes.io/instance={RELEASE}"
            api.request("DELETE", f"/api/v1/namespaces/{namespace}/services", query={"labelSelector": selector})
    last: list[dict[str, Any]] = []

    def gone() -> bool:
        last[:] = api.list("v1", "Pod", namespace, labelSelector=f"{LABEL}/name={RELEASE}")
        return not last

    wait_for(
        f"the {pods} pods of namespace {namespace} gone after the release's deletion",
        gone,
        bound(PODS_GONE_S, pods),
        interval=1,
        seen=lambda: f"{len(last)} left: {pods_brief(last[:5])}",
    )
    return round(time.monotonic() - began, 2)


def a3_nodes(count: int) -> list[dict[str, Any]]:
    """`count` KWOK nodes of cluster/nodes.yaml's ascend-a3 entry (its capacity, arch, labels)."""
    return node_objects(counts={NODE_ENTRY: count})


def grow_nodes(cluster: Cluster, api: Client, count: int) -> float:
    """Apply the A3 nodes up to `count` and wait until all are Ready and untainted."""
    began = time.monotonic()
    have = {n["metadata"]["name"] for n in api.list("v1", "Node", None)}
    for node in a3_nodes(count):
        if node["metadata"]["name"] not in have:
            api.apply(node)
    waiting: list[str] = []

    def ready() -> bool:
        waiting.clear()
        for node in api.list("v1", "Node", None):
            taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or [] if t["key"].startswith("node.")]
            state = next(
                (c["status"] for c in node.get("status", {}).get("conditions") or [] if c["type"] == "Ready"), ""
            )
            if state != "True" or any(t != "node.kubernetes.io/unschedulable" for t in taints):
                waiting.append(f"{node['metadata']['name']} (Ready {state or 'none'}, taints {taints})")
        return not waiting

    wait_for(
        f"{count} A3 nodes Ready and untainted",
        ready,
        bound(NODES_READY_S, count),
        interval=1,
        seen=lambda: f"{len(waiting)} not: {'; '.join(waiting[:5])}",
        detail=lambda: cluster.log_end("kwok"),
    )
    return round(time.monotonic() - began, 2)


def cordon(api: Client, names: list[str], on: bool) -> None:
    for name in names:
        probe = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        api.request("PATCH", api.path(probe), {"spec": {"unschedulable": on}}, "application/merge-patch+json")


def wait_serving(
    cluster: Cluster, watch: PodWatch, count: int, timeout: float, what: str, revision_not: str = ""
) -> None:
    """Wait until `count` pods serve (none terminating; with `revision_not`, none of that revision
    either)."""

    listed = [time.monotonic()]

    def done() -> bool:
        if time.monotonic() - listed[0] > RESYNC_S:
            watch.resync()
            listed[0] = time.monotonic()
        _, now = watch.snapshot()
        live = [p for p in now.values() if not p.terminating]
        if revision_not and any(p.revision == revision_not for p in now.values()):
            return False
        return len(live) == count and all(p.serving for p in live)

    wait_for(
        what,
        done,
        timeout,
        interval=0.5,
        seen=watch.states,
        detail=lambda: cluster.log_end("kthena-controller-manager"),
    )


# -- the phases ------------------------------------------------------------------------------------


def bringup(
    cluster: Cluster, api: Client, meter: Meter, nodes: int, extra: dict[str, Any], rollout: bool
) -> dict[str, Any]:
    """One size: its nodes, the release with nodes / 2 groups, every pod serving; then, at the
    largest size, the rollout; then the release deleted."""
    groups = nodes // 2
    namespace = f"scale-{groups}"
    result: dict[str, Any] = {"nodes": nodes, "serving_groups": groups, "pod_count": 2 * groups}
    result["nodes_ready_s"] = grow_nodes(cluster, api, nodes)
    values = {**WHOLE_NODE, **rollout_values(extra, groups), "servingGroups": groups}
    result["max_unavailable"] = values[MAX_UNAVAILABLE]
    objects = render(PRESET, values, namespace)
    origin = time.monotonic()
    with PodWatch(api, namespace, lambda: time.monotonic() - origin) as watch:
        cost: dict[str, Any] = {}
        with meter.measure(cost):
            applied = time.monotonic() - origin
            apply_release(api, objects, namespace)
            wait_serving(
                cluster,
                watch,
                2 * groups,
                bound(PODS_UP_S, 2 * groups),
                f"the {2 * groups} pods of {groups} serving groups Running and Ready",
            )
        events, _ = watch.snapshot()
        judged = pod_timeline.bring_up(events, 2 * groups, sum(ROLES.values()), since=applied)
        result.update(judged.as_dict())
        result["cost"] = cost
        result["pod_seconds"] = sorted(round(v, 2) for v in judged.pods.values())
        print(
            f"bring-up {groups} groups on {nodes} nodes: every pod Running in {judged.all_s:.1f} s "
            f"(groups P50 {result['groups'].get('p50')} P99 {result['groups'].get('p99')} s); "
            f"controller {cost['cpu_s'].get('kthena-controller-manager')} CPU s, "
            f"{cost.get('controller_peak_rss_mib')} MiB; {cost.get('apiserver_requests', {}).get('total')} requests",
            flush=True,
        )
        if rollout:
            result["rollout"] = roll(cluster, api, meter, watch, objects, values, namespace, groups, origin)
    result["teardown_s"] = delete_release(api, objects, namespace, 2 * groups)
    return result


def roll(
    cluster: Cluster,
    api: Client,
    meter: Meter,
    watch: PodWatch,
    objects: list[dict[str, Any]],
    values: dict[str, Any],
    namespace: str,
    groups: int,
    origin: float,
) -> dict[str, Any]:
    _, before = watch.snapshot()
    old = {p.revision for p in before.values()}
    if len(old) != 1:
        raise RuntimeError(f"before the rollout the pods carry {len(old)} revisions: {sorted(old)}")
    old_revision = old.pop()
    ms = manifests.one(objects, "ModelServing")
    setting = ms["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxUnavailable"]
    most = pod_timeline.max_unavailable(setting, groups)
    changed = render(PRESET, {**values, **ROLLOUT_CHANGE}, namespace)
    if manifests.one(changed, "ModelServing")["spec"]["template"] == ms["spec"]["template"]:
        raise RuntimeError(f"{ROLLOUT_CHANGE} changed nothing in the ModelServing's pod templates")
    cost: dict[str, Any] = {}
    with meter.measure(cost):
        started = time.monotonic() - origin
        apply_release(api, changed, namespace)
        wait_serving(
            cluster,
            watch,
            2 * groups,
            bound(ROLLOUT_S, groups),
            f"{groups} serving groups rolled to a new revision (from {old_revision})",
            revision_not=old_revision,
        )
    events, now = watch.snapshot()
    initial = [e for e in before.values()]
    later = [e for e in events if e.t >= started]
    revisions = {p.revision for p in now.values()}
    new_revision = next(iter(revisions)) if len(revisions) == 1 else ""
    judged = pod_timeline.rollout(initial, later, ROLES, groups, new_revision, since=started)
    with (OUT_EVENTS[0] / "rollout-events.jsonl").open("w") as out:  # the timeline the judgement read
        for e in [*initial, *later]:
            out.write(json.dumps(dataclasses.asdict(e)) + "\n")
    result = {
        "max_unavailable": setting,
        "max_unavailable_groups": most,
        "old_revision": old_revision,
        "new_revision": new_revision,
        **judged.as_dict(),
        "down_series": judged.down_series,
        "cost": cost,
    }
    print(
        f"rollout of {groups} groups (maxUnavailable {setting} = {most}): {judged.done_s} s, "
        f"at most {judged.most_down} down, {len(judged.mixed)} groups serving two revisions",
        flush=True,
    )
    return result


def autoscale(cluster: Cluster, api: Client, meter: Meter, nodes: int) -> dict[str, Any]:
    """Decode from 1 to AUTOSCALE_TOP and back under Kthena's autoscaler."""
    namespace = "scale-autoscale"
    objects = render(AUTOSCALE_PRESET, AUTOSCALE_VALUES, namespace)
    policy = manifests.one(objects, "AutoscalingPolicy")
    ratio = _find(policy, "ratioConstraint")
    low, high = float(ratio["minRatio"]), float(ratio["maxRatio"])
    # One engine pod per node: the A3 engines run on the host network with hostPorts (the port
    # set of a role is the same in every replica) and the preset keeps prefill and decode apart.
    needed = AUTOSCALE_TOP + math.ceil(low * AUTOSCALE_TOP)
    if nodes < needed:
        raise RuntimeError(
            f"autoscaling to decode {AUTOSCALE_TOP} needs {needed} nodes (one engine pod each), not {nodes}"
        )
    target = float(_find(policy, "roles")["decode"]["metrics"][0]["targetValue"])
    origin = time.monotonic()
    observed: list[scale_judgement.Replicas] = []
    result: dict[str, Any] = {"ratio_bounds": [low, high], "decode_target": target, "top": AUTOSCALE_TOP}

    def clock() -> float:
        return time.monotonic() - origin

    with PodWatch(api, namespace, clock) as watch:
        cost: dict[str, Any] = {}
        with meter.measure(cost):
            apply_release(api, objects, namespace)
            wait_serving(cluster, watch, 2, bound(PODS_UP_S, 2), "the autoscaled release's 2 pods Running and Ready")

            loaded: dict[str, str | None] = {}

            def observe(load: float) -> scale_judgement.Replicas:
                ms = api.get("workload.serving.volcano.sh/v1alpha1", "ModelServing", RELEASE, namespace)
                written = {r["name"]: int(r.get("replicas", 1)) for r in ms["spec"]["template"]["roles"]}
                _, now = watch.snapshot()
                serving = {role: sum(1 for p in now.values() if p.role == role and p.serving and not p.terminating)
                           for role in ROLES}  # fmt: skip
                table = {}
                decode = sorted(
                    n for n, p in now.items() if p.role == "decode" and not p.terminating and n in watch.ips
                )
                if loaded.get("pod") not in decode:  # the load on one decode pod, kept there
                    loaded["pod"] = decode[0] if decode else None
                for name in sorted(now):
                    ip = watch.ips.get(name)
                    if not ip or now[name].terminating:
                        continue
                    if name == loaded["pod"]:
                        table[f"{ip}:{METRICS_PORT}"] = {"vllm:num_requests_running": load}
                    elif now[name].role == "decode":
                        table[f"{ip}:{METRICS_PORT}"] = {"vllm:num_requests_running": 0.0}
                    else:
                        table[f"{ip}:{METRICS_PORT}"] = {"vllm:num_requests_waiting": 0.0}
                cluster.set_pod_metrics(table)
                seen = scale_judgement.Replicas(
                    clock(), written["prefill"], written["decode"], serving["prefill"], serving["decode"]
                )
                observed.append(seen)
                return seen

            for direction, load, want in (("up", AUTOSCALE_TOP * target, AUTOSCALE_TOP), ("down", 0.0, 1)):
                began = clock()

                def reached(load: float = load, want: int = want) -> bool:
                    seen = observe(load)
                    return seen.decode == want and seen.decode_serving == want and seen.prefill_serving == seen.prefill

                wait_for(
                    f"decode's replicas {want} written and serving ({direction})",
                    reached,
                    AUTOSCALE_S,
                    interval=1,
                    seen=lambda: f"last observed {observed[-1] if observed else None}; pods: {watch.states()}",
                    detail=lambda: cluster.log_end("kthena-controller-manager"),
                )
                result[f"{direction}_s"] = round(clock() - began, 2)
                print(f"autoscaling {direction} to decode {want}: {result[f'{direction}_s']} s", flush=True)
        result["cost"] = cost
    found = scale_judgement.steps(observed, low, high)
    result["steps"] = [s.as_dict() for s in found]
    result["ratio_violations"] = [o.__dict__ for o in scale_judgement.ratio_violations(observed, low, high)]
    result["observed"] = [[round(o.t, 2), o.prefill, o.decode, o.prefill_serving, o.decode_serving] for o in observed]
    result["teardown_s"] = delete_release(api, objects, namespace, max(o.prefill + o.decode for o in observed))
    return result


def _find(obj: Any, key: str) -> Any:
    """The first value under `key` anywhere in `obj`."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for value in obj.values():
            found = _find(value, key)
            if found is not None:
                return found
    if isinstance(obj, list):
        for value in obj:
            found = _find(value, key)
            if found is not None:
                return found
    return None


def short_of_capacity(
    cluster: Cluster, api: Client, meter: Meter, nodes: int, fleet: int, extra: dict[str, Any]
) -> dict[str, Any]:
    """`nodes` / 2 groups (two whole nodes each) with SHORT_FRACTION fewer schedulable nodes than
    they need: of the `fleet` nodes all but that many are cordoned."""
    groups = nodes // 2
    schedulable = nodes - math.ceil(nodes * SHORT_FRACTION)
    cordoned = [n["metadata"]["name"] for n in a3_nodes(fleet)][: fleet - schedulable]
    namespace = f"scale-short-{groups}"
    objects = render(PRESET, {**WHOLE_NODE, **rollout_values(extra, groups), "servingGroups": groups}, namespace)
    result: dict[str, Any] = {"nodes_needed": 2 * groups, "nodes_schedulable": schedulable, "groups": groups}
    cordon(api, cordoned, True)
    origin = time.monotonic()
    try:
        with PodWatch(api, namespace, lambda: time.monotonic() - origin) as watch:
            cost: dict[str, Any] = {}
            with meter.measure(cost):
                apply_release(api, objects, namespace)

                def filled() -> bool:
                    _, now = watch.snapshot()
                    bound_pods = sum(1 for p in now.values() if p.node)
                    return len(now) == 2 * groups and bound_pods >= min(schedulable, 2 * groups)

                try:
                    wait_for(
                        f"{2 * groups} pods made and {schedulable} schedulable nodes filled",
                        filled,
                        bound(SHORT_S, 2 * groups),
                        interval=1,
                        seen=watch.states,
                    )
                except TimeoutError as e:  # judged below (short-idle-nodes), with what was seen
                    result["wait"] = str(e).splitlines()[0]
            _, now = watch.snapshot()
            pods = [
                {"group": p.group, "bound": bool(p.node), "devices": watch.devices.get(n, 0)} for n, p in now.items()
            ]
            placed = scale_judgement.placement(pods, sum(ROLES.values()))
            result.update(placed.as_dict())
            result["idle_nodes"] = max(0, min(schedulable, 2 * groups) - placed.bound_pods)
            # What gang scheduling (all of a group or none) would have placed: whole groups only.
            result["gang_complete_groups"] = schedulable // 2
            result["cost"] = cost
            print(
                f"short of capacity: {groups} groups on {schedulable} of {nodes} nodes: {placed.complete} complete, "
                f"{placed.partial} partly placed holding {placed.held_devices} devices, {placed.unplaced} unplaced",
                flush=True,
            )
    finally:
        cordon(api, cordoned, False)
    result["teardown_s"] = delete_release(api, objects, namespace, 2 * groups)
    return result


# -- the report --------------------------------------------------------------------------------------


def figures(report: dict[str, Any]) -> dict[str, float | None]:
    """The figures docs/scale.md bounds, from the report."""
    found: dict[str, float | None] = {}
    sizes = report.get("bringup", [])
    if sizes:
        top = sizes[-1]
        found["bringup-all-running-s"] = top.get("all_running_s")
        found["bringup-group-p99-s"] = top["groups"].get("p99")
        n = top["serving_groups"]
        found["bringup-controller-cpu-ms-per-group"] = round(
            1000 * top["cost"]["cpu_s"].get("kthena-controller-manager", 0) / n, 1
        )
        found["bringup-controller-peak-rss-mib"] = top["cost"].get("controller_peak_rss_mib")
        found["bringup-apiserver-requests-per-group"] = round(
            top["cost"].get("apiserver_requests", {}).get("total", 0) / n, 1
        )
        if report.get("fit"):
            found["bringup-growth-exponent"] = report["fit"]["local_exponent"]
        rolled = top.get("rollout")
        if rolled:
            found["rollout-s"] = rolled.get("done_s")
            found["rollout-groups-down-over-max-unavailable"] = (
                rolled["most_groups_down"] - rolled["max_unavailable_groups"]
            )
            found["rollout-groups-serving-two-revisions"] = len(rolled["groups_serving_two_revisions"])
    auto = report.get("autoscale")
    if auto:
        found["autoscale-up-s"] = auto.get("up_s")
        found["autoscale-down-s"] = auto.get("down_s")
        found["autoscale-ratio-violations"] = len(auto.get("ratio_violations", []))
        found["autoscale-longest-step-s"] = max((s["since_previous_s"] for s in auto.get("steps", [])), default=None)
    short = report.get("short")
    if short:
        found["short-idle-nodes"] = short.get("idle_nodes")
    return found


def _label(ax: Any, xlabel: str, ylabel: str, title: str, legend: int | None = None) -> None:
    """One plot's labels, title, legend (at that font size) and grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if legend:
        ax.legend(fontsize=legend)
    ax.grid(alpha=0.3)


def _save(plt: Any, fig: Any, out: Path, name: str) -> str:
    """Write the figure to out/name and close it; returns the name."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def plots(report: dict[str, Any], out: Path) -> list[str]:
    """The PNGs of the report (matplotlib, pinned in requirements-test.txt)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    sizes = report.get("bringup", [])
    if sizes:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        n = [s["serving_groups"] for s in sizes]
        for key, style in (("p50", "o-"), ("p90", "s-"), ("p99", "^-")):
            left.plot(n, [s["groups"].get(key) for s in sizes], style, label=f"group {key.upper()}")
        left.plot(n, [s.get("all_running_s") for s in sizes], "k*--", label="every pod")
        fitted = report.get("fit")
        if fitted:
            xs = [min(n) + (max(n) - min(n)) * i / 50 for i in range(51)]
            left.plot(xs, [fitted["coefficient"] * x ** fitted["exponent"] for x in xs], ":", color="grey",
                      label=f"fit: {fitted['coefficient']:.2f} N^{fitted['exponent']:.2f}")  # fmt: skip
        _label(
            left, "serving groups (2 whole-node pods each)", "seconds from the apply to Running", "Bring-up", legend=8
        )
        for s in sizes:
            times = s["pod_seconds"]
            right.plot(times, [(i + 1) / len(times) for i in range(len(times))], label=f"{s['serving_groups']} groups")
        _label(right, "seconds from the apply", "fraction of pods Running", "Pods Running over time", legend=8)
        written.append(_save(plt, fig, out, "bringup.png"))

        fig, (cpu, req) = plt.subplots(1, 2, figsize=(11, 4.2))
        for component in (
            "kthena-controller-manager",
            "kube-apiserver",
            "etcd",
            "kube-scheduler",
            "kwok",
            "kube-controller-manager",
        ):
            cpu.plot(n, [s["cost"]["cpu_s"].get(component, 0) for s in sizes], "o-", label=component)
        _label(cpu, "serving groups", "CPU seconds during the bring-up", "CPU per component", legend=7)
        req.plot(n, [s["cost"].get("apiserver_requests", {}).get("total", 0) for s in sizes], "o-")
        _label(req, "serving groups", "kube-apiserver requests", "API requests during the bring-up")
        written.append(_save(plt, fig, out, "cost.png"))

        rolled = sizes[-1].get("rollout")
        if rolled and rolled.get("down_series"):
            fig, ax = plt.subplots(figsize=(8, 3.6))
            ts, downs = zip(*rolled["down_series"], strict=True)
            ax.step(ts, downs, where="post", label="groups down")
            ax.axhline(rolled["max_unavailable_groups"], color="red", linestyle="--", label="maxUnavailable")
            _label(
                ax,
                "seconds from the apply of the change",
                "serving groups down",
                f"Rollout of {sizes[-1]['serving_groups']} groups",
                legend=8,
            )
            written.append(_save(plt, fig, out, "rollout.png"))
    auto = report.get("autoscale")
    if auto and auto.get("observed"):
        fig, ax = plt.subplots(figsize=(8, 3.6))
        t, p, d, ps, ds = zip(*auto["observed"], strict=True)
        ax.step(t, d, where="post", label="decode replicas written")
        ax.step(t, p, where="post", label="prefill replicas written")
        ax.plot(t, ds, ":", label="decode pods serving")
        ax.plot(t, ps, ":", label="prefill pods serving")
        _label(ax, "seconds from the apply", "replicas", "Autoscaling decode 1 -> 32 -> 1", legend=8)
        written.append(_save(plt, fig, out, "autoscale.png"))
    return written


def write(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "fleet.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    tmp.replace(out / "fleet.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"small sizes ({', '.join(map(str, QUICK_SIZES))} nodes)")
    parser.add_argument("--sizes", help="node counts, comma-separated (even; the last is the rollout's and short's)")
    parser.add_argument(
        "--max-unavailable", default="20%", help="the rollout's maxUnavailable (groups or a percentage)"
    )
    parser.add_argument("--skip", action="append", default=[], choices=("rollout", "autoscale", "short"))
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=JSON", help="more values for the fleet's release"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(QUICK_SIZES if args.quick else FULL_SIZES)
    if len(sizes) < 2 or any(s < 2 or s % 2 for s in sizes) or sizes != sorted(sizes):
        parser.error("--sizes: two or more even node counts, ascending")
    missing = [c.name for c in build.components().values() if not c.built()]
    if missing or not paths.helm_binary().exists():
        print(f"not built: {', '.join(missing) or 'helm'} (make cluster-tools helm)", file=sys.stderr)
        return 2
    limits = scale_judgement.read_bounds(DOC)
    teardown.install()
    out: Path = args.out
    OUT_EVENTS[0] = out
    folder = out / "cluster"
    if (folder / "state.json").exists():  # an earlier run's cluster, if it was killed
        Cluster.from_state(folder).down()
    shutil.rmtree(folder, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    extra = {MAX_UNAVAILABLE: _int_or_str(args.max_unavailable)}
    for setting in args.set:
        key, _, value = setting.partition("=")
        extra[key] = json.loads(value)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "quick": args.quick,
        "sizes_nodes": sizes,
        "preset": str(PRESET.relative_to(REPO)),
        "values": {**WHOLE_NODE, **extra},
        "bringup": [],
    }
    began = time.monotonic()
    cluster = Cluster(folder, nodes=a3_nodes(sizes[0]))
    failure = ""
    try:
        cluster.up()
        report["cluster_start"] = cluster.timings
        api = cluster.client()
        meter = Meter(cluster, api)
        for i, nodes in enumerate(sizes):
            last = i == len(sizes) - 1
            report["bringup"].append(bringup(cluster, api, meter, nodes, extra, last and "rollout" not in args.skip))
            write(report, out)
        done = [s for s in report["bringup"] if s.get("all_running_s")]
        if len(done) >= 2:
            xs, ys = [s["serving_groups"] for s in done], [s["all_running_s"] for s in done]
            report["fit"] = {**growth.fit(xs, ys).as_dict(), "local_exponent": round(growth.local_exponent(xs, ys), 3)}
        if "autoscale" not in args.skip:
            report["autoscale"] = autoscale(cluster, api, meter, sizes[-1])
            write(report, out)
        if "short" not in args.skip:
            # The second largest size, on the largest fleet's nodes (the rest cordoned): the
            # largest costs another full bring-up's minutes for the same count of partly placed groups.
            report["short"] = short_of_capacity(cluster, api, meter, sizes[-2], sizes[-1], extra)
    except (TimeoutError, ApiError, helm.HelmError, RuntimeError, OSError) as e:
        failure = f"{type(e).__name__}: {e}"
        print(f"scale: {failure}", file=sys.stderr)
    finally:
        cluster.down()
        report["wall_s"] = round(time.monotonic() - began, 1)
        report["failure"] = failure
        write(report, out)
        with contextlib.suppress(OSError):
            shutil.copytree(folder / "logs", out / "logs", dirs_exist_ok=True)
    report["figures"] = figures(report)
    problems = scale_judgement.broken(report["figures"], limits, args.quick)
    report["broken"] = problems
    try:
        report["plots"] = plots(report, out)
    except ImportError as e:
        print(f"no plots: {e} (matplotlib is in requirements-test.txt)", file=sys.stderr)
    write(report, out)
    for problem in problems:
        print(f"bound broken: {problem}")
    print(f"wrote {out / 'fleet.json'} in {report['wall_s']} s")
    # A wait that ran out is a bound broken too (the waits' bounds above).
    return 1 if problems or failure else 0


def _int_or_str(value: str) -> int | str:
    return int(value) if value.isdigit() else value


if __name__ == "__main__":
    raise SystemExit(main())
