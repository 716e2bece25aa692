"""The engines' preflight (chart/files/preflight.py): the rendered start scripts run with the stub
`vllm` on stand-in nodes holding model folders made here (Qwen2 without head_dim, Llama with it,
an MLA model, multimodal configs), a port held open, and fake device and hccn information. What
vLLM receives, and each refusal before vLLM starts: exit code 78, one line naming the cause, the
values key and the fix, the same line in the termination log; and `verify` shows it."""

from __future__ import annotations

import ast
import json
import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conftest import Renderer
from mooncake_pd import engines, paths, scriptrun, verify
from support import nodes

EX_CONFIG = 78
GUIDE_MODEL = nodes.config_text("/models/DeepSeek-R1-Distill-Qwen-1.5B")
QWEN2_05B = {  # Qwen2-0.5B: no head_dim; 896 / 14 = 64
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "max_position_embeddings": 131072,
}
LLAMA_WITH_HEAD_DIM = {  # Llama-3.2-1B: head_dim in config.json
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
}
LLAVA = {  # llava-1.5-7b-hf: a multimodal config whose text_config lacks head_dim
    "architectures": ["LlavaForConditionalGeneration"],
    "text_config": {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 131072,
    },
    "vision_config": {"hidden_size": 1024},
}


def run(
    render: Renderer,
    overrides: dict[str, Any] | None = None,
    *,
    model: dict | str | None = GUIDE_MODEL,
    role: str = "prefill",
    pod_ip: str | None = None,
    **node: Any,
) -> scriptrun.Run:
    """The role's entry script, rendered with `overrides`, run on a node holding `model`."""
    rendered = render(overrides=overrides)
    template = rendered.role(role)["entryTemplate"]
    env = engines.container_env(template["spec"]["containers"][0], engines.PodIdentity("deepseek-pd", 0, role, 0))
    if pod_ip:
        env["POD_IP"] = pod_ip
    text = json.dumps(model) if isinstance(model, dict) else model
    return engines.run_script(rendered.objects, template, env, engines.Node(model_config=text, **node))


def refusal(render: Renderer, overrides: dict[str, Any] | None = None, **kwargs: Any) -> str:
    """The preflight's refusal: exit 78 before vLLM, one line, the same in the termination log."""
    with pytest.raises(scriptrun.ScriptFailed) as failed:
        run(render, overrides, **kwargs)
    assert failed.value.returncode == EX_CONFIG, failed.value.stderr
    line = failed.value.termination_log.strip()
    assert line.startswith("mooncake-pd preflight: ") and "\n" not in line
    assert line in failed.value.stderr
    return line


def hf_overrides(result: scriptrun.Run) -> Any:
    return scriptrun.parse_serve_argv(result.argv, scriptrun.JSON_FLAGS)["flags"].get("hf-overrides")


def test_the_guides_model_gives_the_guides_flag(render: Renderer):
    result = run(render)
    assert hf_overrides(result) == {"head_dim": 128}
    summary = [line for line in result.stderr.splitlines() if "preflight: ok" in line]
    assert len(summary) == 1
    assert "head_dim 128 derived (1536 // 12)" in summary[0]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (QWEN2_05B, {"head_dim": 64}),
        (LLAMA_WITH_HEAD_DIM, None),
        (nodes.config_text("/models/DeepSeek-R1"), None),
        (LLAVA, {"text_config": {"head_dim": 128}}),
    ],
    ids=["qwen2-no-head-dim", "llama-with-head-dim", "mla", "multimodal-text-config"],
)
def test_head_dim_follows_the_mounted_model(render: Renderer, model, expected):
    """Another model, no values change: its own head_dim (or none)."""
    assert hf_overrides(run(render, model=model)) == expected


def test_other_hf_overrides_are_merged(render: Renderer):
    result = run(render, {"model": {"hfOverrides": {"rope_theta": 20000}}}, model=QWEN2_05B)
    assert hf_overrides(result) == {"head_dim": 64, "rope_theta": 20000}


def test_an_explicit_head_dim_that_agrees_is_kept(render: Renderer):
    assert hf_overrides(run(render, {"model": {"hfOverrides": {"head_dim": 64}}}, model=QWEN2_05B)) == {"head_dim": 64}


