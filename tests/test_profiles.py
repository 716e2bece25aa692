"""The accelerator profiles are data (chart/files/profiles.yaml): a profile of a new family added
to a copy of the chart renders with its own device resource, device pattern, NIC variables and
connector, with no template touched; a row missing a field is refused naming it, by the chart
and by the tooling alike; and what the tooling, schema and docs say of the profiles is read
from the same file."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Renderer
from mooncake_pd import engines, helm, manifests, paths, profiles, scriptrun

# A made-up family: Google TPUs as the device plugin offers them (google.com/tpu, /dev/accelN),
# moving the KV cache with NIXL in host memory. Nothing in the templates knows it.
TPU_ROW = {
    "description": "a made-up TPU node",
    "family": "tpu",
    "resourceName": "google.com/tpu",
    "devicesPerNode": 8,
    "deviceMemoryGiB": 16,
    "devicePattern": "accel",
    "engineVersion": "v0.13.0",
    "imageTag": None,
    "deviceVariants": {},
    "handWritten": None,
    "hostResources": {
        "per": "device",
        "requests": {"cpu": "3", "memory": "12Gi"},
        "limits": {"cpu": "6500m", "memory": "48Gi"},
    },
}
TPU_FAMILY = {
    "connectors": ["NixlConnector"],
    "kvBufferDevices": {"allowed": ["cpu"], "default": "cpu", "refusal": "has no CUDA device"},
    "nic": {
        "comment": "Gloo sockets use the pod's NIC.",
        "addressEnv": ["TPU_HOST_IP"],
        "interfaceEnv": ["GLOO_SOCKET_IFNAME"],
    },
    "hostMounts": [{"name": "tpu-env", "mountPath": "/etc/tpu-env", "hostFile": "tpuEnv"}],
    "settingsEnv": False,
    "valuesEnv": {},
    "hostKvCacheKey": "",
    "recomputeScheduler": False,
    "proxyInEngineImage": False,
    "benchmarkInEngineImage": True,
    "additionalConfig": False,
    "hostNetwork": {"default": False, "required": ""},
}
TPU_IMAGE = {"repository": "example.com/vllm-tpu", "tag": "v0.13.0"}
TPU_VALUES = {
    "accelerator": {"type": "tpu-v5e"},
    "hostFiles": {"tpuEnv": "/etc/tpu-env"},
    "decode": {"args": {"additional-config": None, "compilation-config": None}},
    "prefill": {"args": {"additional-config": None}},
}


def chart_with(tmp_path: Path, edit) -> Path:
    """A copy of the chart whose profiles.yaml `edit` changed, with the schema's enum of
    accelerator.type following it (what `make schema` writes)."""
    chart = tmp_path / "chart"
    shutil.copytree(paths.CHART, chart)
    table = yaml.safe_load(profiles.profiles_file(chart).read_text())
    edit(table)
    profiles.profiles_file(chart).write_text(yaml.safe_dump(table, sort_keys=False))
    schema_path = chart / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"]["accelerator"]["properties"]["type"]["enum"] = list(table["accelerators"])
    schema["properties"]["hostFiles"]["additionalProperties"] = {"type": "string"}
    schema_path.write_text(json.dumps(schema))
    return chart


def add_tpu(table: dict[str, Any]) -> None:
    table["accelerators"]["tpu-v5e"] = copy.deepcopy(TPU_ROW)
    table["families"]["tpu"] = copy.deepcopy(TPU_FAMILY)
    table["engines"]["v0.13.0"]["images"]["tpu-v5e"] = dict(TPU_IMAGE)


@pytest.fixture(scope="module")
def tpu_chart(tmp_path_factory) -> Path:
    return chart_with(tmp_path_factory.mktemp("tpu"), add_tpu)


def preflight_settings(script: str) -> dict[str, Any]:
    quoted = re.search(r"preflight\.py\" '(.*?)'\)\"", script)
    assert quoted, script
    return json.loads(quoted.group(1))


def test_a_profile_of_a_new_family_renders_from_data_alone(render: Renderer, tpu_chart: Path):
    objects = manifests.parse(helm.template(render.binary, set_json=TPU_VALUES, chart=tpu_chart))
    modelserving = manifests.one(objects, "ModelServing")
    prefill = manifests.role(modelserving, "prefill")["entryTemplate"]
    container = prefill["spec"]["containers"][0]
    assert container["image"] == "example.com/vllm-tpu:v0.13.0"
    # Devices: tensor x dataLocal of the guide's topology (2 x 4), of this family's resource.
    assert container["resources"]["limits"]["google.com/tpu"] == "8"
    assert not any(k.startswith(("huawei.com/", "nvidia.com/")) for k in container["resources"]["limits"])
    # Host CPU and memory per device of the row, times the 8 devices; the pod network by default.
    assert container["resources"]["requests"] == {"cpu": "24", "memory": "96Gi", "google.com/tpu": "8"}
    assert container["resources"]["limits"] == {"cpu": "52", "memory": "384Gi", "google.com/tpu": "8"}
    assert "hostNetwork" not in prefill["spec"]
    # Its host mounts, not Ascend's.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts.get("tpu-env") == "/etc/tpu-env" and "hccn-conf" not in mounts
    volume = next(v for v in prefill["spec"]["volumes"] if v["name"] == "tpu-env")
    assert volume["hostPath"] == {"path": "/etc/tpu-env", "type": "File"}
    script = engines.script_of(objects, prefill)
    # Its NIC variables and connector (the family's first: NIXL, host-memory buffer).
    assert 'export TPU_HOST_IP="${POD_IP}"' in script
    assert "export GLOO_SOCKET_IFNAME='enp23s0f3'" in script
    assert "HCCL" not in script and "NCCL_SOCKET_IFNAME" not in script
    assert "export VLLM_NIXL_SIDE_CHANNEL_PORT='18000'" in script
    assert '"kv_connector":"NixlConnector"' in script and '"kv_buffer_device":"cpu"' in script
    # The preflight looks for this family's devices, not NVIDIA's.
    settings = preflight_settings(script)
    assert settings["devicePattern"] == "accel" and settings["family"] == "tpu"
    # ... and checks no NPU network: the profile mounts no hccn.conf.
    assert "hccnConf" not in settings and "hccnTool" not in settings


def test_the_new_familys_preflight_counts_its_own_device_files(render: Renderer, tpu_chart: Path):
    objects = manifests.parse(helm.template(render.binary, set_json=TPU_VALUES, chart=tpu_chart))
    prefill = manifests.role(manifests.one(objects, "ModelServing"), "prefill")["entryTemplate"]
    container = prefill["spec"]["containers"][0]
    env = engines.container_env(container, engines.PodIdentity("deepseek-pd", 0, "prefill", 0))
    script = engines.script_of(objects, prefill)
    beside = engines.beside_script(objects, prefill)
    model = {f"{env['MODEL_LOCATION']}/config.json": scriptrun.NodeFile(engines.STAND_IN_MODEL)}

    def devices(name: str) -> dict[str, scriptrun.NodeFile]:
        return {f"/dev/{name}{i}": scriptrun.NodeFile("") for i in range(8)}

    run = scriptrun.run(script, env, beside=beside, node={**model, **devices("accel")})
    assert run.argv[:2] == ["serve", env["MODEL_LOCATION"]]
    # NVIDIA's device files do not count for it.
    with pytest.raises(scriptrun.ScriptFailed) as failed:
        scriptrun.run(script, env, beside=beside, node={**model, **devices("nvidia")})
    assert "0 accel devices visible, tensor x dataLocal needs 8" in failed.value.termination_log


@pytest.mark.parametrize(
    "where",
    ["accelerators.ascend-a3.devicePattern", "families.ascend.nic", "engines.v0.13.0.connectors.NixlConnector.portEnv"],
)
def test_a_row_missing_a_field_is_refused_naming_it(render: Renderer, tmp_path: Path, where: str):
    *keys, field = re.split(r"\.(?!\d)", where)  # the version's dots are no separators

    def drop(table: dict[str, Any]) -> None:
        row = table
        for key in keys:
            row = row[key]
        del row[field]

    chart = chart_with(tmp_path, drop)
    with pytest.raises(helm.HelmError) as refused:
        helm.template(render.binary, chart=chart)
    assert f"{where}: missing" in str(refused.value)
    with pytest.raises(profiles.ProfileError, match=re.escape(f"{where}: missing")):
        profiles.load(profiles.profiles_file(chart))


def test_an_unknown_family_or_engine_version_is_refused(render: Renderer, tmp_path: Path):
    def break_rows(table: dict[str, Any]) -> None:
        table["accelerators"]["ascend-a2"]["family"] = "rocm"
        table["accelerators"]["nvidia"]["engineVersion"] = "v9.9.9"

    chart = chart_with(tmp_path, break_rows)
    with pytest.raises(helm.HelmError) as refused:
        helm.template(render.binary, chart=chart)
    message = str(refused.value)
    assert 'accelerators.ascend-a2.family: "rocm" has no row in families' in message
    assert 'accelerators.nvidia.engineVersion: "v9.9.9" has no row in engines' in message
    assert profiles.check(yaml.safe_load(profiles.profiles_file(chart).read_text()))


def test_the_chart_and_the_tooling_read_one_table():
    table = profiles.load()
    assert profiles.check(table) == []
    schema = json.loads((paths.CHART / "values.schema.json").read_text())
    assert schema["properties"]["accelerator"]["properties"]["type"]["enum"] == list(table["accelerators"])
    docs = (paths.REPO / "docs" / "models-and-accelerators.md").read_text()
    assert profiles.markdown_table() in docs, "docs/models-and-accelerators.md: run `make docs`"


def test_templates_do_not_branch_on_a_family_or_connector_name():
    """Every such fact is a field of profiles.yaml: a family or connector name compared in a
    template would be the branch a new profile silently falls through."""
    names = {*profiles.load()["families"], *profiles.load()["engines"]["v0.13.0"]["connectors"]}
    alternatives = "|".join(map(re.escape, sorted(names)))
    pattern = re.compile(r'(eq|ne|hasPrefix)[^}]*"(' + alternatives + ')"')
    offending = [
        f"{path.relative_to(paths.CHART)}: {m.group(0)}"
        for path in sorted((paths.CHART / "templates").rglob("*"))
        if path.is_file()
        for m in pattern.finditer(path.read_text())
    ]
    assert offending == []


def test_host_resources_in_a_form_the_chart_cannot_scale_are_refused(render: Renderer, tmp_path: Path):
    """hostResources are multiplied at render: whole cores or millicores, MiB/GiB/TiB, per device or
    pod; another form is refused naming the row's field, not scaled wrong."""

    def break_rows(table: dict[str, Any]) -> None:
        table["accelerators"]["nvidia"]["hostResources"]["requests"]["cpu"] = "2.5"
        table["accelerators"]["cpu"]["hostResources"]["limits"]["memory"] = "16G"
        table["accelerators"]["ascend-a2"]["hostResources"]["per"] = "node"

    chart = chart_with(tmp_path, break_rows)
    with pytest.raises(helm.HelmError) as refused:
        helm.template(render.binary, chart=chart)
    message = str(refused.value)
    assert 'accelerators.nvidia.hostResources.requests.cpu: "2.5"; write whole cores' in message
    assert 'accelerators.cpu.hostResources.limits.memory: "16G"; write MiB, GiB or TiB' in message
    assert 'accelerators.ascend-a2.hostResources.per: "node"; use device' in message
