"""The local test cluster (issue #25): etcd and kube-apiserver on 127.0.0.1 with generated
certificates, kube-controller-manager, kube-scheduler under the profile name `volcano` (Volcano's
scheduler is not served by the Go module proxy: cluster/components.yaml), KWOK with nodes shaped
like the accelerators' (cluster/nodes.yaml), Kthena v1.0.0's controller-manager (ModelServing
controller, webhooks, autoscaler) with its webhooks registered on a generated CA, and the CRDs of
Kthena v1.0.0, Volcano (generated from volcano.sh/apis) and the Prometheus Operator.

What does not run: kubelet, a container runtime, CNI, kube-proxy, devices. KWOK plays each node's
kubelet: pods bound to its nodes get an IP and turn Running and Ready without running anything.
Where the e2e needs the pods to run, its process kubelet (kubelet.py) registers nodes of its own
and runs their pods as processes; Kthena's router starts on demand (start_router).

Everything binds loopback and lives in one folder (`Cluster.folder`); every wait is bounded;
`down()` stops every process by PID (its process group), also after a failure. `make cluster-up`
leaves the processes running and records them in <folder>/state.json; `make cluster-down` stops
them from there.


Over 400 lines: one class, Cluster, holds the local control plane's lifecycle (certificates, etcd,
kube-apiserver, Kthena's controller and webhooks, KWOK, the router and its relays): each process
started, waited for and stopped by PID in one place."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mooncake_pd import manifests, paths
from support.kube import build, certs
from support.kube.api import Client, conditions, wait_for

ADMIN_TOKEN = "mooncake-pd-admin-token"
SERVICE_CIDR = "10.96.0.0/16"
# Each start-up step's wait: etcd listening, kube-apiserver's /readyz, the CRDs Established, the
# default ServiceAccount, KWOK's nodes Ready, Kthena's webhook, the router listening. No step's
# seconds are published yet (each lands in out/waits.jsonl from now on); the cluster stage of
# `make test`, its start and 61 tests, takes 5.7-6.3 min on the 2-core machine (README), and the
# e2e's Kthena run, the cluster's start included, 204 s. A step that is not done in 120 s is broken
# (a binary that does not start, a port taken): its log's last lines say why.
START_TIMEOUT = 120.0
# SIGTERM to SIGKILL when stopping a component (cleanup, not a judgement).
STOP_GRACE = 10.0


class ClusterError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    folder: Path
    # The Kthena whose CRDs are installed (a row of the kthena table; its controller is v1.0.0).
    kthena: str = paths.DEFAULT_KTHENA
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # The Node objects KWOK plays at start-up; None: those of cluster/nodes.yaml (node_objects()).
    # harness/scale.py gives a fleet of A3 nodes here.
    nodes: list[dict[str, Any]] | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def ca(self) -> Path:
        return self.folder / "pki" / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def pod_metrics_file(self) -> Path:
        """What the engines' /metrics say to Kthena's autoscaler (podmetrics.py), by pod address."""
        return self.folder / "kthena" / "pod-metrics.json"

    def set_pod_metrics(self, table: dict[str, dict[str, float]]) -> None:
        tmp = self.pod_metrics_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(self.pod_metrics_file)

    def client(self) -> Client:
        return Client(self.server, ADMIN_TOKEN, self.ca)

    def log(self, name: str) -> Path:
        return self.folder / "logs" / f"{name}.log"

    def tail(self, name: str, lines: int = 30) -> str:
        path = self.log(name)
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    def log_end(self, name: str, lines: int = 10) -> str:
        """`name`'s last log lines, headed, for a wait's message."""
        return f"{name}'s log ends:\n{self.tail(name, lines)}"

    # -- processes -------------------------------------------------------------------------
    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        self.log(name).parent.mkdir(parents=True, exist_ok=True)
        with self.log(name).open("ab") as out:
            popen = subprocess.Popen(
                argv,
                cwd=self.folder,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.folder), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pids[name] = popen.pid
        self.save()
        return popen.pid

    def running(self, name: str) -> bool:
        pid = self.pids.get(name)
        if not pid:
            return False
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def alive(self, name: str) -> None:
        if not self.running(name):
            raise ClusterError(f"{name} exited during start-up:\n{self.tail(name)}")

    def stop(self, name: str) -> None:
        pid = self.pids.pop(name, None)
        if not pid:
            return
        for sig, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                continue
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        self.save()

    def down(self) -> None:
        """Stop every process, the last started first."""
        for name in reversed(list(self.pids)):
            self.stop(name)

    def save(self) -> None:
        state = {"kthena": self.kthena, "ports": self.ports, "pids": self.pids, "timings": self.timings}
        (self.folder / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def from_state(cls, folder: Path) -> Cluster:
        state = json.loads((folder / "state.json").read_text())
        return cls(folder, state["kthena"], state["ports"], state["pids"], state.get("timings", {}))

    # -- start-up --------------------------------------------------------------------------
    def _timed(self, step: str, started: float) -> None:
        self.timings[step] = round(time.monotonic() - started, 1)

    def up(self) -> None:
        """Bring the cluster up; on any failure stop what was started and raise."""
        try:
            self._up()
        except BaseException:
            self.down()
            raise

    def _up(self) -> None:
        comps = build.components()
        missing = [c.name for c in comps.values() if not c.built()]
        if missing:
            raise ClusterError(f"not built: {', '.join(missing)} (make cluster-tools builds them)")
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in ("etcd", "apiserver", "etcd-peer", "kthena-webhook"):
            self.ports.setdefault(name, free_port())
        t = time.monotonic()
        pki = self.folder / "pki"
        authority = certs.ca(pki)
        serving = certs.serving(pki, authority, "apiserver", ("127.0.0.1", "localhost", "kubernetes.default.svc"))
        sa = certs.signing_key(pki)
        self._timed("certificates", t)
        self._write_kubeconfig()

        t = time.monotonic()
        self._start_etcd(comps["etcd"])
        self._start_apiserver(comps["kubernetes"], serving, sa)
        self._timed("etcd and kube-apiserver ready", t)

        t = time.monotonic()
        self._install_crds()
        self._timed("CRDs established", t)

        t = time.monotonic()
        self._start_controller_manager(comps["kubernetes"], sa)
        self._start_scheduler(comps["kubernetes"])
        self._timed("controller-manager and scheduler started", t)

        t = time.monotonic()
        self._start_kwok(comps["kwok"])
        self._timed("KWOK nodes ready", t)

        t = time.monotonic()
        self._start_kthena(comps["kthena"], authority)
        self._timed("Kthena controller and webhooks ready", t)
        # Every component still runs after the whole start-up (tens of seconds), however fast the
        # machine: kube-scheduler has no probe of its own here.
        for name in list(self.pids):
            self.alive(name)

    def _install_crds(self) -> None:
        folders = [paths.crds_dir(self.kthena), paths.PROMETHEUS_CRDS, build.volcano_crds_folder()]
        api = self.client()
        names = []
        for folder in folders:
            for path in sorted(folder.glob("*.yaml")):
                crd = manifests.load(path.read_text())
                if crd and crd.get("kind") == "CustomResourceDefinition":
                    api.apply(crd)
                    names.append(crd["metadata"]["name"])

        pending = list(names)

        def established() -> bool:
            pending[:] = [
                name
                for name in names
                if conditions(api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)).get("Established")
                != "True"
            ]
            return not pending

        def seen() -> str:
            return f"not Established: {pending}"

        wait_for(
            f"{len(names)} CRDs established",
            established,
            START_TIMEOUT,
            seen=seen,
            detail=lambda: self.log_end("kube-apiserver"),
        )

    def _start_kwok(self, kwok: build.Component) -> None:
        """KWOK plays the kubelet of the nodes of cluster/nodes.yaml: it keeps their status and
        Lease fresh (so kube-controller-manager's node lifecycle controller keeps them Ready) and
        turns pods bound to them Running and Ready, with the stages of cluster/kwok-stages.yaml."""
        api = self.client()
        for node in node_objects() if self.nodes is None else self.nodes:
            api.apply(node)
        self.start("kwok", [
            str(kwok.binary("kwok")), "--kubeconfig", str(self.kubeconfig),
            "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            # With leases kwok renews node status every 20-45 s (without, every 10-20 min, and
            # the node lifecycle controller would evict the pods): kwok v0.7.0 root.go ~171.
            "--node-lease-duration-seconds", "40",
            "--cidr", POD_CIDR,
            "--config", str(build.CLUSTER / "kwok-stages.yaml"),
        ], {"KWOK_WORKDIR": str(self.folder / "kwok")})  # fmt: skip

        waiting: list[str] = []

        def ready() -> bool:
            self.alive("kwok")
            waiting.clear()
            for node in api.list("v1", "Node", None):
                taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or []]
                state = conditions(node).get("Ready", "no condition")
                if state != "True" or "node.kubernetes.io/not-ready" in taints:
                    waiting.append(f"{node['metadata']['name']} (Ready {state}, taints {taints})")
            return not waiting

        wait_for(
            "every KWOK node Ready and untainted",
            ready,
            START_TIMEOUT,
            seen=lambda: "; ".join(waiting) or "no nodes listed",
            detail=lambda: self.log_end("kwok"),
        )

    def _start_kthena(self, kthena: build.Component, authority: certs.Pair) -> None:
        """Kthena v1.0.0's controller-manager (ModelServing controller and autoscaler; the
        ModelBooster controller is left out: the chart renders no ModelBooster) with its
        webhooks, in a network namespace of its own (it listens on every interface)."""
        home = self.folder / "kthena"
        account = home / "serviceaccount"
        account.mkdir(parents=True, exist_ok=True)
        (account / "token").write_text(ADMIN_TOKEN)
        (account / "ca.crt").write_bytes(self.ca.read_bytes())
        (account / "namespace").write_text(KTHENA_NAMESPACE)
        serving = certs.serving(self.folder / "pki", authority, "kthena-webhook", ("127.0.0.1",))
        api_sock, hook_sock = home / "apiserver.sock", home / "webhook.sock"
        api_port, hook_port = self.ports["apiserver"], self.ports["kthena-webhook"]
        self.start("kthena-relay", [
            sys.executable, str(RELAY),
            f"unix:{api_sock}=tcp:127.0.0.1:{api_port}", f"tcp:127.0.0.1:{hook_port}=unix:{hook_sock}",
        ])  # fmt: skip
        argv = [
            str(kthena.binary("kthena-controller-manager")),
            "--kubeconfig", str(self.kubeconfig),
            "--controllers", "modelserving,autoscaler",
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--port", str(KTHENA_WEBHOOK_PORT),
        ]  # fmt: skip
        inside = [f"tcp:127.0.0.1:{api_port}=unix:{api_sock}", f"unix:{hook_sock}=tcp:127.0.0.1:{KTHENA_WEBHOOK_PORT}"]
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api_port),
            "POD_NAMESPACE": KTHENA_NAMESPACE,
        }
        self.pod_metrics_file.write_text("{}")
        podmetrics = [sys.executable, str(PODMETRICS), str(self.pod_metrics_file), *map(str, METRICS_PORTS)]
        wrapped = isolated(argv, inside, account, home / "run.sh", (podmetrics,))
        self.start("kthena-controller-manager", wrapped, env)
        api = self.client()
        api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KTHENA_NAMESPACE}})

        def healthy() -> bool:
            self.alive("kthena-controller-manager")
            context = ssl.create_default_context(cafile=str(self.ca))
            with urllib.request.urlopen(f"https://127.0.0.1:{hook_port}/healthz", timeout=5, context=context) as r:
                return r.status == 200

        wait_for(
            "Kthena's webhook /healthz",
            healthy,
            START_TIMEOUT,
            detail=lambda: self.log_end("kthena-controller-manager"),
        )
        for obj in _webhooks(self.ca.read_bytes(), hook_port):
            api.apply(obj)

    def start_router(self, upstreams: list[tuple[str, int]], cpus: str | None = None) -> str:
        """Kthena v1.0.0's router, as its chart runs it (charts/kthena/charts/networking/templates/
        kthena-router/component/deployment.yaml: --port, --debug-port, its scheduler configuration
        at /etc/config/routerConfiguration.yaml), without its webhook, in a network namespace of
        its own. It reaches the API server and every `upstreams` (address, port) of the engine
        pods at their own loopback addresses through relays; its port 8080 is reached from the
        host at the URL returned. It discovers the pods itself, from the ModelServers it watches.
        `cpus`: a taskset CPU list the router alone runs on (Go sizes GOMAXPROCS from it), as
        harness/datapath_capacity.py pins it to one core; that script runs its load and stand-in
        engines inside the router's namespace (its pid: pids["kthena-router"]) with no upstreams,
        where the pod addresses are local routes and the router reaches them with no relay."""
        kthena = build.components()["kthena"]
        home = (self.folder / "kthena-router").resolve()
        account = home / "serviceaccount"
        account.mkdir(parents=True, exist_ok=True)
        (account / "token").write_text(ADMIN_TOKEN)
        (account / "ca.crt").write_bytes(self.ca.read_bytes())
        (account / "namespace").write_text(KTHENA_NAMESPACE)
        self.ports["kthena-router"] = port = free_port()
        api_port = self.ports["apiserver"]
        outside = [f"unix:{home / 'apiserver.sock'}=tcp:127.0.0.1:{api_port}"]
        outside.append(f"tcp:127.0.0.1:{port}=unix:{home / 'router.sock'}")
        inside = [f"tcp:127.0.0.1:{api_port}=unix:{home / 'apiserver.sock'}"]
        inside.append(f"unix:{home / 'router.sock'}=tcp:127.0.0.1:{ROUTER_PORT}")
        for address, upstream in upstreams:
            sock = home / f"pod-{address}-{upstream}.sock"
            outside.append(f"unix:{sock}=tcp:{address}:{upstream}")
            inside.append(f"tcp:{address}:{upstream}=unix:{sock}")
        self.start("kthena-router-relay", [sys.executable, str(RELAY), *outside])
        upper, work = home / "etc-upper", home / "etc-work"
        upper.mkdir(exist_ok=True)
        work.mkdir(exist_ok=True)
        # The router reads its configuration from a fixed path under /etc: an overlay of the
        # host's /etc in its mount namespace holds it, the host's /etc stays as it is.
        setup = [
            f"mount -t overlay overlay -o {shlex.quote(f'lowerdir=/etc,upperdir={upper},workdir={work}')} /etc",
            "mkdir -p /etc/config",
            f"cp {shlex.quote(str(ROUTER_CONFIG))} /etc/config/routerConfiguration.yaml",
        ]
        argv = [
            *(["taskset", "-c", cpus] if cpus else []),
            str(kthena.binary("kthena-router")),
            "--port", str(ROUTER_PORT), "--debug-port", str(ROUTER_DEBUG_PORT), "--enable-webhook=false",
        ]  # fmt: skip
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api_port),
            "POD_NAMESPACE": KTHENA_NAMESPACE,
        }
        self.start("kthena-router", isolated(argv, inside, account, home / "run.sh", setup=setup), env)
        base = f"http://127.0.0.1:{port}"

        def listening() -> bool:
            self.alive("kthena-router")
            with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                conn.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                return conn.recv(12).startswith(b"HTTP/1.")

        wait_for(
            "Kthena's router listening",
            listening,
            START_TIMEOUT,
            detail=lambda: self.log_end("kthena-router"),
        )
        return base

    def stop_router(self) -> None:
        """Stop the router started by start_router, and its relay."""
        for name in ("kthena-router", "kthena-router-relay"):
            self.stop(name)

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.server, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin", "namespace": "default"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self, etcd: build.Component) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        # --unsafe-no-fsync: the data is thrown away with the folder; fsync on every write
        # would make each test's objects wait on the disk.
        self.start("etcd", [
            str(etcd.binary("etcd")), "--name", "local", "--data-dir", str(self.folder / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"local={peer}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])  # fmt: skip

        def healthy() -> bool:
            self.alive("etcd")
            with socket.create_connection(("127.0.0.1", self.ports["etcd"]), timeout=1):
                return True

        wait_for("etcd listening", healthy, START_TIMEOUT, detail=lambda: self.log_end("etcd"))

    def _start_apiserver(self, kube: build.Component, serving: certs.Pair, sa: certs.Pair) -> None:
        tokens = self.folder / "pki" / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')
        self.start("kube-apiserver", [
            str(kube.binary("kube-apiserver")),
            "--etcd-servers", f"http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.ports["apiserver"]),
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--client-ca-file", str(self.ca),
            "--token-auth-file", str(tokens),
            "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(sa.cert), "--service-account-signing-key-file", str(sa.key),
            "--service-cluster-ip-range", SERVICE_CIDR,
            # The `kubernetes` Service cannot point at a loopback address; nothing in-cluster uses it.
            "--endpoint-reconciler-type", "none",
            # As on a real cluster: a user may run an engine privileged (engine.securityContext); the
            # chart's own pods are not.
            "--allow-privileged=true",
            "--cert-dir", str(self.folder / "pki" / "apiserver-generated"),
        ])  # fmt: skip
        api = self.client()

        def ready() -> bool:
            self.alive("kube-apiserver")
            api.request("GET", "/readyz", timeout=5)
            return True

        wait_for(
            "kube-apiserver /readyz",
            ready,
            START_TIMEOUT,
            detail=lambda: self.log_end("kube-apiserver"),
        )

    def _start_controller_manager(self, kube: build.Component, sa: certs.Pair) -> None:
        self.start("kube-controller-manager", [
            str(kube.binary("kube-controller-manager")),
            "--kubeconfig", str(self.kubeconfig), "--leader-elect=false", "--secure-port=0",
            "--service-account-private-key-file", str(sa.key), "--root-ca-file", str(self.ca),
            "--use-service-account-credentials=false",
        ])  # fmt: skip
        api = self.client()

        def default_service_account() -> bool:
            self.alive("kube-controller-manager")
            return bool(api.get("v1", "ServiceAccount", "default"))

        wait_for(
            "the default ServiceAccount (kube-controller-manager)",
            default_service_account,
            START_TIMEOUT,
            detail=lambda: self.log_end("kube-controller-manager"),
        )

    def _start_scheduler(self, kube: build.Component) -> None:
        config = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "leaderElection": {"leaderElect": False},
            # `volcano` is the name the chart's pods (and Kthena's CRD default) ask for.
            "profiles": [{"schedulerName": "default-scheduler"}, {"schedulerName": "volcano"}],
        }
        path = self.folder / "kube-scheduler.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.start("kube-scheduler", [str(kube.binary("kube-scheduler")), "--config", str(path), "--secure-port=0"])
        # It serves no probe here (--secure-port=0): _up checks that it still runs once every
        # later step is done, and a pod it does not schedule shows in wait_pods' message.


RELAY = Path(__file__).with_name("relay.py")
# Where client-go's in-cluster config looks (k8s.io/client-go rest/config.go InClusterConfig):
# Kthena v1.0.0's webhook server builds its client only that way (cmd/kthena-controller-manager/
# main.go ~129), so its namespace mounts a tmpfs on /run and puts a token and CA there.
SERVICE_ACCOUNT_DIR = "/run/secrets/kubernetes.io/serviceaccount"
KTHENA_NAMESPACE = "kthena-system"
KTHENA_WEBHOOK_PORT = 8443
PODMETRICS = Path(__file__).with_name("podmetrics.py")
# KWOK's pod addresses (--cidr) and the nodes' InternalIPs (host-network pods): never bound on
# the host, local routes inside Kthena's namespace.
POD_CIDR = "10.0.0.1/16"
LOCAL_NETS = ("10.0.0.0/16", "10.1.0.0/16")
# The engine ports the autoscaling presets' metric sources scrape (values/*autoscaling*).
METRICS_PORTS = (7100,)
# The router's ports inside its namespace (its chart's defaults), and its scheduler configuration:
# the one Kthena v1.0.0's chart installs (charts/kthena/charts/networking/templates/kthena-router/
# component/configmap.yaml), copied with that provenance.
ROUTER_PORT = 8080
ROUTER_DEBUG_PORT = 15000
ROUTER_CONFIG = build.CLUSTER / "kthena" / "router-configuration.yaml"


NODES = build.CLUSTER / "nodes.yaml"
PROFILE_LABEL = "mooncake-pd.test/profile"


def node_objects(path: Path = NODES, counts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The Node objects of cluster/nodes.yaml, as KWOK manages them (annotation
    kwok.x-k8s.io/node: fake), with the labels kubelet sets, the profile they stand for
    (label mooncake-pd.test/profile), an InternalIP (10.1.0.N, 10.1.1.N past 255: a host-network
    pod's address, never bound here) and their capacity as allocatable. `counts` (entry name ->
    count) takes only those entries, that many nodes of each (harness/scale.py's fleet)."""
    nodes = []
    number = 0
    for entry in yaml.safe_load(path.read_text())["nodes"]:
        if counts is not None and entry["name"] not in counts:
            continue
        count = int(entry.get("count", 1)) if counts is None else counts[entry["name"]]
        for i in range(count):
            number += 1
            name = f"{entry['name']}-{i}"
            labels = {
                "kubernetes.io/arch": entry["arch"],
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "type": "kwok",
                PROFILE_LABEL: entry["profile"],
                **entry["labels"],
            }
            nodes.append({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
                "status": {
                    "capacity": dict(entry["capacity"]),
                    "allocatable": dict(entry["capacity"]),
                    "addresses": [
                        {"type": "InternalIP", "address": f"10.1.{number // 256}.{number % 256}"},
                        {"type": "Hostname", "address": name},
                    ],
                },
            })  # fmt: skip
    return nodes