@pytest.mark.parametrize(
    ("overrides", "node", "pattern"),
    [
        (
            {"model": {"hfOverrides": {"head_dim": 128}}},
            {"model": QWEN2_05B},
            r"head_dim 128 disagrees with the model \(64 = 896 // 14\), model\.hfOverrides\.head_dim, remove it",
        ),
        (
            None,
            {"model": None},
            r"cannot read the model's /models/DeepSeek-R1-Distill-Qwen-1\.5B/config\.json .*, model\.path, ",
        ),
        (
            {"prefill": {"parallelism": {"tensor": 8, "data": 2, "dataLocal": 2}}},
            {},
            r"12 attention heads are not divisible by tensor parallel 8, prefill\.parallelism\.tensor, use one of",
        ),
        (
            None,
            {"model": {**QWEN2_05B, "hidden_size": 1536, "num_attention_heads": 12, "num_key_value_heads": 3}},
            r"3 KV heads and tensor parallel 2 do not divide each other, prefill\.parallelism\.tensor",
        ),
        (
            None,
            {"model": {**QWEN2_05B, "max_position_embeddings": 32768}},
            r"max-model-len 40000 is above the model's max_position_embeddings 32768, model\.maxModelLen, "
            r"set it to at most 32768",
        ),
        (
            None,
            {"devices": 4},
            r"4 davinci devices visible, tensor x dataLocal needs 8, prefill\.parallelism, check the device plugin",
        ),
        (
            None,
            {"hccn_link": "DOWN"},
            r"NPU link down on device\(s\) 0, 1, .*, engine\.preflight\.checks\.hccn, bring the links up",
        ),
        (
            None,
            {"hccn_conf": None},
            r"/etc/hccn\.conf \(hostFiles\.hccnConf\) is missing or empty, engine\.preflight\.checks\.hccn",
        ),
    ],
    ids=[
        "head-dim-disagrees",
        "config-missing",
        "heads-not-divisible",
        "kv-heads",
        "max-model-len",
        "devices",
        "hccn-link-down",
        "hccn-conf-missing",
    ],
)
def test_refusals_name_the_cause_key_and_fix(render: Renderer, overrides, node, pattern):
    line = refusal(render, overrides, **node)
    assert re.search(pattern, line), line


def test_rope_scaling_allows_a_longer_context(render: Renderer):
    model = {**QWEN2_05B, "max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}}
    assert "max-model-len 40000 (yarn RoPE scaling allows up to 131072)" in run(render, model=model).stderr


# Qwen3-32B's config.json (max_position_embeddings 40960, no rope_scaling) and the YaRN extension
# its model card gives, as model.hfOverrides: vLLM applies the overrides before it derives the
# longest context (vllm v0.13.0 vllm/config/model.py ~2114-2140: yarn scales
# original_max_position_embeddings by factor).
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 5120,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 64,
    "max_position_embeddings": 40960,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def test_a_yarn_extension_by_hf_overrides_is_the_model_the_preflight_reads(render: Renderer):
    """The documented long-context route: model.hfOverrides.rope_scaling with max-model-len
    131072 starts (it was refused as above max_position_embeddings 40960); a factor that does not
    reach the asked length is refused naming the factor to give."""
    long = {"model": {"maxModelLen": 131072, "hfOverrides": {"rope_scaling": YARN}}}
    assert "max-model-len 131072 (yarn RoPE scaling allows up to 131072)" in run(render, long, model=QWEN3_32B).stderr
    short = {"model": {"maxModelLen": 131072, "hfOverrides": {"rope_scaling": {**YARN, "factor": 2.0}}}}
    line = refusal(render, short, model=QWEN3_32B)
    assert "max-model-len 131072 is above the 65536 tokens the model's yarn RoPE scaling reaches" in line
    assert "model.maxModelLen, set it to at most 65536, or model.hfOverrides.rope_scaling.factor to 4 or more" in line
    plain = refusal(render, {"model": {"maxModelLen": 131072}}, model=QWEN3_32B)
    assert "above the model's max_position_embeddings 40960" in plain and "model.hfOverrides.rope_scaling" in plain


@contextmanager
def listening(port: int) -> Iterator[None]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    try:
        yield
    finally:
        sock.close()


def free_port(low: int = 10000, high: int = 19000) -> int:
    """A free port below Mooncake's random range with 8 free ports after it."""
    for base in range(low, high, 50):
        try:
            for port in range(base, base + 9):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range")


@pytest.mark.parametrize(("taken", "key"), [(0, "prefill.port"), (4, "prefill.kvPort")])
def test_a_port_taken_on_the_node_is_refused(render: Renderer, taken: int, key: str):
    base = free_port()
    overrides = {"prefill": {"port": base + 8, "kvPort": base}} if taken else {"prefill": {"port": base}}
    port = base + taken
    with listening(port):
        line = refusal(render, overrides, pod_ip="127.0.0.1")
    assert f"port {port} is already in use on this node, {key}, choose a free port" in line
    assert "ports free" in run(render, overrides, pod_ip="127.0.0.1").stderr


def test_hccn_link_down_only_warns_when_asked(render: Renderer):
    result = run(render, {"engine": {"preflight": {"checks": {"hccn": "warn"}}}}, hccn_link="DOWN")
    assert "mooncake-pd preflight: warning: NPU link down" in result.stderr
    assert hf_overrides(result) == {"head_dim": 128}


HAL_MISSING = "hccn_tool: error while loading shared libraries: libascend_hal.so: cannot open shared object file"


@pytest.mark.parametrize("mode", ["refuse", "warn"])
@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            {"hccn_stdout": "", "hccn_stderr": HAL_MISSING, "hccn_exit": 1},
            f"hccn_tool -i 0 -link -g exited 1 ({HAL_MISSING})",
        ),
        ({"hccn_stdout": "Usage: hccn_tool [-i id] ...", "hccn_exit": 0}, "printed no 'link status:'"),
        # A non-zero exit is no answer even when the output looks like one.
        ({"hccn_link": "DOWN", "hccn_exit": 2}, "exited 2 (no stderr)"),
    ],
    ids=["driver-libraries-missing", "garbage", "down-but-failed"],
)
def test_hccn_tool_that_cannot_answer_is_a_warning_not_a_down_link(render: Renderer, mode, tool, expected):
    result = run(render, {"engine": {"preflight": {"checks": {"hccn": mode}}}}, **tool)
    warning = [line for line in result.stderr.splitlines() if "warning: cannot check NPU links" in line]
    assert len(warning) == 1 and expected in warning[0], result.stderr
    assert "link down" not in result.stderr
    assert "links not checked" in result.stderr
    assert hf_overrides(result) == {"head_dim": 128}, "the engine starts"


