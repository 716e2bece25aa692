"""Runtime conformance: the rendered chart in the conditions its processes run in, with the real
upstream packages rather than stubs (`make conformance`; `make test` runs it too).

- Every CPU-only Python container the chart starts (PD proxy, model download, helm test,
  benchmark) runs from an image that has torch_npu installed but, without an NPU, no Ascend
  driver. The conformance venv (.tools/conformance) reproduces that: CPU torch beside
  torch_npu==2.8.0.post2 and no driver. Each container's imports run there with exactly its
  rendered env.
- The download container's revision goes through ModelScope's own revision check.
- The start scripts of a multi-node role run per node, and their command lines parse against
  vLLM 0.13.0's option list.
- The rendered NetworkPolicies admit the connections the data path makes.

What it cannot prove: that vLLM, vLLM-Ascend or Mooncake start (no NPU, no image here), that a
CNI enforces the policies, or anything that needs a cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import netpol
from conftest import Rendered, Renderer
from mooncake_pd import engines, paths, validate, vllmflags

pytestmark = pytest.mark.conformance

VENV_PYTHON = paths.TOOLS_DIR / "conformance" / "bin" / "python"
TORCH_NPU_FAILURE = "Failed to load the backend extension: torch_npu"
ACCELERATORS = ("huawei.com/ascend-1980", "huawei.com/Ascend910", "nvidia.com/gpu")

DOWNLOAD = {"model": {"storage": {"type": "download", "claimName": "models"}, "download": {"repo": "org/model"}}}
SCENARIOS = {
    "defaults": {},
    "nvidia": {"accelerator": {"type": "nvidia"}, "decode": {"args": {"additional-config": None}}},
    "ascend-a2": {"accelerator": {"type": "ascend-a2"}},
    "kthena-router": {"router": {"type": "kthena"}, "decode": {"port": 7100}},
    "download-huggingface": DOWNLOAD,
    "download-modelscope": {
        "model": {**DOWNLOAD["model"], "download": {"repo": "org/model", "hub": "modelscope"}},
    },
    "benchmark": {"benchmark": {"enabled": True}},
}


@pytest.fixture(scope="module")
def python() -> Path:
    if not VENV_PYTHON.exists():
        pytest.fail("the conformance venv is missing: run `make conformance` (or `make tools`)")
    return VENV_PYTHON


def run_python(python: Path, code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python -c code` with exactly `env`, plus the PATH and HOME any process gets. A run is a
    function of its code and env: identical containers (helm 3 and 4 render the same) share one."""
    return _run(str(python), code, json.dumps(env, sort_keys=True))


@cache
def _run(python: str, code: str, env: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "HOME": "/tmp"}
    return subprocess.run(
        [python, "-c", code], env={**base, **json.loads(env)}, capture_output=True, text=True, check=False
    )


def _pod_specs(rendered: Rendered) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for obj in rendered.objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "Pod":
            specs.append((f"Pod/{name}", obj["spec"]))
        elif kind in ("Deployment", "Job"):
            specs.append((f"{kind}/{name}", obj["spec"]["template"]["spec"]))
        elif kind == "ModelServing":
            specs += [(label, pod["spec"]) for label, pod in validate.pod_templates(obj)]
    return specs


def starts_python(container: dict[str, Any]) -> bool:
    """The container runs python3, or vllm (a Python program), directly or from a shell script."""
    command = container.get("command") or [""]
    script = " ".join(container.get("args") or []) if command[0].endswith("bash") else ""
    return command[0].startswith("python") or bool(re.search(r"\b(python3|vllm) ", script))


def cpu_python_containers(rendered: Rendered) -> list[tuple[str, dict[str, Any]]]:
    """(where, container) for every container that starts Python and gets no accelerator."""
    found = []
    for where, spec in _pod_specs(rendered):
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            limits = (container.get("resources") or {}).get("limits") or {}
            if starts_python(container) and not set(limits) & set(ACCELERATORS):
                found.append((f"{where} container {container['name']}", container))
    return found


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's env as Kubernetes gives it; references resolve to a stand-in value."""
    return {e["name"]: e.get("value", "from-a-reference") for e in container.get("env", [])}


def imports_of(container: dict[str, Any]) -> list[str]:
    """What the container's Python imports that can pull in torch: every one of them imports
    torch through vllm (the proxy: `from vllm.logger import init_logger`, vllm/__init__.py ->
    env_override.py `import torch`; the benchmark: the `vllm` command) or through its hub client."""
    env = container_env(container)
    if "DOWNLOAD_HUB" in env:
        return ["torch", "modelscope" if env["DOWNLOAD_HUB"] == "modelscope" else "huggingface_hub"]
    return ["torch"]


def test_the_venv_reproduces_the_npu_less_pod(python: Path):
    """Control: without the chart's env, `import torch` and `import modelscope` fail exactly as
    in a pod of the vLLM-Ascend image that has no NPU (vllm-ascend issue #1440)."""
    for module in ("torch", "modelscope"):
        proc = run_python(python, f"import {module}", {})
        assert proc.returncode != 0, f"import {module} passed: the venv does not reproduce the pod"
        assert TORCH_NPU_FAILURE in proc.stderr, proc.stderr[-2000:]
    assert run_python(python, "import huggingface_hub, sys; assert 'torch' not in sys.modules", {}).returncode == 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_cpu_python_container_gets_past_its_imports(render: Renderer, python: Path, scenario: str):
    rendered = render(overrides=SCENARIOS[scenario])
    containers = cpu_python_containers(rendered)
    names = {c["name"] for _, c in containers}
    assert "chat" in names
    assert ("proxy" in names) == (scenario != "kthena-router")
    assert ("download-model" in names) == scenario.startswith("download")
    assert ("bench" in names) == (scenario == "benchmark")
    for where, container in containers:
        for module in imports_of(container):
            proc = run_python(python, f"import {module}", container_env(container))
            assert proc.returncode == 0, f"{where}: import {module} fails with its env:\n{proc.stderr[-2000:]}"


