"""What each engine pod would run: its start script (from the scripts ConfigMap) executed
with the environment Kubernetes and Kthena give that pod, on a stand-in of its node (the files
the preflight reads), against a stub `vllm`."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mooncake_pd import profiles, scriptrun
from mooncake_pd.manifests import Manifest, one

KTHENA = "modelserving.volcano.sh"
POD_IP = "192.168.0.25"


@dataclass(frozen=True)
class PodIdentity:
    """One pod as Kthena names and labels it (facts.md: names, labels, injected env)."""

    modelserving: str
    group: int
    role: str
    replica: int
    index: int = 0
    workers: int = 0
    namespace: str = "default"
    ip: str = POD_IP

    @property
    def name(self) -> str:
        return f"{self.modelserving}-{self.group}-{self.role}-{self.replica}-{self.index}"

    def labels(self) -> dict[str, str]:
        """The labels Kthena's controller puts on this pod (pkg/apis/workload/v1alpha1/labels.go)."""
        labels = {
            f"{KTHENA}/name": self.modelserving,
            f"{KTHENA}/group-name": f"{self.modelserving}-{self.group}",
            f"{KTHENA}/role": self.role,
            f"{KTHENA}/role-id": f"{self.role}-{self.replica}",
            f"{KTHENA}/revision": "any",
        }
        if self.index == 0:
            labels[f"{KTHENA}/entry"] = "true"
        return labels

    def fields(self) -> dict[str, str]:
        """Downward-API field paths and their values for this pod."""
        fields = {f"metadata.labels['{k}']": v for k, v in self.labels().items()}
        fields.update(
            {
                "metadata.name": self.name,
                "metadata.namespace": self.namespace,
                "status.podIP": self.ip,
                "status.hostIP": self.ip,
            }
        )
        return fields

    def injected_env(self) -> dict[str, str]:
        """Variables Kthena injects into every container."""
        entry = f"{self.modelserving}-{self.group}-{self.role}-{self.replica}-0"
        return {
            "GROUP_SIZE": str(self.workers + 1),
            "ENTRY_ADDRESS": f"{entry}.{self.namespace}",
            "WORKER_INDEX": str(self.index),
        }


def container_env(container: dict[str, Any], pod: PodIdentity) -> dict[str, str]:
    """The environment Kubernetes gives a container of `pod` (literal values and fieldRefs; a
    Secret's key, which no render holds, as a stand-in naming it: those who run the engine for
    real put the value in, tests/support/localpods.prepare)."""
    env = pod.injected_env()
    fields = pod.fields()
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = f"stand-in for Secret {ref['name']} key {ref['key']}"
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise KeyError(f"env {var['name']}: no value for fieldRef {path}")
            env[var["name"]] = fields[path]
    return env


def _scripts_configmap(objects: list[Manifest], template: dict[str, Any]) -> tuple[dict[str, str], str]:
    """(the scripts ConfigMap's data, the key of the script the pod template runs)."""
    spec = template["spec"]
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    mount = mounts[container["args"][0]]
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    return one(objects, "ConfigMap", volume["configMap"]["name"])["data"], mount["subPath"]


def script_of(objects: list[Manifest], template: dict[str, Any]) -> str:
    """The start script a pod template runs: the ConfigMap key its container's args name."""
    data, key = _scripts_configmap(objects, template)
    return data[key]


def beside_script(objects: list[Manifest], template: dict[str, Any]) -> dict[str, str]:
    """The files the container mounts next to its script from the same ConfigMap (the programs
    of chart/files it runs: the connector config's engine_id, the preflight when rendered), as
    the pod sees them."""
    data, script = _scripts_configmap(objects, template)
    container = template["spec"]["containers"][0]
    folder = str(Path(container["args"][0]).parent)
    return {
        m["subPath"]: data[m["subPath"]]
        for m in container.get("volumeMounts", [])
        if m.get("subPath") and m["subPath"] != script and str(Path(m["mountPath"]).parent) == folder
    }


# A config.json with nothing for the preflight to derive or check: for runs where the model is
# not the point (the render summary, topology tests).
STAND_IN_MODEL = json.dumps({"architectures": ["stand-in: the model is not read here"]})


def device_patterns() -> dict[str, str]:
    """Device resource -> the /dev/<pattern>N files its device plugin mounts, of every profile
    with a device (chart/files/profiles.yaml)."""
    return {p.resource_name: str(p.row["devicePattern"]) for p in profiles.all_profiles().values() if p.resource_name}


@dataclass(frozen=True)
class Node:
    """The node a pod runs on, as the preflight reads it."""

    model_config: str | None = STAND_IN_MODEL  # config.json text; None: no config.json
    devices: int | None = None  # device nodes the device plugin mounts; None: as many as requested
    hccn_conf: str | None = "address_0=192.168.100.10\nnetmask_0=255.255.255.0\n"  # None: missing
    hccn_link: str = "UP"  # what `hccn_tool -i N -link -g` reports
    # A stand-in hccn_tool that does not answer: its stdout (None: `link status: <hccn_link>`),
    # stderr and exit code, as a binary without its driver libraries behaves.
    hccn_stdout: str | None = None
    hccn_stderr: str = ""
    hccn_exit: int = 0
    # Network interfaces in /sys/class/net; None: no /sys/class/net (the NIC is not checked).
    nics: tuple[str, ...] | None = None
    # /dev/infiniband's devices where the pod has accelerator.rdma on (the RDMA device plugin's);
    # None: no /dev/infiniband.
    infiniband: tuple[str, ...] | None = ("rdma_cm", "umad0", "uverbs0")
    # Mooncake's transfer engine in the image, as the preflight imports it: "" loads; a library
    # name (libibverbs.so.1) fails to load as the loader says it; None: not installed.
    transfer_engine: str | None = ""