def test_checks_switch_off(render: Renderer):
    checks = {"model": False, "ports": True, "devices": False, "hccn": "off"}
    result = run(render, {"engine": {"preflight": {"checks": checks}}}, model=None, devices=0, hccn_conf=None)
    assert hf_overrides(result) is None, "without the model read, no head_dim is derived"


def test_preflight_off_passes_model_hf_overrides_as_they_are(render: Renderer):
    overrides = {"engine": {"preflight": {"enabled": False}}, "model": {"hfOverrides": {"head_dim": 128}}}
    rendered = render(overrides=overrides)
    assert "preflight.py" not in rendered.one("ConfigMap")["data"]
    assert "preflight" not in rendered.one("ConfigMap")["data"]["prefill.sh"].split("set -euo pipefail")[1]
    assert hf_overrides(run(render, overrides, model=None, devices=0, hccn_conf=None)) == {"head_dim": 128}


def test_engine_pods_report_the_refusal_as_their_termination_message(render: Renderer):
    rendered = render()
    for role in ("prefill", "decode"):
        container = rendered.container(role)
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert {
            "name": "scripts",
            "mountPath": "/workspace/preflight.py",
            "subPath": "preflight.py",
            "readOnly": True,
        } in (container["volumeMounts"])
    annotations = rendered.role("prefill")["entryTemplate"]["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/preflight"])


def test_worker_pods_check_their_own_kv_ports(render: Renderer):
    """A worker binds no serving or DP-RPC port, and the kv side channels of its own DP ranks."""
    base = free_port()
    values = {
        "decode": {
            "workerReplicas": 1,
            "kvPort": base,
            "port": 7101,
            "parallelism": {"tensor": 1, "data": 4, "dataLocal": 2},
        }
    }
    rendered = render(overrides=values)
    role = rendered.role("decode")
    pod = engines.PodIdentity("deepseek-pd", 0, "decode", 0, 1, workers=1)
    env = {**engines.container_env(role["workerTemplate"]["spec"]["containers"][0], pod), "POD_IP": "127.0.0.1"}
    node = engines.Node(model_config=GUIDE_MODEL)
    with listening(base + 1):  # the entry's second rank: not this worker's
        engines.run_script(rendered.objects, role["workerTemplate"], env, node)
    # This worker's first rank (global DP rank 2):
    with listening(base + 2), pytest.raises(scriptrun.ScriptFailed) as failed:
        engines.run_script(rendered.objects, role["workerTemplate"], env, node)
    assert f"port {base + 2} is already in use on this node, decode.kvPort" in failed.value.termination_log