# ModelScope's own revision check (modelscope 1.33 hub/api.py get_valid_revision_detail) against a
# repository that has only ModelScope's default branch, as most do.
REVISION_CHECK = """
import os
from modelscope.hub.api import HubApi
api = HubApi()
api.get_model_branches_and_tags_details = lambda *a, **k: ([{"Revision": "master", "CreatedAt": 0}], [])
print(api.get_valid_revision_detail(os.environ["DOWNLOAD_REPO"], revision=os.environ["DOWNLOAD_REVISION"]))
"""


@pytest.mark.parametrize(("hub", "revision"), [("modelscope", "master"), ("huggingface", "main")])
def test_download_asks_for_the_hubs_default_branch(render: Renderer, python: Path, hub: str, revision: str):
    overrides = {"model": {**DOWNLOAD["model"], "download": {"repo": "org/model", "hub": hub}}}
    rendered = render(overrides=overrides)
    downloads = [c for _, c in cpu_python_containers(rendered) if c["name"] == "download-model"]
    assert len(downloads) == 2  # one in each role's pods
    env = container_env(downloads[0])
    assert env["DOWNLOAD_REVISION"] == revision
    if hub == "modelscope":
        proc = run_python(python, REVISION_CHECK, env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # The chart's old default, main, is what ModelScope refuses.
        refused = run_python(python, REVISION_CHECK, {**env, "DOWNLOAD_REVISION": "main"})
        assert "NotExistError" in refused.stderr
    else:
        code = (
            "import os; from huggingface_hub import constants; "
            "assert os.environ['DOWNLOAD_REVISION'] == constants.DEFAULT_REVISION"
        )
        assert run_python(python, code, env).returncode == 0


MULTI_NODE = (
    paths.VALUES_DIR / "deepseek-r1-w8a8-a3-2p1d-multinode.yaml",
    paths.CHART / "ci" / "multinode-values.yaml",
)


@pytest.mark.parametrize("values", MULTI_NODE, ids=lambda p: p.stem)
def test_multi_node_role_scripts_per_node(render: Renderer, values: Path):
    """Each node of a multi-node role gets its own engine_id and the DP flags vLLM expects, and
    every command line parses against vLLM 0.13.0's options."""
    rendered = render((values,))
    for role in rendered.modelserving["spec"]["template"]["roles"]:
        workers = role["workerReplicas"]
        ids = set()
        for index in range(workers + 1):
            pod = engines.PodIdentity("deepseek-pd", 0, role["name"], 0, index, workers=workers)
            template = role["workerTemplate"] if index else role["entryTemplate"]
            run = engines.run_template(rendered.objects, template, pod)
            assert vllmflags.check_argv(run.run.argv[2:]) == [], run.run.argv
            flags = run.serve["flags"]
            ids.add(flags["kv-transfer-config"]["engine_id"])
            if workers:
                local = int(flags["data-parallel-size-local"])
                assert flags["data-parallel-address"] == f"deepseek-pd-0-{role['name']}-0-0.default"
                assert int(flags.get("data-parallel-start-rank", 0)) == index * local
                assert ("headless" in flags) == (index > 0)
        assert len(ids) == workers + 1, f"{role['name']}: engine_ids {ids} are not one per node"


ENGINE = {"app.kubernetes.io/name": "mooncake-pd", "app.kubernetes.io/instance": "deepseek-pd"}


def _policies(rendered: Rendered) -> list[dict[str, Any]]:
    policies = rendered.find("NetworkPolicy")
    assert policies
    return policies


@pytest.mark.parametrize("port", [7100, 12321, 18003, 20345, 35555, 5600, 41000])
def test_network_policy_admits_the_engine_data_path(render: Renderer, port: int):
    """Engine to engine on any port: serving, DP RPC, kv side channels, and the ports opened at
    random (Mooncake's transfer-engine RPC, NIXL/UCX, DP's ZMQ and TCPStore)."""
    policies = _policies(render(overrides={"networkPolicy": {"enabled": True}}))
    prefill = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "prefill"})
    decode = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "decode"})
    assert netpol.allowed(policies, decode, prefill, port)
    assert netpol.allowed(policies, prefill, decode, port)


@pytest.mark.parametrize("router", ["proxy", "kthena"])
def test_network_policy_admits_the_router_and_nobody_else(render: Renderer, router: str):
    overrides: dict[str, Any] = {"networkPolicy": {"enabled": True}, "router": {"type": router}}
    if router == "kthena":
        overrides["decode"] = {"port": 7100}
    policies = _policies(render(overrides=overrides))
    prefill = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "prefill"})
    if router == "proxy":
        client = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "proxy"})
        proxy = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "proxy"})
        test_pod = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "test"})
        assert netpol.allowed(policies, test_pod, proxy, 8080)
    else:
        client = netpol.Pod({"app.kubernetes.io/component": "kthena-router"}, namespace="kthena-system")
    stranger = netpol.Pod({"app": "other"})
    assert netpol.allowed(policies, client, prefill, 7100)
    assert not netpol.allowed(policies, client, prefill, 18000)
    assert not netpol.allowed(policies, stranger, prefill, 7100)
    assert not netpol.allowed(policies, stranger, prefill, 18000)
