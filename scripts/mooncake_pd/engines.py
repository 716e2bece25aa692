"""What each engine pod would run: its start script (from the scripts ConfigMap) executed
with the environment Kubernetes and Kthena give that pod, against a stub `vllm`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from mooncake_pd import scriptrun
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
    """The environment Kubernetes gives a container of `pod` (literal values and fieldRefs)."""
    env = pod.injected_env()
    fields = pod.fields()
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            if path not in fields:
                raise KeyError(f"env {var['name']}: no value for fieldRef {path}")
            env[var["name"]] = fields[path]
    return env


def script_of(objects: list[Manifest], template: dict[str, Any]) -> str:
    """The start script a pod template runs: the ConfigMap key its container's args name."""
    spec = template["spec"]
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    script_path = container["args"][0]
    mount = mounts[script_path]
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
    return configmap["data"][mount["subPath"]]


@dataclass(frozen=True)
class EngineRun:
    role: str
    pod: PodIdentity
    run: scriptrun.Run
    serve: dict[str, Any]


def run_template(objects: list[Manifest], template: dict[str, Any], pod: PodIdentity) -> EngineRun:
    container = template["spec"]["containers"][0]
    env = container_env(container, pod)
    result = _run(script_of(objects, template), json.dumps(env, sort_keys=True))
    return EngineRun(pod.role, pod, result, scriptrun.parse_serve_argv(result.argv, scriptrun.JSON_FLAGS))


@cache
def _run(script: str, env: str) -> scriptrun.Run:
    """A script run is a function of the script and its environment: identical renders (helm 3
    and helm 4 give the same bytes) share one run."""
    return scriptrun.run(script, json.loads(env))


def entry_runs(objects: list[Manifest]) -> list[EngineRun]:
    """One run per role: the entry pod of replica 0 in serving group 0."""
    modelserving = one(objects, "ModelServing")
    name = modelserving["metadata"]["name"]
    namespace = modelserving["metadata"].get("namespace", "default")
    runs = []
    for role in modelserving["spec"]["template"]["roles"]:
        pod = PodIdentity(name, 0, role["name"], 0, workers=role["workerReplicas"], namespace=namespace)
        runs.append(run_template(objects, role["entryTemplate"], pod))
    return runs