def test_verify_shows_the_refusal_as_the_reason(render: Renderer):
    line = refusal(render, model={**QWEN2_05B, "max_position_embeddings": 32768})
    modelserving = render().modelserving
    pods = [
        {
            "metadata": {
                "name": "deepseek-pd-0-prefill-0-0",
                "labels": engines.PodIdentity("deepseek-pd", 0, "prefill", 0).labels(),
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {"name": "prefill", "lastState": {"terminated": {"exitCode": EX_CONFIG, "message": line + "\n"}}}
                ],
            },
        }
    ]
    (check,) = [
        c for c in verify.readiness_checks(verify.Snapshot(modelserving, pods, None, {})) if "prefill" in c.name
    ]
    assert not check.ok
    assert check.detail.endswith(f"deepseek-pd-0-prefill-0-0: {line}")


@pytest.mark.parametrize("program", ["preflight.py", "engine_args.py", "kv_transfer_config.py"])
def test_the_start_scripts_helpers_are_python_3_8(program: str):
    """The helpers a start script runs with the image's own python3 promise Python 3.8+ (their
    docstrings): their grammar is 3.8's (ruff formats for 3.10 and would write, for instance,
    parenthesized context managers, a 3.9 grammar). Library calls newer than 3.8 this does not see."""
    source = (paths.CHART / "files" / program).read_text()
    ast.parse(source, filename=program, feature_version=(3, 8))


def test_a_scripts_python3_is_this_python_without_site():
    """The start scripts' own helpers (preflight.py, the engine_id edit) need only the standard
    library: run here, their `python3` is the tool's own Python without site packages, whatever
    python3 comes first on PATH, so a helper that needs a site package fails here."""
    script = (
        "set -euo pipefail\n"
        "seen=\"$(python3 -c 'import sys; print(sys.executable, sys.flags.no_site)')\"\n"
        "if python3 -c 'import yaml' 2>/dev/null; then site=yes; else site=no; fi\n"
        'exec vllm serve m --seen "$seen" --site "$site"\n'
    )
    run = scriptrun.run(script, {})
    assert run.argv == ["serve", "m", "--seen", f"{sys.executable} 1", "--site", "no"]


def test_a_nic_the_node_lacks_is_refused_naming_network_interface(render: Renderer):
    """Issue #27 item 2: the guide's enp23s0f3 on a node whose NIC is another is refused at start,
    naming network.interface and the NICs the node has, instead of HCCL/NCCL/Gloo failing at their
    first collective."""
    line = refusal(render, nics=("lo", "eth0"))
    assert "network interface 'enp23s0f3' (GLOO_SOCKET_IFNAME) is not on this node (it has: eth0, lo)" in line
    assert ", network.interface, " in line
    run(render, nics=("lo", "enp23s0f3"))  # the guide's node: passes
    # Off, and where /sys/class/net cannot be read (a warning), it is not checked.
    run(render, {"engine": {"preflight": {"checks": {"network": False}}}}, nics=("lo",))
    assert "NIC enp23s0f3 not checked" in run(render).stderr


# accelerator.rdma (multi-node NVIDIA): the preflight checks the node's RDMA devices.
NVIDIA_RDMA = {
    "accelerator": {"type": "nvidia", "rdma": {"enabled": True}},
    "prefill": {"args": {"additional-config": None}},
    "decode": {"args": {"additional-config": None}},
}
MOUNTED_RDMA = {
    **NVIDIA_RDMA,
    "accelerator": {"type": "nvidia", "rdma": {"enabled": True, "resource": "", "mountInfiniband": True}},
    "engine": {"securityContext": {"privileged": True, "allowPrivilegeEscalation": True}},
}


def rdma_run(render: Renderer, overrides: dict[str, Any], infiniband: list[str] | None) -> scriptrun.Run:
    """Prefill's entry script on a node whose /dev/infiniband holds `infiniband` (None: no
    such folder), besides the GPUs the device plugin mounts."""
    rendered = render(overrides=overrides)
    template = rendered.role("prefill")["entryTemplate"]
    container = template["spec"]["containers"][0]
    env = engines.container_env(container, engines.PodIdentity("deepseek-pd", 0, "prefill", 0))
    node = engines.Node(infiniband=None if infiniband is None else tuple(infiniband))
    files = engines.node_files(container, env, node)
    return scriptrun.run(
        engines.script_of(rendered.objects, template),
        env,
        beside=engines.beside_script(rendered.objects, template),
        node=files,
    )