def _webhooks(ca_pem: bytes, port: int) -> list[dict[str, Any]]:
    """Kthena v1.0.0's webhook configurations (its chart: charts/kthena/charts/workload/templates/
    kthena-controller-manager/component/{validating,mutating}-webhook.yaml), pointed at the
    controller on loopback by URL and signed by our CA; CREATE and UPDATE only, as there."""
    bundle = base64.b64encode(ca_pem).decode()
    base = f"https://127.0.0.1:{port}"

    def hook(name: str, path: str, resource: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 30,
            "clientConfig": {"url": base + path, "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": ["workload.serving.volcano.sh"],
                    "apiVersions": ["v1alpha1"],
                    "resources": [resource],
                    "operations": ["CREATE", "UPDATE"],
                    "scope": "Namespaced",
                }
            ],
            **extra,
        }

    meta = {"labels": {"app.kubernetes.io/part-of": "mooncake-pd-test-cluster"}}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "kthena-controller-manager-validating-webhook", **meta},
            "webhooks": [
                hook(
                    "validate-workload-ai-v1alpha1-modelserving.volcano.sh",
                    "/validate-workload-ai-v1alpha1-modelserving",
                    "modelservings",
                ),
                hook("validate-autoscalingpolicy.volcano.sh", "/validate/autoscalingpolicy", "autoscalingpolicies"),
                hook("validate-modelbooster.volcano.sh", "/validate/modelbooster", "modelboosters"),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kthena-controller-manager-mutating-webhook", **meta},
            "webhooks": [
                hook(
                    "mutate-autoscalingpolicy.volcano.sh",
                    "/mutate/autoscalingpolicy",
                    "autoscalingpolicies",
                    reinvocationPolicy="IfNeeded",
                ),
                hook("mutate-modelbooster.volcano.sh", "/mutate/modelbooster", "modelboosters"),
            ],
        },
    ]


