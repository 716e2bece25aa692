"""Accelerator profiles (Ascend A3, A2, NVIDIA), KV connectors, `network.interface: auto` and
model sources (hostPath, PVC, download)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Rendered, Renderer, assert_valid
from mooncake_pd import engines, paths, scriptrun

ASCEND_VOLUMES = {"hccn-conf", "hccn-tool", "ascend-install-info"}
PROFILES = {
    "ascend-a3": ("huawei.com/ascend-1980", "quay.io/ascend/vllm-ascend:v0.13.0-a3", "MooncakeConnectorV1"),
    "ascend-a2": ("huawei.com/Ascend910", "quay.io/ascend/vllm-ascend:v0.13.0", "MooncakeConnectorV1"),
    "nvidia": ("nvidia.com/gpu", "docker.io/vllm/vllm-openai:v0.13.0", "NixlConnector"),
}
SMALL = {"prefill": {"parallelism": {"tensor": 2, "data": 2, "dataLocal": 2}}, "decode": {"parallelism": {"data": 2}}}


def profile_values(accelerator: str, **extra) -> dict:
    return {"accelerator": {"type": accelerator}, **SMALL, **extra}


def runs(rendered: Rendered) -> dict[str, engines.EngineRun]:
    return {r.role: r for r in engines.entry_runs(rendered.objects)}


@pytest.mark.parametrize("accelerator", list(PROFILES))
def test_profile_resources_image_mounts_env_and_connector(render: Renderer, crds, accelerator: str):
    resource, image, connector = PROFILES[accelerator]
    rendered = render(overrides=profile_values(accelerator))
    assert_valid(rendered, crds)
    ascend = accelerator.startswith("ascend")
    for role, run in runs(rendered).items():
        pod = rendered.role(role)["entryTemplate"]["spec"]
        container = pod["containers"][0]
        assert container["image"] == image
        assert container["resources"]["limits"][resource] == "4"
        assert {k for k in container["resources"]["limits"] if "/" in k} == {resource}
        assert ({v["name"] for v in pod["volumes"]} >= ASCEND_VOLUMES) == ascend
        env = run.run.env
        kv = run.serve["flags"]["kv-transfer-config"]
        assert kv["kv_connector"] == connector
        if ascend:
            assert env["HCCL_IF_IP"] == engines.POD_IP and env["TP_SOCKET_IFNAME"] == "enp23s0f3"
            assert env["HCCL_BUFFSIZE"] == {"prefill": "256", "decode": "600"}[role]
            assert "NCCL_SOCKET_IFNAME" not in env
            assert kv["kv_connector_module_path"] == "vllm_ascend.distributed.mooncake_connector"
            assert kv["kv_port"] == {"prefill": 18000, "decode": 18100}[role]
            assert kv["kv_connector_extra_config"]["use_ascend_direct"] is True
        else:
            assert not [k for k in env if k.startswith(("HCCL", "TP_SOCKET", "PYTORCH_NPU", "TASK_QUEUE"))]
            assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enp23s0f3"
            assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == {"prefill": "18000", "decode": "18100"}[role]
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == engines.POD_IP
            assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "engine_id": env["MOONCAKE_ENGINE_ID"]}
            # NIXL binds one side channel per DP rank.
            ports = [p["containerPort"] for p in container["ports"] if p["name"].startswith("kv-")]
            assert ports == [{"prefill": 18000, "decode": 18100}[role] + i for i in range(2)]


def test_nvidia_proxy_runs_the_vendored_script_in_vllms_cpu_image(render: Renderer):
    """Issue #27 item 10: not the vLLM-Ascend image with CANN, but the smallest image with what the
    v0.13.0 proxy imports (conformance runs it there), and the chart's copy of the script."""
    rendered = render(overrides=profile_values("nvidia"))
    pod = rendered.one("Deployment")["spec"]["template"]
    proxy = pod["spec"]["containers"][0]
    assert proxy["image"] == "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.13.0"
    script = "/workspace/load_balance_proxy_server_example.py"
    assert proxy["command"] == ["python3", "/workspace/proxy_guard.py", script]
    script = rendered.one("ConfigMap")["data"]["load_balance_proxy_server_example.py"]
    assert script == (paths.CHART / "files/vendor/vllm-ascend-v0.13.0/load_balance_proxy_server_example.py").read_text()
    assert {
        "name": "scripts",
        "mountPath": proxy["command"][2],
        "subPath": "load_balance_proxy_server_example.py",
        "readOnly": True,
    } in proxy["volumeMounts"]
    assert "checksum/programs" in pod["metadata"]["annotations"]
    # On Ascend, the engine image's own script; with proxy.image, that image's proxy.script.
    ascend = render().one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert ascend["image"] == "quay.io/ascend/vllm-ascend:v0.13.0-a3"
    assert ascend["command"][2].startswith("/vllm-workspace/vllm-ascend/")
    assert "load_balance_proxy_server_example.py" not in render().one("ConfigMap")["data"]
    own = profile_values("nvidia", proxy={"image": {"repository": "quay.io/ascend/vllm-ascend"}})
    own_proxy = render(overrides=own).one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert own_proxy["image"] == "quay.io/ascend/vllm-ascend:v0.13.0"
    assert own_proxy["command"][2].startswith("/vllm-workspace/vllm-ascend/")


