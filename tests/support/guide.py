"""The vendor guide's deployment (the seed: "Deploying ModelServing Using Mooncake", Huawei Cloud
CCE best practices, 2026-06-17) written down as data the tests own, so seed parity is checked on a
fresh clone. The guide's own start scripts are vendored (tests/fixtures/guide/, SOURCE.md there);
a test runs them and checks that this table says what they do, and where the guide itself is
beside the repository (../shared/seeds), that the vendored copies still equal it.

Values are as the guide's scripts and ModelServing give them, for a pod with POD_IP POD_IP,
in serving group 0, role replica 0.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mooncake_pd import paths

SEED = paths.REPO.parent / "shared" / "seeds" / "000_43c801b797d86e0a.txt"
VENDORED = paths.REPO / "tests" / "fixtures" / "guide"
POD_IP = "192.168.0.25"
IMAGE = "quay.io/ascend/vllm-ascend:v0.13.0-a3"
MODEL = "/models/DeepSeek-R1-Distill-Qwen-1.5B"

# The ModelServing's spec (deepseek-serv.yaml).
MODELSERVING = {
    "name": "deepseek-pd",
    "namespace": "default",
    "schedulerName": "volcano",
    "replicas": 1,
    "recoveryPolicy": "ServingGroupRecreate",
    "restartGracePeriodSeconds": 60,
    "roles": ["prefill", "decode"],
    "roleReplicas": 1,
    "workerReplicas": 0,
}

# Every variable each script exports (ConfigMap deepseek-pd-cm, prefill.sh and decode.sh).
_SHARED_EXPORTS = {
    "HCCL_IF_IP": POD_IP,
    "GLOO_SOCKET_IFNAME": "enp23s0f3",
    "TP_SOCKET_IFNAME": "enp23s0f3",
    "HCCL_SOCKET_IFNAME": "enp23s0f3",
    "OMP_PROC_BIND": "false",
    "OMP_NUM_THREADS": "10",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "TASK_QUEUE_ENABLE": "1",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "VLLM_USE_V1": "1",
}
EXPORTS = {
    "prefill": {
        **_SHARED_EXPORTS,
        "HCCL_BUFFSIZE": "256",
        "MOONCAKE_ENGINE_ID": "deepseek-pd-0_prefill-0",
    },
    "decode": {
        **_SHARED_EXPORTS,
        "HCCL_BUFFSIZE": "600",
        "MOONCAKE_ENGINE_ID": "deepseek-pd-0_decode-0",
    },
}


def _kv_transfer_config(role: str, kv_port: str) -> dict:
    return {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer",
        "kv_port": kv_port,
        "engine_id": EXPORTS[role]["MOONCAKE_ENGINE_ID"],
        "kv_connector_module_path": "vllm_ascend.distributed.mooncake_connector",
        "kv_connector_extra_config": {
            "use_ascend_direct": True,
            "prefill": {"dp_size": 4, "tp_size": 2},
            "decode": {"dp_size": 4, "tp_size": 2},
        },
    }


# Every `vllm serve` flag and value, as parsed by mooncake_pd.scriptrun.parse_serve_argv.
SERVE = {
    "prefill": {
        "model": MODEL,
        "flags": {
            "host": POD_IP,
            "port": "7100",
            "data-parallel-size": "4",
            "data-parallel-size-local": "4",
            "data-parallel-address": POD_IP,
            "data-parallel-rpc-port": "12321",
            "tensor-parallel-size": "2",
            "seed": "1024",
            "served-model-name": "ds_r1",
            "max-model-len": "40000",
            "max-num-batched-tokens": "16384",
            "max-num-seqs": "8",
            "enforce-eager": True,
            "trust-remote-code": True,
            "gpu-memory-utilization": "0.9",
            "no-enable-prefix-caching": True,
            "additional-config": {"recompute_scheduler_enable": True},
            "kv-transfer-config": _kv_transfer_config("prefill", "28000"),
        },
    },
    "decode": {
        "model": MODEL,
        "flags": {
            "host": POD_IP,
            "port": "7101",
            "data-parallel-size": "4",
            "data-parallel-address": POD_IP,
            "data-parallel-rpc-port": "12322",
            "tensor-parallel-size": "2",
            "seed": "1024",
            "served-model-name": "ds_r1",
            "max-model-len": "40000",
            "max-num-batched-tokens": "256",
            "max-num-seqs": "40",
            "trust-remote-code": True,
            "gpu-memory-utilization": "0.94",
            "no-enable-prefix-caching": True,
            "additional-config": {
                "recompute_scheduler_enable": True,
                "finegrained_tp_config": {"lmhead_tensor_parallel_size": 2},
            },
            "compilation-config": {"cudagraph_mode": "FULL_DECODE_ONLY"},
            "kv-transfer-config": _kv_transfer_config("decode", "28100"),
        },
    },
}

# The pod of each role (entryTemplate).
PORTS = {"prefill": 7100, "decode": 7101}
POD_ENV_VALUES = {
    "ROLE": None,  # the role's name
    "MODEL_LOCATION": MODEL,
    "TP_SIZE": "2",
    "DP_SIZE": "4",
}
POD_ENV_FIELDS = {
    "GROUP_NAME": "metadata.labels['modelserving.volcano.sh/group-name']",
    "ROLE_ID": "metadata.labels['modelserving.volcano.sh/role-id']",
    "POD_IP": "status.podIP",
    "NODE_IP": "status.hostIP",
}
# Only decode has it in the guide; the chart gives it to both roles.
DECODE_ONLY_FIELDS = {"ENGINE_ID": "metadata.name"}
RESOURCES = {
    "requests": {"cpu": "32", "memory": "350Gi", "huawei.com/ascend-1980": "8"},
    "limits": {"cpu": "94", "memory": "900Gi", "huawei.com/ascend-1980": "8"},
}


def readiness_probe(role: str) -> dict:
    return {
        "httpGet": {"path": "/health", "port": PORTS[role], "scheme": "HTTP"},
        "initialDelaySeconds": 60,
        "periodSeconds": 10,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


# mountPath -> hostPath (None: not a host path).
HOST_MOUNTS = {
    "/models": "/models",
    "/etc/hccn.conf": "/etc/hccn.conf",
    "/usr/local/Ascend/driver/tools/hccn_tool": "/usr/local/Ascend/driver/tools/hccn_tool",
    "/etc/ascend_install.info": "/etc/ascend_install.info",
}
SHM = "/dev/shm"

# The proxy command line and the test request ("Configure the load balancing proxy").
PROXY_PORT = 8080
REQUEST = {"model": "ds_r1", "messages": [{"role": "user", "content": "Hello, how are you?"}], "max_tokens": 100}


def vendored_scripts() -> dict[str, str]:
    """The guide's prefill.sh and decode.sh as vendored in tests/fixtures/guide/."""
    return {role: (VENDORED / f"{role}.sh").read_text() for role in ("prefill", "decode")}


def scripts(seed: Path = SEED) -> dict[str, str]:
    """{"prefill": ..., "decode": ...}: the ConfigMap's prefill.sh and decode.sh as written."""
    lines = seed.read_text().splitlines()
    found: dict[str, str] = {}
    for role in ("prefill", "decode"):
        start = lines.index(f"  {role}.sh: |") + 1
        body = []
        for line in lines[start:]:
            if line and not line.startswith("    "):
                break
            body.append(line)
        found[role] = textwrap.dedent("\n".join(body)).strip() + "\n"
    return found
