"""A process kubelet (issue #28 item 1): the nodes it registers are real to the scheduler and to
Kthena's controller, and the pods bound to them run as local processes, with real engines.

What it does, as a kubelet would:
- registers its Nodes (not KWOK's: no kwok.x-k8s.io/node annotation) with a label and a taint
  (PROCESS_LABEL, NoSchedule) that only pods asking for them tolerate, and keeps their Leases
  renewed, so kube-controller-manager's node lifecycle controller keeps them Ready;
- for every pod bound to one of them, resolves each container's env from the pod object as the
  API server holds it (literal values with $(VAR) expansion, fieldRefs of metadata, spec and
  status, ConfigMap and Secret keys, envFrom): Kthena's injected env is in the pod spec already;
  lays out its volumes (the ConfigMaps as the API server holds them: the start scripts), and
  starts the containers (localpods.prepare and Processes);
- gives each pod a loopback address of its own (127.0.10.N on the first node, 127.0.11.N on the
  second, ...), written into the pod's status as its podIP and hostIP, so that pods bind the same
  ports side by side, as on separate nodes;
- plays the rendered probes: the startup probe, then readiness (Ready and ContainersReady follow
  it) and liveness (a failed liveness restarts the container), each at its own period, delay and
  failure threshold;
- restarts a container that exits (restartPolicy Always, with kubelet's back-off, 10 s doubling
  to 300 s) and counts it in restartCount, so a crash shows in the pod's status as it would;
- on a pod's deletion, plays the preStop hook (an exec `sleep N`; any other hook is refused),
  sends SIGTERM, waits the rest of the grace period, sends SIGKILL, then removes the pod.

What it does not: init containers, sidecars, exec or TCP probes, resource limits (the processes
share the machine), image pulls (each image is a local Python: localpods.IMAGE_PYTHONS).

Every loop is bounded by the stop event and short timeouts; close() stops every process by PID.


Over 400 lines: ProcessKubelet is one reconcile loop, as kubelet's syncPod is (admission,
containers started and restarted with back-off, probes, status written back); its pure parts above
it are unit-tested alone (tests/test_kubelet.py)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
import re
import signal
import threading
import time
import traceback
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.kube.api import ApiError, Client
from support.localpods import ENGINE_NICE, Network, Proc, Processes, prepare

PROCESS_LABEL = "mooncake-pd.test/kubelet"
PROCESS_VALUE = "process"
NODE_CAPACITY = {"cpu": "64", "memory": "256Gi", "pods": "16", "ephemeral-storage": "100Gi"}
# kubelet's own figures: a 40 s Lease renewed every 10 s (a quarter of it, as kubelet does), so a
# loaded machine may miss three renewals before kube-controller-manager's node lifecycle
# controller (--node-monitor-grace-period, 40 s or more) calls the node unready; its restart
# back-off, 10 s doubling to 300 s.
LEASE_SECONDS = 40
RENEW_EVERY = 10.0
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0
# One pass over the pods (start, probes, status): a probe's period is whole seconds.
LOOP_INTERVAL = 0.5
# close(): how long a loop or a pod's termination (grace period, 30 s by default) may take to end
# before the processes are stopped anyway (cleanup, not a judgement).
JOIN_TIMEOUT = 30.0
ADDRESSES_PER_NODE = 6


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_addresses(index: int) -> list[str]:
    """The pod addresses of node `index`: 127.0.(10 + index).1 .. N."""
    return [f"127.0.{10 + index}.{n}" for n in range(1, ADDRESSES_PER_NODE + 1)]


def scheduling_values() -> dict[str, Any]:
    """What a role's values need to land on a process node (nodeSelector and toleration)."""
    return {
        "nodeSelector": {PROCESS_LABEL: PROCESS_VALUE},
        "tolerations": [{"key": PROCESS_LABEL, "operator": "Equal", "value": PROCESS_VALUE, "effect": "NoSchedule"}],
    }


class PodError(RuntimeError):
    pass


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values, command and args: $$ escapes, an unknown name
    stays as written (k8s.io/kubernetes third_party/forked/golang/expansion)."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, text)