def test_upstream_mooncake_connector_on_nvidia(render: Renderer, crds):
    rendered = render(overrides=profile_values("nvidia", kvTransfer={"connector": "MooncakeConnector"}))
    assert_valid(rendered, crds)
    for role, run in runs(rendered).items():
        kv = run.serve["flags"]["kv-transfer-config"]
        assert kv["kv_connector"] == "MooncakeConnector"
        assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role]
        assert "kv_port" not in kv and "kv_connector_module_path" not in kv
        assert run.run.env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == {"prefill": "18000", "decode": "18100"}[role]


def test_kthena_router_connector_type_follows_the_connector(render: Renderer):
    for accelerator, expected in [("ascend-a3", "mooncake"), ("nvidia", "nixl")]:
        values = profile_values(accelerator, router={"type": "kthena"})
        values["decode"] = {**values["decode"], "port": 7100}
        server = render(overrides=values).one("ModelServer")
        assert server["spec"]["kvConnector"] == {"type": expected}


def stub_bin(tmp_path: Path, name: str, body: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/bash\n" + body)
    tool.chmod(0o755)
    return folder


def auto_nic_run(render: Renderer, accelerator: str, extra_path: list[Path]) -> scriptrun.Run:
    rendered = render(overrides=profile_values(accelerator, network={"interface": "auto"}))
    role = rendered.role("decode")
    pod = engines.PodIdentity("deepseek-pd", 0, "decode", 0)
    env = engines.container_env(role["entryTemplate"]["spec"]["containers"][0], pod)
    return engines.run_script(rendered.objects, role["entryTemplate"], env, extra_path=extra_path)


@pytest.mark.parametrize("accelerator", ["ascend-a3", "nvidia"])
def test_nic_auto_uses_the_default_route(render: Renderer, tmp_path: Path, accelerator: str):
    ip = stub_bin(tmp_path, "ip", 'echo "default via 10.0.0.1 dev bond0.12 proto static metric 100"\n')
    run = auto_nic_run(render, accelerator, [ip])
    names = (
        ["GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME"]
        if accelerator != "nvidia"
        else ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]
    )
    assert {run.env[n] for n in names} == {"bond0.12"}


def test_nic_auto_falls_back_to_proc_net_route(render: Renderer, tmp_path: Path):
    ip = stub_bin(tmp_path, "ip", "exit 1\n")
    routes = Path("/proc/net/route").read_text().splitlines()[1:]
    default = next((line.split()[0] for line in routes if line.split()[1] == "00000000"), None)
    if default is None:
        with pytest.raises(scriptrun.ScriptFailed, match="no default route found"):
            auto_nic_run(render, "ascend-a3", [ip])
    else:
        assert auto_nic_run(render, "ascend-a3", [ip]).env["GLOO_SOCKET_IFNAME"] == default


