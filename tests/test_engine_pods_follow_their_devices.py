"""The engines' pods follow their devices and profile (issue #27 items 2 and 7): CPU and memory per
device (the guide's numbers are A3's 8-device point), a role's own resources win name by name,
Guaranteed QoS on request, and the host network where the profile needs it."""

from __future__ import annotations

from typing import Any

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