def hccn_tool_script(node: Node) -> str:
    """A shell stand-in for hccn_tool printing what `node` says."""
    stdout = f"link status: {node.hccn_link}" if node.hccn_stdout is None else node.hccn_stdout
    lines = ["#!/bin/sh"]
    if stdout:
        lines.append(f"printf '%s\\n' {shlex.quote(stdout)}")
    if node.hccn_stderr:
        lines.append(f"printf '%s\\n' {shlex.quote(node.hccn_stderr)} >&2")
    lines.append(f"exit {node.hccn_exit}")
    return "\n".join(lines) + "\n"


def node_files(container: dict[str, Any], env: dict[str, str], node: Node) -> dict[str, scriptrun.NodeFile]:
    """The container paths the preflight reads, as `node` holds them."""
    files = {}
    if env.get("MODEL_LOCATION") and node.model_config is not None:
        files[f"{env['MODEL_LOCATION']}/config.json"] = scriptrun.NodeFile(node.model_config)
    limits = (container.get("resources") or {}).get("limits") or {}
    for resource, pattern in device_patterns().items():
        requested = int(limits.get(resource, 0))
        if requested:
            count = requested if node.devices is None else node.devices
            files.update({f"/dev/{pattern}{i}": scriptrun.NodeFile("") for i in range(count)})
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    if "hccn-conf" in mounts and node.hccn_conf is not None:
        files[mounts["hccn-conf"]] = scriptrun.NodeFile(node.hccn_conf)
    if "hccn-tool" in mounts:
        files[mounts["hccn-tool"]] = scriptrun.NodeFile(hccn_tool_script(node), executable=True)
    if env.get("MOONCAKE_PD_RDMA") and node.infiniband is not None:
        files.update({f"/dev/infiniband/{name}": scriptrun.NodeFile("") for name in node.infiniband})
    for nic in node.nics or ():
        files[f"/sys/class/net/{nic}/operstate"] = scriptrun.NodeFile("up\n")
    if node.transfer_engine is not None:
        # The package's module, which loads, or fails the way a missing shared library fails.
        missing = f"{node.transfer_engine}: cannot open shared object file: No such file or directory"
        engine = f"raise ImportError({missing!r})\n" if node.transfer_engine else ""
        files[f"{scriptrun.IMAGE_PYTHON_PATH}mooncake/__init__.py"] = scriptrun.NodeFile("")
        files[f"{scriptrun.IMAGE_PYTHON_PATH}mooncake/engine.py"] = scriptrun.NodeFile(engine)
    return files


@dataclass(frozen=True)
class EngineRun:
    role: str
    pod: PodIdentity
    run: scriptrun.Run
    serve: dict[str, Any]


def run_template(objects: list[Manifest], template: dict[str, Any], pod: PodIdentity, node: Node = Node()) -> EngineRun:
    """Run the pod template's start script as `pod` on `node`; scriptrun.ScriptFailed when it
    stops before vLLM (a preflight refusal: exit 78, with the termination log)."""
    container = template["spec"]["containers"][0]
    env = container_env(container, pod)
    files = {path: [f.text, f.executable] for path, f in node_files(container, env, node).items()}
    result = _run(
        script_of(objects, template),
        json.dumps(env, sort_keys=True),
        json.dumps(beside_script(objects, template), sort_keys=True),
        json.dumps(files, sort_keys=True),
    )
    return EngineRun(pod.role, pod, result, scriptrun.parse_serve_argv(result.argv, scriptrun.JSON_FLAGS))


def run_script(
    objects: list[Manifest],
    template: dict[str, Any],
    env: dict[str, str],
    node: Node = Node(),
    extra_path: Sequence[Path] = (),
) -> scriptrun.Run:
    """The pod template's start script under a given environment (not remembered): for runs
    that change the environment or PATH of a pod."""
    container = template["spec"]["containers"][0]
    return scriptrun.run(
        script_of(objects, template),
        env,
        extra_path=extra_path,
        beside=beside_script(objects, template),
        node=node_files(container, env, node),
    )


@cache
def _run(script: str, env: str, beside: str, node: str) -> scriptrun.Run:
    """A script run is a function of the script, its environment and its node: identical
    renders (helm 3 and helm 4 give the same bytes) share one run."""
    files = {path: scriptrun.NodeFile(text, executable) for path, (text, executable) in json.loads(node).items()}
    return scriptrun.run(script, json.loads(env), beside=json.loads(beside), node=files)


def entry_runs(objects: list[Manifest], node: Node = Node()) -> list[EngineRun]:
    """One run per role: the entry pod of replica 0 in serving group 0, on `node`."""
    modelserving = one(objects, "ModelServing")
    name = modelserving["metadata"]["name"]
    namespace = modelserving["metadata"].get("namespace", "default")
    runs = []
    for role in modelserving["spec"]["template"]["roles"]:
        pod = PodIdentity(name, 0, role["name"], 0, workers=role["workerReplicas"], namespace=namespace)
        runs.append(run_template(objects, role["entryTemplate"], pod, node))
    return runs