def test_pvc_source_mounts_the_claim_read_only(render: Renderer, crds):
    rendered = render(overrides={"model": {"storage": {"type": "pvc", "claimName": "llm-models"}}})
    assert_valid(rendered, crds)
    for role in ("prefill", "decode"):
        pod = rendered.role(role)["entryTemplate"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "model")
        assert volume == {"name": "model", "persistentVolumeClaim": {"claimName": "llm-models", "readOnly": True}}
        assert "initContainers" not in pod


DOWNLOAD = {
    "model": {
        "path": "/models/DeepSeek-R1-Distill-Qwen-1.5B",
        "storage": {"type": "download", "emptyDirSizeLimit": "20Gi"},
        "download": {"repo": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "tokenSecret": {"name": "hf-token"}},
    },
    "decode": {"workerReplicas": 1, "parallelism": {"data": 8, "dataLocal": 4}},
}


def test_download_init_container(render: Renderer, crds):
    rendered = render(overrides=DOWNLOAD)
    assert_valid(rendered, crds)
    for template in ("entryTemplate", "workerTemplate"):
        pod = rendered.role("decode")[template]["spec"]
        (init,) = pod["initContainers"]
        env = {e["name"]: e for e in init["env"]}
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
        assert env["DOWNLOAD_REPO"]["value"] == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
        assert "hf-token" not in " ".join(init.get("args", []) + init["command"])
        # The program is chart/files/download_model.py, mounted from the scripts ConfigMap.
        assert init["command"] == ["python3", "/workspace/download_model.py"]
        program = next(m for m in init["volumeMounts"] if m["name"] == "scripts")
        assert program == {
            "name": "scripts",
            "mountPath": "/workspace/download_model.py",
            "subPath": "download_model.py",
            "readOnly": True,
        }
        volume = next(v for v in pod["volumes"] if v["name"] == "model")
        assert volume["emptyDir"] == {"sizeLimit": "20Gi"}
        main = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert main["model"]["readOnly"] is True
        assert "readOnly" not in init["volumeMounts"][0]
    assert not any("hf-token" in str(cm.get("data")) for cm in rendered.find("ConfigMap"))


def test_modelscope_download_into_a_claim(render: Renderer):
    values = {
        "model": {
            **DOWNLOAD["model"],
            "storage": {"type": "download", "claimName": "models"},
            "download": {**DOWNLOAD["model"]["download"], "hub": "modelscope"},
        }
    }
    pod = render(overrides=values).role("prefill")["entryTemplate"]["spec"]
    env = {e["name"] for e in pod["initContainers"][0]["env"]}
    assert "MODELSCOPE_API_TOKEN" in env and "HF_TOKEN" not in env
    assert next(v for v in pod["volumes"] if v["name"] == "model")["persistentVolumeClaim"] == {"claimName": "models"}


FAKE_HUB = """
import json, os, pathlib
def snapshot_download(repo_id, revision, local_dir):
    calls = pathlib.Path(os.environ["FAKE_HUB_CALLS"])
    calls.write_text(calls.read_text() + json.dumps([repo_id, revision, os.environ.get("HF_TOKEN")]) + "\\n"
                     if calls.exists() else json.dumps([repo_id, revision, os.environ.get("HF_TOKEN")]) + "\\n")
    pathlib.Path(local_dir, "config.json").write_text("{}")
"""


def test_download_program_fetches_once(render: Renderer, tmp_path: Path):
    """Runs the init container's own program against a stand-in huggingface_hub."""
    rendered = render(overrides=DOWNLOAD)
    init = rendered.role("prefill")["entryTemplate"]["spec"]["initContainers"][0]
    program = tmp_path / "download_model.py"
    program.write_text(rendered.one("ConfigMap", "deepseek-pd-scripts")["data"]["download_model.py"])
    fake = tmp_path / "fake"
    (fake / "huggingface_hub").mkdir(parents=True)
    (fake / "huggingface_hub" / "__init__.py").write_text(textwrap.dedent(FAKE_HUB))
    calls = tmp_path / "calls"
    target = tmp_path / "models" / "DeepSeek-R1-Distill-Qwen-1.5B"
    env = {e["name"]: e.get("value") for e in init["env"] if "value" in e}
    env.update(
        {
            "MODEL_LOCATION": str(target),
            "HF_TOKEN": "secret-token",
            "FAKE_HUB_CALLS": str(calls),
            "PYTHONPATH": str(fake),
            "PATH": os.environ["PATH"],
        }
    )
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert "no download" in proc.stdout
    assert calls.read_text().splitlines() == ['["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "main", "secret-token"]']
    assert (target / "config.json").exists()
    assert (
        target / ".mooncake-pd-download"
    ).read_text() == "huggingface:deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B@main\n"