def isolated(
    argv: list[str],
    relays: list[str],
    service_account: Path,
    script: Path,
    beside: tuple[list[str], ...] = (),
    setup: list[str] | None = None,
) -> list[str]:
    """`argv` in a network and mount namespace of its own: only its loopback (brought up), a relay
    (relay.py `relays` pairs) beside it inside, and client-go's in-cluster files copied from
    `service_account`, then the `setup` lines; the wrapper is written to `script`. Needs root, or an unprivileged user
    namespace (unshare --map-root-user) where the machine allows one."""
    relay = shlex.join([sys.executable, str(RELAY), *relays])
    script.write_text("\n".join([
        "set -eu",
        "ip link set lo up",
        # The pod and node ranges are local here, so what the controller reaches at a pod's
        # address (the autoscaler's scrape) is served inside the namespace (podmetrics.py).
        *(f"ip route add local {net} dev lo" for net in LOCAL_NETS),
        "mount -t tmpfs tmpfs /run",
        f"mkdir -p {SERVICE_ACCOUNT_DIR}",
        f"cp {shlex.quote(str(service_account))}/* {SERVICE_ACCOUNT_DIR}/",
        *(setup or []),
        f"{relay} &",
        *(f"{shlex.join(command)} &" for command in beside),
        f"exec {shlex.join(argv)}",
        "",
    ]))  # fmt: skip
    prefix = ["unshare", "--net", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    return [*prefix, "sh", str(script)]


def apply_all(api: Client, objects: list[dict[str, Any]], manager: str = "mooncake-pd-tests") -> None:
    for obj in objects:
        api.apply(obj, manager)