def rdma_refusal(render: Renderer, overrides: dict[str, Any], infiniband: list[str] | None) -> str:
    with pytest.raises(scriptrun.ScriptFailed) as failed:
        rdma_run(render, overrides, infiniband)
    assert failed.value.returncode == EX_CONFIG, failed.value.stderr
    line = failed.value.termination_log.strip()
    assert line.startswith("mooncake-pd preflight: ") and "\n" not in line and line in failed.value.stderr
    return line


def test_rdma_devices_on_the_node_pass(render: Renderer):
    result = rdma_run(render, NVIDIA_RDMA, ["rdma_cm", "umad0", "uverbs0", "uverbs1"])
    summary = next(line for line in result.stderr.splitlines() if "preflight: ok" in line)
    assert "RDMA: 2 uverbs devices (uverbs0, uverbs1)" in summary
    assert result.env["NCCL_IB_DISABLE"] == "0"


@pytest.mark.parametrize(
    ("overrides", "infiniband", "pattern"),
    [
        (
            NVIDIA_RDMA,
            None,
            r"/dev/infiniband is missing with accelerator\.rdma on \(RDMA devices from the device plugin's "
            r"rdma/rdma_shared_device_a\), accelerator\.rdma\.resource, check that the RDMA device plugin runs "
            r"on this node",
        ),
        (
            NVIDIA_RDMA,
            ["rdma_cm", "umad0"],
            r"/dev/infiniband has no uverbs device with accelerator\.rdma on \(it has: rdma_cm, umad0\), "
            r"accelerator\.rdma\.resource, ",
        ),
        (
            MOUNTED_RDMA,
            [],
            r"/dev/infiniband is missing with accelerator\.rdma on \(RDMA devices from the node's /dev/infiniband, "
            r"mounted\), accelerator\.rdma\.mountInfiniband, load the node's RDMA drivers",
        ),
    ],
    ids=["no-infiniband", "no-uverbs", "mounted-none"],
)
def test_rdma_without_devices_is_refused(render: Renderer, overrides, infiniband, pattern):
    assert re.search(pattern, rdma_refusal(render, overrides, infiniband))


def test_rdma_off_checks_no_rdma_device(render: Renderer):
    """The same node without /dev/infiniband passes with accelerator.rdma off (the default)."""
    result = rdma_run(render, {**NVIDIA_RDMA, "accelerator": {"type": "nvidia"}}, None)
    assert "RDMA" not in result.stderr and "NCCL_IB_DISABLE" not in result.env


def test_rdma_checks_switch_off_with_the_device_check(render: Renderer):
    off = {**NVIDIA_RDMA, "engine": {"preflight": {"checks": {"devices": False}}}}
    assert "RDMA" not in rdma_run(render, off, None).stderr


def preflight_module() -> Any:
    from mooncake_pd import chartfiles

    return chartfiles.program("preflight")


def test_an_rdma_device_the_runtime_refuses_is_refused(tmp_path, monkeypatch):
    """A mounted /dev/infiniband that the devices cgroup does not allow (no device plugin, not
    privileged): EPERM on open."""
    preflight = preflight_module()
    (tmp_path / "dev" / "infiniband").mkdir(parents=True)
    (tmp_path / "dev" / "infiniband" / "uverbs0").write_text("")
    monkeypatch.setenv("MOONCAKE_PD_ROOT", str(tmp_path))
    monkeypatch.setattr(preflight, "open_device", lambda path: PermissionError(1, "Operation not permitted"))
    with pytest.raises(preflight.Refusal) as refused:
        preflight.check_rdma({"resource": "", "mountInfiniband": True}, [])
    assert re.search(
        r"/dev/infiniband/uverbs0 cannot be opened \(Operation not permitted\): .*, "
        r"accelerator\.rdma\.mountInfiniband, give the devices through the RDMA device plugin",
        str(refused.value),
    )