def test_cpu_profile_is_nixl_in_host_memory_without_devices(render: Renderer, crds):
    """The cpu profile (chart/ci/cpu-values.yaml): vLLM's CPU image, no device resources or
    Ascend mounts, NixlConnector buffering in host memory, the CPU engine env from
    accelerator.cpu, one NIXL side channel per DP rank on the kv ports."""
    from mooncake_pd import paths

    rendered = render((paths.CHART / "ci" / "cpu-values.yaml",))
    assert_valid(rendered, crds)
    for role, run in runs(rendered).items():
        pod = rendered.role(role)["entryTemplate"]["spec"]
        container = pod["containers"][0]
        assert container["image"].endswith("/vllm-cpu-release-repo:v0.13.0")
        assert not [k for k in container["resources"]["limits"] if "/" in k]
        assert not {v["name"] for v in pod["volumes"]} & ASCEND_VOLUMES
        env = run.run.env
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "4" and env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
        assert env["VLLM_HOST_IP"] == env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == engines.POD_IP
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == {"prefill": "18000", "decode": "18100"}[role]
        assert not [k for k in env if k.startswith(("HCCL", "TP_SOCKET", "PYTORCH_NPU", "TASK_QUEUE"))]
        kv = run.serve["flags"]["kv-transfer-config"]
        assert kv["kv_connector"] == "NixlConnector" and kv["kv_buffer_device"] == "cpu"
        assert kv["kv_role"] == "kv_both"
        assert "gpu-memory-utilization" not in run.serve["flags"]
    # The KV cache size follows the values, and a memory limit must leave room for it.
    bigger = render(
        (paths.CHART / "ci" / "cpu-values.yaml",),
        {
            "accelerator.cpu.kvCacheSpaceGiB": 9,
            "decode.resources": {"requests": {"memory": "12Gi"}, "limits": {"memory": "16Gi"}},
        },
    )
    assert {r.run.env["VLLM_CPU_KVCACHE_SPACE"] for r in runs(bigger).values()} == {"9"}


# accelerator.rdma: multi-node NVIDIA over RDMA (chart/ci/nvidia-rdma-values.yaml, DeepSeek-V3 on
# 2 x 8 H100 per role with expert parallelism).
RDMA_CI = paths.CHART / "ci" / "nvidia-rdma-values.yaml"


def rdma_values(rdma: dict, **extra) -> dict:
    return {**profile_values("nvidia", **extra), "accelerator": {"type": "nvidia", "rdma": rdma}}


def engine_pods(rendered: Rendered) -> list[dict]:
    """Every engine pod template (entry and worker) of both roles."""
    pods = []
    for role in ("prefill", "decode"):
        spec = rendered.role(role)
        pods += [spec["entryTemplate"]] + ([spec["workerTemplate"]] if spec.get("workerTemplate") else [])
    return pods


