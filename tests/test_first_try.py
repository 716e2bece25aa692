"""Issue #27 items 2, 7, 8 and 10 at render: what a platform engineer's first deployment on their
own cluster needs of the chart. The engines' CPU and memory follow their devices (the guide's
numbers are A3's 8-device point), Guaranteed QoS on request; the usual escape hatches, each where
Kubernetes reads it; the engines off the host network where the profile allows it, and the Pod
Security level the namespace needs; the helm-test pod on a slim Python image. Refusals of the
hatches are tests/bad-values/ files; the API server's verdict is tests/test_cluster_admission.py
and tests/test_cluster_helm.py."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from conftest import Renderer
from mooncake_pd import paths

NVIDIA_1GPU = {
    "accelerator": {"type": "nvidia"},
    "prefill": {"parallelism": {"tensor": 1, "data": 1, "dataLocal": 1}, "args": {"additional-config": None}},
    "decode": {"parallelism": {"tensor": 1, "data": 1, "dataLocal": None}, "args": {"additional-config": None}},
}


def resources(render: Renderer, overrides: dict[str, Any], role: str = "prefill") -> dict[str, Any]:
    return render(overrides=overrides).container(role)["resources"]


def test_the_defaults_keep_the_guides_sizing(render: Renderer):
    """Seed parity: A3's per-device numbers times the guide's 8 NPUs are its pod's."""
    for role in ("prefill", "decode"):
        assert resources(render, {}, role) == {
            "requests": {"cpu": "32", "memory": "350Gi", "huawei.com/ascend-1980": "8"},
            "limits": {"cpu": "94", "memory": "900Gi", "huawei.com/ascend-1980": "8"},
        }


def test_cpu_and_memory_follow_the_devices_per_pod(render: Renderer):
    """Eight 1-GPU pods fit a 2 TiB, 224-thread node (the guide's sizing asked 350Gi each)."""
    one_gpu = resources(render, NVIDIA_1GPU)
    assert one_gpu["requests"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    assert one_gpu["limits"] == {"cpu": "24", "memory": "240Gi", "nvidia.com/gpu": "1"}
    # A3 with 2 NPUs: a quarter of the guide's pod, in millicores and MiB where not whole.
    two = resources(render, {"prefill": {"parallelism": {"tensor": 2, "data": 1, "dataLocal": 1}}})
    assert two["requests"] == {"cpu": "8", "memory": "89600Mi", "huawei.com/ascend-1980": "2"}
    assert two["limits"] == {"cpu": "23500m", "memory": "225Gi", "huawei.com/ascend-1980": "2"}
    # cpu: per pod, whatever the parallelism.
    cpu = render((paths.CHART / "ci" / "cpu-values.yaml",)).container("prefill")["resources"]
    assert cpu == {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}}


def test_a_roles_own_resources_win_name_by_name(render: Renderer):
    own = resources(render, {"prefill": {"resources": {"requests": {"memory": "100Gi", "ephemeral-storage": "50Gi"}}}})
    assert own["requests"] == {
        "cpu": "32",
        "memory": "100Gi",
        "ephemeral-storage": "50Gi",
        "huawei.com/ascend-1980": "8",
    }
    assert own["limits"]["memory"] == "900Gi"


def test_guaranteed_qos_sets_every_request_to_its_limit(render: Renderer):
    guaranteed = resources(render, {**NVIDIA_1GPU, "engine": {"guaranteedQoS": True}})
    assert guaranteed["requests"] == guaranteed["limits"] == {"cpu": "24", "memory": "240Gi", "nvidia.com/gpu": "1"}