@pytest.mark.parametrize(
    ("cap_eff", "memlock", "warned"),
    [
        ("0000000000000000", "65536", True),
        ("0000000000004000", "65536", False),  # CAP_IPC_LOCK (bit 14)
        ("0000000000000000", "unlimited", False),
    ],
    ids=["neither", "ipc-lock", "unlimited"],
)
def test_rdma_warns_when_memory_cannot_be_pinned(tmp_path, monkeypatch, cap_eff, memlock, warned):
    preflight = preflight_module()
    (tmp_path / "dev" / "infiniband").mkdir(parents=True)
    (tmp_path / "dev" / "infiniband" / "uverbs0").write_text("")
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "status").write_text(f"Name:\tpython3\nCapEff:\t{cap_eff}\n")
    (tmp_path / "proc" / "self" / "limits").write_text(
        f"Limit                     Soft Limit           Hard Limit           Units\n"
        f"Max locked memory         {memlock}            {memlock}            bytes\n"
    )
    monkeypatch.setenv("MOONCAKE_PD_ROOT", str(tmp_path))
    warnings: list[str] = []
    assert (
        preflight.check_rdma({"resource": "rdma/hca_shared_devices_a"}, warnings) == "RDMA: 1 uverbs device (uverbs0)"
    )
    assert bool([w for w in warnings if "memlock limit of 65536 bytes" in w]) == warned


# Mooncake's transfer engine: the preflight imports it as the connector will (profiles.yaml
# transferEngine), so a shared library the image or node lacks is refused by name at start.
NVIDIA_NIXL = {"accelerator": {"type": "nvidia"}, "decode": {"args": {"additional-config": None}}}


@pytest.mark.parametrize(
    ("transfer_engine", "pattern"),
    [
        (
            "libibverbs.so.1",
            r"cannot load libibverbs\.so\.1 .*, kvTransfer\.connector, run an engine image that carries",
        ),
        (None, r"\(mooncake\.engine\) does not import \(.*No module named 'mooncake'\), kvTransfer\.connector"),
    ],
)
def test_a_transfer_engine_that_does_not_load_is_refused_naming_what_is_missing(
    render: Renderer, transfer_engine: str | None, pattern: str
):
    assert re.search(pattern, refusal(render, transfer_engine=transfer_engine))


def test_the_transfer_engine_check_switches_off_and_skips_connectors_without_mooncake(render: Renderer):
    checks = {"model": True, "network": True, "ports": True, "devices": True, "hccn": "refuse", "transferEngine": False}
    assert run(render, {"engine": {"preflight": {"checks": checks}}}, transfer_engine=None).argv
    assert "mooncake.engine loads" in run(render).stderr
    nixl = run(render, NVIDIA_NIXL, transfer_engine=None)
    assert "mooncake.engine" not in nixl.stderr


@pytest.mark.parametrize("version", ["0.3.7.post2", "0.3.13.post1"])
def test_the_real_transfer_engine_is_refused_without_libibverbs_and_loads_with_it(version: str, tmp_path):
    """The real wheel (scripts/install-mooncake.sh: vLLM-Ascend v0.13.0's release and the newest)
    in the e2e image's Python: without the folder holding libibverbs.so.1 the loader fails and the
    preflight names the library; with it, the import passes. Only the transfer-engine check runs."""
    import os
    import subprocess

    from mooncake_pd import paths
    from support.localpods import E2E_VENV
    from support.pdcheck import MOONCAKE_TOOLS

    if not (MOONCAKE_TOOLS / ".installed").exists():
        pytest.fail(f"Mooncake's transfer engine is missing ({MOONCAKE_TOOLS}): run scripts/install-mooncake.sh")
    settings = {
        "role": "prefill",
        "checks": {"model": False, "network": False, "ports": False, "devices": False, "hccn": "off"},
        "transferEngine": "mooncake.engine",
        "terminationLog": str(tmp_path / "termination-log"),
    }
    argv = [str(E2E_VENV / "bin" / "python3"), str(paths.CHART / "files" / "preflight.py"), json.dumps(settings)]
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(MOONCAKE_TOOLS / version)}
    bare = subprocess.run(argv, env=base, capture_output=True, text=True, timeout=120)
    assert bare.returncode == EX_CONFIG, bare.stderr
    assert "cannot load libibverbs.so.1" in bare.stderr and "kvTransfer.connector" in bare.stderr
    fitted = subprocess.run(
        argv, env={**base, "LD_LIBRARY_PATH": str(MOONCAKE_TOOLS / "lib")}, capture_output=True, text=True, timeout=120
    )
    assert fitted.returncode == 0 and "mooncake.engine loads" in fitted.stderr, fitted.stderr