def test_rdma_gives_every_engine_pod_the_device_capability_and_variables(render: Renderer, crds):
    rendered = render((RDMA_CI,))
    assert_valid(rendered, crds)
    pods = engine_pods(rendered)
    assert len(pods) == 4
    for pod in pods:
        container = pod["spec"]["containers"][0]
        for kind in ("requests", "limits"):
            assert container["resources"][kind]["rdma/rdma_shared_device_a"] == "1"
            assert container["resources"][kind]["nvidia.com/gpu"] == "8"
        assert container["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"], "drop": ["NET_RAW"]}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IB_HCA"] == "mlx5"
        assert "UCX_TLS" not in env and "UCX_NET_DEVICES" not in env  # empty: UCX's own choice
        assert json.loads(env["MOONCAKE_PD_RDMA"]) == {
            "resource": "rdma/rdma_shared_device_a",
            "mountInfiniband": False,
        }
        # The device plugin gives /dev/infiniband: no hostPath of it.
        assert "infiniband" not in {v["name"] for v in pod["spec"]["volumes"]}
    # The start script's exports keep NCCL's socket NIC (network.interface) and do not touch the IB variables.
    for role, run in runs(rendered).items():
        assert run.run.env["NCCL_IB_DISABLE"] == "0", role
        assert "NCCL_SOCKET_IFNAME" in run.run.env


def test_rdma_values_reach_the_variables_the_profile_lists(render: Renderer):
    rdma = {"enabled": True, "ucxTls": "rc,cuda", "ucxNetDevices": "mlx5_0:1", "env": {"NCCL_IB_GID_INDEX": 3}}
    container = render(overrides=rdma_values(rdma)).container("decode")
    names = [e["name"] for e in container["env"]]
    tail = names[names.index("NCCL_IB_DISABLE") :]
    assert tail == ["NCCL_IB_DISABLE", "UCX_NET_DEVICES", "UCX_TLS", "NCCL_IB_GID_INDEX", "MOONCAKE_PD_RDMA"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["UCX_TLS"], env["UCX_NET_DEVICES"], env["NCCL_IB_GID_INDEX"]) == ("rc,cuda", "mlx5_0:1", "3")


def test_rdma_mounts_infiniband_only_when_asked(render: Renderer, crds):
    values = rdma_values(
        {"enabled": True, "resource": "", "mountInfiniband": True},
        engine={"securityContext": {"privileged": True, "allowPrivilegeEscalation": True}},
    )
    rendered = render(overrides=values)
    assert_valid(rendered, crds)
    pod = rendered.role("prefill")["entryTemplate"]["spec"]
    container = pod["containers"][0]
    assert {"name": "infiniband", "hostPath": {"path": "/dev/infiniband", "type": "Directory"}} in pod["volumes"]
    assert {"name": "infiniband", "mountPath": "/dev/infiniband"} in container["volumeMounts"]
    assert not [k for k in container["resources"]["limits"] if k.startswith("rdma/")]


def test_rdma_off_by_default_adds_nothing(render: Renderer):
    for values in ((), (paths.CHART / "ci" / "nvidia-values.yaml",)):
        for pod in engine_pods(render(values)):
            container = pod["spec"]["containers"][0]
            assert not [e for e in container["env"] if e["name"].startswith(("NCCL_IB", "UCX_", "MOONCAKE_PD_RDMA"))]
            assert "IPC_LOCK" not in json.dumps(container.get("securityContext", {}))
            assert not [k for k in container["resources"]["limits"] if k.startswith("rdma/")]


@pytest.mark.parametrize(
    ("sets", "because"),
    [
        ({"engine": {"hostNetwork": False}}, "the capability IPC_LOCK (accelerator.rdma)"),
        (
            {
                "accelerator": {"type": "nvidia", "rdma": {"enabled": True, "resource": "", "mountInfiniband": True}},
                "engine": {
                    "hostNetwork": False,
                    "securityContext": {"privileged": True, "allowPrivilegeEscalation": True},
                },
            },
            "the hostPath /dev/infiniband (accelerator.rdma.mountInfiniband)",
        ),
    ],
    ids=["ipc-lock", "mounted-infiniband"],
)
def test_notes_name_what_rdma_asks_of_pod_security(sets: dict, because: str):
    """IPC_LOCK and the /dev/infiniband hostPath are outside Pod Security baseline: the NOTES
    `helm install` prints name them, even off the host network."""
    cmd = [str(paths.helm_binary("4.1.4")), "install", "demo", str(paths.CHART), "--dry-run=client", "-f", str(RDMA_CI)]
    cmd += [arg for key, value in sets.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]
    notes = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split("NOTES:", 1)[1]
    assert "need the namespace's level privileged" in notes and because in notes