def field_value(pod: dict[str, Any], path: str) -> str:
    """A downward-API fieldRef of `pod` (the fields the API server allows for env)."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match[1]) or {}).get(match[2], ""))
    values = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p["ip"] for p in status.get("hostIPs") or []),
    }
    if path not in values:
        raise PodError(f"fieldRef {path}: not played by the process kubelet")
    return values[path]


def container_env(api: Client, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The environment the kubelet gives `container` of `pod` (envFrom first, then env in order,
    each value expanded against the ones before it)."""
    namespace = pod["metadata"].get("namespace", "default")
    env: dict[str, str] = {}

    def source(kind: str, name: str) -> dict[str, str]:
        obj = api.get("v1", kind, name, namespace)
        if kind == "Secret":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})

    for ref in container.get("envFrom", []):
        kind, key = ("ConfigMap", "configMapRef") if "configMapRef" in ref else ("Secret", "secretRef")
        for name, value in source(kind, ref[key]["name"]).items():
            env[ref.get("prefix", "") + name] = value
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = expand(var["value"], env)
            continue
        origin = var.get("valueFrom") or {}
        if "fieldRef" in origin:
            env[var["name"]] = field_value(pod, origin["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in origin or "secretKeyRef" in origin:
            kind, key = ("ConfigMap", "configMapKeyRef") if "configMapKeyRef" in origin else ("Secret", "secretKeyRef")
            ref = origin[key]
            data = source(kind, ref["name"])
            if ref["key"] in data:
                env[var["name"]] = data[ref["key"]]
            elif not ref.get("optional"):
                raise PodError(f"env {var['name']}: {kind} {ref['name']} has no key {ref['key']}")
        elif "resourceFieldRef" in origin:
            raise PodError(f"env {var['name']}: resourceFieldRef is not played by the process kubelet")
        else:
            env[var["name"]] = ""
    return env


@dataclass
class Probe:
    """One of a container's probes (httpGet only) and its state, as kubelet's prober keeps it."""

    url: str
    initial_delay: float
    period: float
    timeout: float
    failure_threshold: int
    next_at: float = 0.0
    failures: int = 0
    ok: bool = False

    @classmethod
    def of(cls, probe: dict[str, Any] | None, container: dict[str, Any], address: str) -> Probe | None:
        if not probe:
            return None
        http = probe.get("httpGet")
        if not http:
            raise PodError(f"container {container['name']}: only httpGet probes are played")
        port = http["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container.get("ports", []) if p.get("name") == port)
        return cls(
            f"http://{http.get('host') or address}:{port}{http.get('path', '/')}",
            float(probe.get("initialDelaySeconds", 0)),
            float(probe.get("periodSeconds", 10)),
            float(probe.get("timeoutSeconds", 1)),
            int(probe.get("failureThreshold", 3)),
        )

    def start(self, started: float) -> None:
        self.next_at, self.failures, self.ok = started + self.initial_delay, 0, False

    def due(self, at: float) -> bool:
        return at >= self.next_at

    def check(self, at: float) -> bool:
        """Probe once; True when the result changed what the probe says (ok or failed out). The
        rendered timeoutSeconds, as kubelet uses it: on 2 shared cores an engine may miss it where
        a node of its own would not, which failureThreshold absorbs as on a cluster."""
        self.next_at = at + self.period
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as answer:
                success = 200 <= answer.status < 400
        except (urllib.error.URLError, OSError, ValueError):
            success = False
        if success:
            self.failures = 0
            changed, self.ok = not self.ok, True
            return changed
        self.failures += 1
        if self.failures >= self.failure_threshold and self.ok:
            self.ok = False
            return True
        return False


@dataclass
class RunningContainer:
    spec: dict[str, Any]
    proc: Proc | None = None
    started_at: str = ""
    restarts: int = 0
    restart_at: float = 0.0
    backoff: float = BACKOFF_START
    last_exit: dict[str, Any] | None = None
    startup: Probe | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None
    started: bool = False  # the startup probe passed (or there is none)


@dataclass
class PodRun:
    uid: str
    name: str
    namespace: str
    node: str
    address: str
    containers: list[RunningContainer] = field(default_factory=list)
    terminating: bool = False
    status_sent: Any = None
    error: str = ""


class ProcessKubelet:
    """Runs the pods bound to its nodes (`node_names`) as processes of `processes`."""

    def __init__(
        self,
        api: Client,
        processes: Processes,
        workdir: Path,
        node_names: tuple[str, ...] = ("process-0", "process-1"),
        host_paths: dict[str, Path] | None = None,
        network: Network | None = None,
    ) -> None:
        self.api = api
        self.processes = processes
        self.workdir = workdir
        self.nodes = {name: node_addresses(i) for i, name in enumerate(node_names)}
        self.host_paths = host_paths or {}
        self.network = network or Network()
        self.pods: dict[str, PodRun] = {}
        self.events: list[tuple[float, str]] = []
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()
        workdir.mkdir(parents=True, exist_ok=True)

    # -- the nodes -------------------------------------------------------------------------
    def addresses(self) -> list[str]:
        return [a for pool in self.nodes.values() for a in pool]

    def node_objects(self) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/arch": "amd64",
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/hostname": name,
                        PROCESS_LABEL: PROCESS_VALUE,
                    },
                },
                "spec": {"taints": [{"key": PROCESS_LABEL, "value": PROCESS_VALUE, "effect": "NoSchedule"}]},
            }
            for name in self.nodes
        ]

    def _node_status(self, name: str) -> dict[str, Any]:
        stamp = now()
        conditions = [
            {"type": t, "status": "False", "reason": f"KubeletHasNo{t.removesuffix('Pressure')}Pressure"}
            for t in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ]
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady"})
        for c in conditions:
            c.update(lastHeartbeatTime=stamp, lastTransitionTime=stamp, message="process kubelet")
        return {
            "status": {
                "capacity": NODE_CAPACITY,
                "allocatable": NODE_CAPACITY,
                "conditions": conditions,
                "addresses": [
                    {"type": "InternalIP", "address": self.nodes[name][0]},
                    {"type": "Hostname", "address": name},
                ],
                "nodeInfo": {"kubeletVersion": "v1.34.2-process", "architecture": "amd64", "operatingSystem": "linux"},
            }
        }

    def register(self) -> None:
        for node in self.node_objects():
            self.api.apply(node, "mooncake-pd-process-kubelet")
            self.api.patch_status(node, self._node_status(node["metadata"]["name"]))
        self._renew_leases()

    def _renew_leases(self) -> None:
        for name in self.nodes:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_now()},
            }
            self.api.apply(lease, "mooncake-pd-process-kubelet", namespace="kube-node-lease")

    def process(self, pod: str) -> Proc:
        """The running process of `pod`'s first container (a drill's fault goes there)."""
        with self.lock:
            for run in self.pods.values():
                if run.name == pod and run.containers and run.containers[0].proc is not None:
                    return run.containers[0].proc
        raise PodError(f"{pod}: no running container on the process kubelet")

    # -- the loops -------------------------------------------------------------------------
    def start(self) -> None:
        self.register()
        for target in (self._lease_loop, self._pod_loop):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)

    def close(self) -> None:
        """Stop the loops, then every container (SIGTERM, SIGKILL after the Processes' grace)."""
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=JOIN_TIMEOUT)
        with self.lock:
            for run in self.pods.values():
                for c in run.containers:
                    if c.proc:
                        self.processes.stop(c.proc)

    def event(self, text: str) -> None:
        at = round(time.monotonic() - self.started, 1)
        self.events.append((at, text))
        with (self.workdir / "events.log").open("a") as log:
            log.write(f"{at:8.1f} {text}\n")

    def error(self, text: str) -> None:
        if not self.errors or self.errors[-1] != text:
            self.event(f"ERROR {text}")
        self.errors.append(text)

    def _lease_loop(self) -> None:
        while not self.stop_event.wait(RENEW_EVERY):
            try:
                self._renew_leases()
                for name in self.nodes:
                    self.api.patch_status({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
                                          self._node_status(name))  # fmt: skip
            except Exception:  # recorded, and the loop goes on: a kubelet outlives one bad call
                self.error(f"lease: {traceback.format_exc(limit=3)}")

    def _pod_loop(self) -> None:
        while not self.stop_event.wait(LOOP_INTERVAL):
            try:
                self.sync()
            except Exception:
                self.error(f"sync: {traceback.format_exc(limit=5)}")

    def sync(self) -> None:
        """One pass: start new pods, play probes and restarts, report status, handle deletions."""
        pods = [p for p in self.api.list("v1", "Pod", None) if (p.get("spec") or {}).get("nodeName") in self.nodes]
        seen = set()
        for pod in pods:
            pod.update(apiVersion="v1", kind="Pod")  # a list's items name neither
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            with self.lock:
                run = self.pods.get(uid)
            if run is None:
                if pod["metadata"].get("deletionTimestamp"):
                    self._remove(pod)
                    continue
                run = self._admit(pod)
            if run.terminating:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                run.terminating = True
                thread = threading.Thread(target=self._terminate, args=(run, pod), daemon=True)
                thread.start()
                self.threads.append(thread)
                continue
            if not run.error:
                self._tend(run, pod)
            self._report(run, pod)
        with self.lock:
            gone = [uid for uid in self.pods if uid not in seen]
            for uid in gone:
                run = self.pods.pop(uid)
                for c in run.containers:
                    if c.proc:
                        self.processes.stop(c.proc)

    def _free_address(self, node: str) -> str:
        used = {r.address for r in self.pods.values()}
        for address in self.nodes[node]:
            if address not in used:
                return address
        raise PodError(f"node {node}: all {len(self.nodes[node])} pod addresses are taken")

    def _admit(self, pod: dict[str, Any]) -> PodRun:
        meta = pod["metadata"]
        node = pod["spec"]["nodeName"]
        with self.lock:
            address = self._free_address(node)
            run = PodRun(meta["uid"], meta["name"], meta.get("namespace", "default"), node, address)
            self.pods[run.uid] = run
        self.event(f"{run.name}: admitted on {node} at {address}")
        try:
            if pod["spec"].get("initContainers"):
                raise PodError("init containers are not played by the process kubelet")
            for spec in pod["spec"]["containers"]:
                c = RunningContainer(spec)
                c.startup = Probe.of(spec.get("startupProbe"), spec, address)
                c.readiness = Probe.of(spec.get("readinessProbe"), spec, address)
                c.liveness = Probe.of(spec.get("livenessProbe"), spec, address)
                run.containers.append(c)
            # The addresses go into the status first: fieldRefs of status.podIP read them.
            pod.setdefault("status", {}).update(podIP=address, hostIP=address)
            self._report(run, pod)
            for c in run.containers:
                self._start_container(run, pod, c)
        except Exception as e:  # the pod fails, with the reason in its status; the kubelet goes on
            run.error = f"{type(e).__name__}: {e}"
            self.error(f"{run.name}: cannot run: {traceback.format_exc(limit=5)}")
        return run

    def _start_container(self, run: PodRun, pod: dict[str, Any], c: RunningContainer) -> None:
        spec = c.spec
        env = container_env(self.api, pod, spec)
        resolved = dict(spec)
        for key in ("command", "args"):
            if key in spec:
                resolved[key] = [expand(word, env) for word in spec[key]]
        # Resolved here as literal values: prepare() then maps mount paths and Service names in
        # them as it does in the command, and adds the image's PATH.
        resolved["env"] = [{"name": k, "value": v} for k, v in env.items()]
        resolved.pop("envFrom", None)
        configmaps = [
            {"kind": "ConfigMap", "metadata": {"name": v["configMap"]["name"]},
             "data": self.api.get("v1", "ConfigMap", v["configMap"]["name"], run.namespace).get("data") or {}}
            for v in pod["spec"].get("volumes", []) if "configMap" in v
        ]  # fmt: skip
        folder = self.workdir / run.name / f"{spec['name']}-{c.restarts}"
        prepared = prepare(
            configmaps, pod["spec"], resolved, folder, self.network,
            env_base={"PYTHONUNBUFFERED": "1"}, host_paths=self.host_paths, address=run.address,
        )  # fmt: skip
        c.proc = self.processes.run(prepared, f"{run.name}.{spec['name']}.{c.restarts}", ENGINE_NICE)
        c.started_at = now()
        begun = time.monotonic()
        c.started = c.startup is None
        for probe in (c.startup, c.readiness, c.liveness):
            if probe:
                probe.start(begun)
        self.event(f"{run.name}/{spec['name']}: started (pid {c.proc.popen.pid}, restart {c.restarts})")

    def _tend(self, run: PodRun, pod: dict[str, Any]) -> None:
        at = time.monotonic()
        for c in run.containers:
            if c.proc is None:
                if at >= c.restart_at:
                    c.restarts += 1
                    self._start_container(run, pod, c)
                continue
            code = c.proc.popen.poll()
            if code is None and c.startup and not c.started and c.startup.due(at):
                c.startup.check(at)
                if c.startup.ok:
                    # Readiness and liveness run from the start, held until startup passes
                    # (their initialDelaySeconds count from the container's start).
                    c.started = True
                    for probe in (c.readiness, c.liveness):
                        if probe:
                            probe.next_at = max(probe.next_at, at)
                elif c.startup.failures >= c.startup.failure_threshold:
                    self._kill(run, c, "startup probe failed")
                    code = c.proc.popen.poll() if c.proc else -9
            if code is None and c.started:
                if c.liveness and c.liveness.due(at):
                    c.liveness.check(at)
                    if c.liveness.failures >= c.liveness.failure_threshold:
                        self._kill(run, c, "liveness probe failed")
                        code = -9
                if code is None and c.readiness and c.readiness.due(at) and c.readiness.check(at):
                    self.event(f"{run.name}/{c.spec['name']}: readiness {'ok' if c.readiness.ok else 'failed'}")
            if code is not None and c.proc is not None:
                c.last_exit = {"exitCode": code if code >= 0 else 128 - code, "startedAt": c.started_at,
                               "finishedAt": now(), "reason": "Error" if code else "Completed"}  # fmt: skip
                self.event(f"{run.name}/{c.spec['name']}: exited {code}; restart in {c.backoff:.0f} s")
                self.processes.stop(c.proc)
                c.proc = None
                c.restart_at = at + c.backoff
                c.backoff = min(c.backoff * 2, BACKOFF_MAX)
                for probe in (c.startup, c.readiness, c.liveness):
                    if probe:
                        probe.ok = False

    def _kill(self, run: PodRun, c: RunningContainer, why: str) -> None:
        """What kubelet does on a failed liveness or startup probe: stop the container (its
        grace period applies; here SIGTERM, then SIGKILL after the Processes' grace)."""
        self.event(f"{run.name}/{c.spec['name']}: {why}; killing")
        if c.proc:
            self.processes.stop(c.proc)

    def _ready(self, c: RunningContainer) -> bool:
        return c.proc is not None and c.started and (c.readiness.ok if c.readiness else True)

    def _report(self, run: PodRun, pod: dict[str, Any]) -> None:
        ready = bool(run.containers) and all(self._ready(c) for c in run.containers) and not run.error
        statuses = []
        for c in run.containers:
            state: dict[str, Any]
            if c.proc is not None:
                state = {"running": {"startedAt": c.started_at}}
            elif c.last_exit:
                state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {c.backoff:.0f}s"}}
            else:
                state = {"waiting": {"reason": "ContainerCreating"}}
            entry = {
                "name": c.spec["name"],
                "image": c.spec["image"],
                "imageID": "",
                "ready": self._ready(c),
                "started": c.proc is not None and c.started,
                "restartCount": c.restarts,
                "state": state,
            }
            if c.last_exit:
                entry["lastState"] = {"terminated": c.last_exit}
            statuses.append(entry)
        flag = "True" if ready else "False"
        status: dict[str, Any] = {
            "phase": "Failed" if run.error else "Running",
            "podIP": run.address,
            "podIPs": [{"ip": run.address}],
            "hostIP": run.address,
            "hostIPs": [{"ip": run.address}],
            "containerStatuses": statuses,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": flag},
                {"type": "Ready", "status": flag},
            ],
        }
        if run.error:
            status.update(reason="ProcessKubeletError", message=run.error)
        if status == run.status_sent:
            return
        stamp = now()
        sent = {
            **status,
            "startTime": pod.get("status", {}).get("startTime") or stamp,
            "conditions": [{**c, "lastTransitionTime": stamp} for c in status["conditions"]],
        }
        try:
            self.api.patch_status(pod, {"status": sent}, run.namespace)
            run.status_sent = status
        except ApiError as e:
            if e.status != 404:  # a pod deleted meanwhile needs no status
                self.error(f"{run.name}: status: {e}")

    def _terminate(self, run: PodRun, pod: dict[str, Any]) -> None:
        """A pod being deleted: preStop, SIGTERM, the rest of the grace period, SIGKILL, removal."""
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or pod["spec"].get(
            "terminationGracePeriodSeconds", 30))  # fmt: skip
        begun = time.monotonic()
        self.event(f"{run.name}: deleting (grace {grace:.0f} s)")
        for c in run.containers:
            hook = ((c.spec.get("lifecycle") or {}).get("preStop") or {}).get("exec", {}).get("command")
            if c.proc is None or not hook:
                continue
            if len(hook) == 2 and hook[0] == "sleep":
                self.event(f"{run.name}/{c.spec['name']}: preStop sleep {hook[1]}")
                self.stop_event.wait(min(float(hook[1]), grace))
            else:
                self.error(f"{run.name}: preStop {hook} is not played (only `sleep N`)")
        for c in run.containers:
            if c.proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(c.proc.popen.pid, signal.SIGTERM)
            left = max(0.0, grace - (time.monotonic() - begun))
            with contextlib.suppress(Exception):
                c.proc.popen.wait(timeout=left)
            self.event(f"{run.name}/{c.spec['name']}: stopped (exit {c.proc.popen.poll()})")
            self.processes.stop(c.proc)
            c.proc = None
        self._remove(pod)

    def _remove(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with contextlib.suppress(ApiError):
            self.api.request(
                "DELETE",
                self.api.path(pod, pod["metadata"].get("namespace", "default")),
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
            )
        self.event(f"{pod['metadata']['name']}: removed")