def test_host_network_follows_the_profile(render: Renderer):
    def spec(overrides: dict[str, Any], *files) -> dict[str, Any]:
        return render(files, overrides).role("prefill")["entryTemplate"]["spec"]

    ascend = spec({})
    assert ascend["hostNetwork"] is True and ascend["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec(NVIDIA_1GPU)["hostNetwork"] is True
    off = spec({**NVIDIA_1GPU, "engine": {"hostNetwork": False}})
    assert "hostNetwork" not in off and "dnsPolicy" not in off
    cpu = spec({}, paths.CHART / "ci" / "cpu-values.yaml")
    assert "hostNetwork" not in cpu
    assert spec({"engine": {"hostNetwork": True}}, paths.CHART / "ci" / "cpu-values.yaml")["hostNetwork"] is True


@pytest.mark.parametrize(
    ("files", "overrides", "level", "because"),
    [
        ((), {}, "privileged", "host network (engine.hostNetwork), hostPath mounts of ascend-a3's host files"),
        (("cpu-values.yaml",), {}, "privileged", "a hostPath model (model.storage.type)"),
        (("cpu-values.yaml",), {"model": {"storage": {"type": "pvc", "claimName": "models"}}}, "baseline", ""),
        (
            ("cpu-values.yaml",),
            {
                "model": {"storage": {"type": "pvc", "claimName": "models"}},
                "engine": {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
            },
            "privileged",
            "the capability NET_ADMIN (engine.securityContext)",
        ),
        (
            ("cpu-values.yaml",),
            {
                "model": {"storage": {"type": "pvc", "claimName": "models"}},
                "engine": {"extraVolumes": [{"name": "cache", "hostPath": {"path": "/var/cache/vllm"}}]},
            },
            "privileged",
            "the hostPath volume cache (engine.extraVolumes)",
        ),
        (
            ("cpu-values.yaml",),
            {
                "model": {"storage": {"type": "pvc", "claimName": "models"}},
                "engine": {"podSecurityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}},
            },
            "privileged",
            "the sysctl net.core.somaxconn (engine.podSecurityContext)",
        ),
    ],
    ids=["ascend", "cpu-hostpath-model", "cpu-pvc", "cpu-net-admin", "cpu-hostpath-volume", "cpu-unsafe-sysctl"],
)
def test_notes_name_the_pod_security_level_the_engines_need(files, overrides, level, because):
    """NOTES as `helm install` prints them (helm 4's client-side dry run needs no cluster)."""
    cmd = [str(paths.helm_binary("4.1.4")), "install", "demo", str(paths.CHART), "--dry-run=client"]
    cmd += [arg for f in files for arg in ("-f", str(paths.CHART / "ci" / f))]
    cmd += [arg for key, value in overrides.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]
    notes = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split("NOTES:", 1)[1]
    assert f"need the namespace's level {level}" in notes
    assert because in notes
    assert f"pod-security.kubernetes.io/enforce={level}" in notes


def test_the_escape_hatches_land_where_kubernetes_reads_them(render: Renderer):
    rendered = render((paths.CHART / "ci" / "escape-hatches-values.yaml",))
    prefill = rendered.role("prefill")["entryTemplate"]
    decode = rendered.role("decode")["entryTemplate"]
    for obj in rendered.objects:
        assert obj["metadata"]["labels"]["team"] == "inference", obj["kind"]
    assert prefill["metadata"]["labels"]["cost-center"] == "llm-serving"
    assert prefill["metadata"]["labels"]["example.com/role-tier"] == "prefill"
    assert "example.com/role-tier" not in decode["metadata"]["labels"]
    assert decode["metadata"]["annotations"]["example.com/decode"] == "true"
    assert decode["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert any(k.startswith("checksum/") for k in decode["metadata"]["annotations"])
    assert prefill["spec"]["priorityClassName"] == "llm-serving"
    assert prefill["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert "topologySpreadConstraints" not in decode["spec"]
    for template in (prefill, decode):
        names = [c["name"] for c in template["spec"]["containers"]]
        assert names[1:] == ["log-shipper"]
        assert {"name": "compile-cache", "emptyDir": {"sizeLimit": "20Gi"}} in template["spec"]["volumes"]
        mounts = template["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "compile-cache", "mountPath": "/root/.cache/vllm"} in mounts
    proxy = rendered.one("Deployment")["spec"]["template"]
    assert proxy["spec"]["priorityClassName"] == "llm-serving"
    assert proxy["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert proxy["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    pdb = rendered.one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    # It selects the proxy pods, and only them.
    assert pdb["spec"]["selector"]["matchLabels"].items() <= proxy["metadata"]["labels"].items()
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "proxy"
    test_pod = rendered.one("Pod")
    assert test_pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert test_pod["spec"]["tolerations"][0]["key"] == "dedicated"


def test_no_hatch_renders_anything_by_default(render: Renderer, defaults):
    for template in (defaults.role(r)["entryTemplate"] for r in ("prefill", "decode")):
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        assert [c["name"] for c in template["spec"]["containers"]] == [component]
        assert "priorityClassName" not in template["spec"]
        assert "topologySpreadConstraints" not in template["spec"]
    assert defaults.find("PodDisruptionBudget") == []


def test_the_helm_test_pod_runs_a_slim_python_image(defaults):
    """Item 10: chart/files/chat_check.py needs Python's standard library alone (conformance runs it
    in a venv of Python 3.11 with no packages: tests/support/localpods.py SLIM_PYTHON)."""
    assert defaults.one("Pod")["spec"]["containers"][0]["image"] == "docker.io/library/python:3.11-slim"
    imports = (paths.CHART / "files" / "chat_check.py").read_text()
    assert "import urllib.request" in imports and "requests" not in imports.split('"""', 2)[2]


def test_network_sysctls_are_refused_only_on_the_host_network(render: Renderer):
    """The API server refuses a net.* sysctl on a host-network pod; off the host network (the cpu
    profile) the pod has a network namespace of its own, and it is admitted."""
    sysctl = {"engine": {"podSecurityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}}}
    cpu = (paths.CHART / "ci" / "cpu-values.yaml",)
    pod = render(cpu, sysctl).role("prefill")["entryTemplate"]["spec"]
    assert pod["securityContext"]["sysctls"] == [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]
    refused = render.error(cpu, {**sysctl, "engine": {**sysctl["engine"], "hostNetwork": True}})
    assert "is a network-namespace sysctl, which the API server refuses on the engines' host-network pods" in refused


@pytest.mark.parametrize(
    ("sets", "warned"),
    [
        ((), True),
        (("router.type=kthena", "decode.port=7100"), True),
        (("router.type=kthena", "decode.port=7100", "servingGroups=2"), False),
    ],
    ids=["proxy-one-group", "kthena-one-group", "kthena-two-groups"],
)
def test_notes_warn_that_a_lone_serving_group_stops_serving_during_a_rollout(sets, warned):
    """The drills measured it (docs/failure-modes.md, kthena-rollout): Kthena v1.0.0 deletes the
    only group before it creates the new one."""
    cmd = [str(paths.helm_binary("4.1.4")), "install", "demo", str(paths.CHART), "--dry-run=client"]
    cmd += [arg for s in sets for arg in ("--set", s)]
    notes = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split("NOTES:", 1)[1]
    assert ("nothing serves for engine.drainSeconds" in notes) == warned
