"""Engine versions (issue #26): engine.version, or image.tag's release, selects what the chart
writes and accepts, from the version's row of profiles.yaml and its own packages' data in
chart/files/engines/<version>/. Each rule that changes with the version is tested at each
version it differs at."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import Rendered, Renderer, assert_valid
from mooncake_pd import engines, generate, paths, profiles, summary, topology, vllmflags
from mooncake_pd import model as modelmod
from mooncake_pd.commands import engines as engines_command

VERSIONS = list(profiles.load()["engines"])
ASCEND = ("v0.13.0", "v0.18.0", "v0.23.0")
# Your null removes the guide's decode finegrained TP (decode.guideArgs) at every version; where
# the version refuses it the chart drops it itself (below).
NO_FINEGRAINED = {"decode": {"args": {"additional-config": {"finegrained_tp_config": None}}}}
NVIDIA = {
    "accelerator": {"type": "nvidia"},
    "prefill": {"args": {"additional-config": None}},
    "decode": {"args": {"additional-config": None}},
}


def flag(argv: list[str], name: str) -> str | None:
    """The value after `name` in a command line, or None."""
    return argv[argv.index(name) + 1] if name in argv else None


V0_33 = {"engine": {"version": "v0.33.0"}}


def at(version: str, **extra) -> dict:
    return {"engine": {"version": version}, **NO_FINEGRAINED, **extra}


def kv_configs(rendered: Rendered) -> dict[str, dict]:
    """Each role's --kv-transfer-config as its start script passes it (engine_id added)."""
    return {
        run.role: json.loads(flag(run.run.argv, "--kv-transfer-config") or "{}")
        for run in engines.entry_runs(rendered.objects)
    }


def test_every_version_has_its_packages_data():
    for version, row in profiles.load()["engines"].items():
        folder = paths.ENGINE_DATA / version
        names = {p.name for p in folder.iterdir()}
        expected = {"SOURCE.md", *engines_command.FILES}
        assert names == expected | ({"vllm-ascend.json"} if row["vllmAscend"] else set()), version
        assert json.loads((folder / "serve-flags.json").read_text())["vllm"] == row["vllm"]
        assert f"vllm-{row['vllm']}-" in (folder / "SOURCE.md").read_text()


def test_the_default_is_the_guides_version(render: Renderer):
    rendered = render()
    assert rendered.modelserving["metadata"]["annotations"]["mooncake-pd/engine-version"] == "v0.13.0"
    configs = kv_configs(rendered)
    assert configs["prefill"]["kv_connector_module_path"] == "vllm_ascend.distributed.mooncake_connector"


def test_the_proxys_services_reach_only_pods_of_their_own_engine_version(render: Renderer):
    """During a rollout from one version to another the pods of both exist: each render's replica
    Services (the proxy's and the KV canary's hosts) select its own version's pods and never the
    other's, so the proxy cannot pair a prefill and a decode of two versions."""
    cpu = (paths.VALUES_DIR / "qwen2.5-0.5b-instruct-cpu-1p1d.yaml",)
    renders = {v: render(cpu, {"engine.version": v}) for v in ("v0.13.0", "v0.23.0")}

    def pod_labels(rendered: Rendered, role: str, group: int = 0, replica: int = 0) -> dict[str, str]:
        # The entry pod's labels as Kthena sets them beside the template's (engines.PodIdentity).
        pod = engines.PodIdentity("deepseek-pd", group, role, replica)
        return {**rendered.role(role)["entryTemplate"]["metadata"]["labels"], **pod.labels()}

    for version, rendered in renders.items():
        services = [s for s in rendered.find("Service") if "role-id" in str(s["spec"]["selector"])]
        assert len(services) == 2, [s["metadata"]["name"] for s in services]
        for service in services:
            selector = service["spec"]["selector"]
            role = selector["modelserving.volcano.sh/role"]
            for other, pods in renders.items():
                matches = all(pod_labels(pods, role).get(k) == v for k, v in selector.items())
                assert matches == (other == version), (service["metadata"]["name"], version, other)


@pytest.mark.parametrize("version", ("v0.18.0", "v0.23.0"))
def test_a_release_tag_selects_its_version(render: Renderer, crds, version: str):
    """image.tag v0.23.0-a3 alone: that version's image, no stale module path (the module moved in
    v0.18.0, and vLLM 0.23 imports it first), and the recompute scheduler where it applies."""
    rendered = render(overrides={"image": {"tag": f"{version}-a3"}, **NO_FINEGRAINED})
    assert_valid(rendered, crds)
    assert rendered.container("prefill")["image"] == f"quay.io/ascend/vllm-ascend:{version}-a3"
    assert rendered.modelserving["metadata"]["annotations"]["mooncake-pd/engine-version"] == version
    assert rendered.role("decode")["entryTemplate"]["metadata"]["labels"]["mooncake-pd/engine-version"] == version
    configs = kv_configs(rendered)
    assert all("kv_connector_module_path" not in c for c in configs.values())
    recompute = {
        run.role: "recompute_scheduler_enable" in json.loads(flag(run.run.argv, "--additional-config") or "{}")
        for run in engines.entry_runs(rendered.objects)
    }
    assert recompute == {"prefill": version == "v0.18.0", "decode": True}


def additional_config(rendered: Rendered, role: str = "decode") -> dict:
    """A role's --additional-config as its start script passes it ({} without one)."""
    run = next(r for r in engines.entry_runs(rendered.objects) if r.role == role)
    return json.loads(flag(run.run.argv, "--additional-config") or "{}")


GUIDE_LMHEAD = "decode.guideArgs.additional-config.finegrained_tp_config.lmhead_tensor_parallel_size"
DENSE_AT_V0_23 = (
    f"{GUIDE_LMHEAD}: vLLM-Ascend 0.23.0 enables finegrained TP only for mixture-of-experts models "
    '("The finegrained tp sizes can be enabled only for MOE models" at start), and model.moe is false'
)


@pytest.mark.parametrize(
    ("values", "version"),
    [
        ({}, "v0.13.0"),
        ({"engine": {"version": "v0.18.0"}}, "v0.18.0"),
        ({"image": {"tag": "v0.18.0-a3"}}, "v0.18.0"),
        ({"engine": {"version": "v0.23.0"}}, "v0.23.0"),
        ({"image": {"tag": "v0.23.0-a3"}}, "v0.23.0"),
        ({"image": {"tag": "v0.23.0.post1-a3"}}, "v0.23.0"),
        ({"accelerator": {"type": "ascend-a2"}, "image": {"tag": "v0.23.0"}}, "v0.23.0"),
    ],
    ids=["default", "v0.18.0", "tag-v0.18.0-a3", "v0.23.0", "tag-v0.23.0-a3", "tag-v0.23.0.post1-a3", "a2-v0.23.0"],
)
def test_the_defaults_render_at_every_version(render: Renderer, crds, values: dict, version: str):
    """Issue 40 item 8: the chart's own defaults are valid at every version. The guide's decode
    lmhead_tensor_parallel_size (decode.guideArgs) is applied where the version accepts it and
    dropped at v0.23.0 on a dense model, which the ModelServing's annotation and the summary say."""
    rendered = render(overrides=values)
    assert_valid(rendered, crds)
    assert rendered.modelserving["metadata"]["annotations"]["mooncake-pd/engine-version"] == version
    dropped = summary.dropped_guide_args(rendered.modelserving)
    text = summary.summarize(rendered.objects, engines.entry_runs(rendered.objects))
    if version == "v0.23.0":
        assert "finegrained_tp_config" not in additional_config(rendered)
        assert dropped == [DENSE_AT_V0_23]
        assert f"guide's default left out: {DENSE_AT_V0_23}" in text
    else:
        assert additional_config(rendered)["finegrained_tp_config"] == {"lmhead_tensor_parallel_size": 2}
        assert dropped == [] and "left out" not in text
        assert "mooncake-pd/dropped-guide-args" not in rendered.modelserving["metadata"]["annotations"]


def test_your_finegrained_tp_is_refused_where_the_guides_is_dropped(render: Renderer):
    yours = {"decode": {"args": {"additional-config": {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 2}}}}}
    message = render.error(overrides={"image": {"tag": "v0.23.0-a3"}, **yours})
    assert "decode.args.additional-config.finegrained_tp_config.lmhead_tensor_parallel_size" in message
    assert "engine.version v0.23.0 (from image.tag v0.23.0-a3)" in message
    # A mixture-of-experts model keeps the guide's; v0.13.0 keeps yours on any model.
    moe = render(overrides={"image": {"tag": "v0.23.0-a3"}, "model": {"moe": True}})
    assert additional_config(moe)["finegrained_tp_config"] == {"lmhead_tensor_parallel_size": 2}
    assert summary.dropped_guide_args(moe.modelserving) == []
    render(overrides={"engine": {"version": "v0.13.0"}, **yours})


def test_the_guides_size_is_dropped_where_it_does_not_divide_the_roles_dp(render: Renderer):
    rendered = render(overrides={"decode": {"parallelism": {"data": 1}}})
    assert "finegrained_tp_config" not in additional_config(rendered)
    assert summary.dropped_guide_args(rendered.modelserving) == [
        f"{GUIDE_LMHEAD}: 2 does not divide decode.parallelism.data (1), which vLLM-Ascend requires "
        "(AssertionError at start)"
    ]


@pytest.mark.parametrize(
    ("decode", "expected"),
    [
        # Yours beside the guide's in one map, as helm merged them when the guide's was in args.
        (
            {"args": {"additional-config": {"enable_shared_expert_dp": True}}},
            {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 2}, "enable_shared_expert_dp": True},
        ),
        ({"args": {"additional-config": {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 4}}}}, None),
        ({"args": {"additional-config": {"finegrained_tp_config": None}}}, {}),
        ({"args": {"additional-config": None}}, {}),
        ({"guideArgs": {"additional-config": None}}, {}),
    ],
    ids=["yours-beside", "yours-wins", "your-null-inside", "your-null-flag", "guide-null"],
)
def test_the_guides_flags_lie_under_yours(render: Renderer, decode: dict, expected: dict | None):
    rendered = render(overrides={"decode": decode})
    got = additional_config(rendered)
    assert got.pop("recompute_scheduler_enable") is True
    if expected is None:
        expected = {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 4}}
    assert got == expected


def test_the_guides_additional_config_keys_are_read_at_every_vllm_ascend_version():
    """guideArgs drops only what a version refuses at start; a key a version does not read at all
    would be ignored there without a word (the validate.engineVersion rules refuse it), so every
    key of the guide's --additional-config must be one each vLLM-Ascend version reads."""
    values = yaml.safe_load((paths.CHART / "values.yaml").read_text())
    keys = {k for role in ("prefill", "decode") for k in (values[role]["guideArgs"].get("additional-config") or {})}
    assert keys == {"finegrained_tp_config"}
    for version, row in profiles.load()["engines"].items():
        if row["vllmAscend"]:
            read = json.loads((paths.ENGINE_DATA / version / "vllm-ascend.json").read_text())["additionalConfigKeys"]
            assert keys <= set(read), version


@pytest.mark.parametrize(
    ("values", "version"),
    [
        ({"image": {"tag": "v0.23.0.post1-a3"}}, "v0.23.0"),
        ({"image": {"tag": "v0.18.0.post2-a3"}}, "v0.18.0"),
        ({"image": {"tag": "v0.23.0.post1-a3-openeuler"}}, "v0.23.0"),
        ({"accelerator": {"type": "ascend-a2"}, "image": {"tag": "v0.23.0.post1"}}, "v0.23.0"),
        ({"image": {"tag": "v0.23.0.post1-a3"}, "engine": {"version": "v0.23.0"}}, "v0.23.0"),
    ],
    ids=["a3", "a3-v0.18.0", "a3-openeuler", "a2", "with-engine-version"],
)
def test_a_post_release_tag_selects_its_releases_version(render: Renderer, crds, values: dict, version: str):
    """Issue 40 item 8: vLLM-Ascend's current stable is a post release (v0.23.0.post1-a3); it is
    checked with its release's data."""
    rendered = render(overrides=values)
    assert_valid(rendered, crds)
    tag = values["image"]["tag"]
    assert rendered.container("decode")["image"] == f"quay.io/ascend/vllm-ascend:{tag}"
    assert rendered.modelserving["metadata"]["annotations"]["mooncake-pd/engine-version"] == version
    assert profiles.tag_version(tag) == version and profiles.engine_version(values) == version


def test_a_release_candidate_is_refused_unless_engine_version_names_its_data(render: Renderer):
    message = render.error(overrides={"image": {"tag": "v0.23.0rc1-a3"}})
    assert 'image.tag: "v0.23.0rc1-a3" is a release candidate of v0.23.0, not a release the chart supports' in message
    assert "use the release's tag (v0.23.0-a3; the chart knows v0.13.0, v0.18.0, v0.23.0 on ascend-a3)" in message
    assert "engine.version: required" not in message
    # engine.version takes it as a build of your own, checked with that release's data.
    rendered = render(overrides={"image": {"tag": "v0.23.0rc1-a3"}, "engine": {"version": "v0.23.0"}})
    assert rendered.modelserving["metadata"]["annotations"]["mooncake-pd/engine-version"] == "v0.23.0"


VENDOR = "quay.io/ascend/vllm-ascend"
MIRROR = "registry.local/vllm-ascend"


@pytest.mark.parametrize(
    ("accelerator", "repository", "tag", "owner"),
    [
        # The vendor's repository named (as `generate --image` names it) keeps the vendor's naming.
        ("ascend-a3", VENDOR, "v0.23.0", "A2"),
        ("ascend-a2", VENDOR, "v0.23.0-a3", "A3"),
        ("ascend-a3", VENDOR, "v0.23.0-a3", None),
        ("ascend-a3", VENDOR, "v0.23.0-a3-openeuler", None),
        ("ascend-a3", "", "v0.23.0-a3-openeuler", None),
        ("ascend-a3", "", "v0.23.0-openeuler", "A2"),
        ("ascend-a2", "", "v0.23.0-openeuler", None),
        # A mirror's tags are its own: refused only where they carry another accelerator's variant.
        ("ascend-a3", MIRROR, "v0.23.0", None),
        ("ascend-a2", MIRROR, "v0.23.0-a3", "A3"),
        ("ascend-a2", MIRROR, "v0.23.0-a3-openeuler", "A3"),
        ("ascend-a2", MIRROR, "v0.23.0", None),
    ],
)
def test_the_image_tags_variant_must_match_the_accelerator(
    render: Renderer, accelerator: str, repository: str, tag: str, owner: str | None
):
    """Issue 40 item 2: the A2 image with --accelerator ascend-a3 rendered whenever image.repository
    was set, as `generate --image` sets it."""
    values = {"accelerator": {"type": accelerator}, "image": {"repository": repository, "tag": tag}}
    if owner is None:
        assert render(overrides=values).container("prefill")["image"] == f"{repository or VENDOR}:{tag}"
        return
    message = render.error(overrides=values)
    of = f" of {repository}" if repository else ""
    expected = f'image.tag: "{tag}"{of} is the vLLM-Ascend image for {owner}, but accelerator.type is {accelerator}'
    assert expected in message
    assert message.count("\n  - ") == 1, message


def test_finegrained_tp_must_divide_the_roles_data_parallel(render: Renderer):
    values = {"decode": {"args": {"additional-config": {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 3}}}}}
    message = render.error(overrides=values)
    assert "lmhead_tensor_parallel_size: 3 does not divide decode.parallelism.data (4)" in message


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"image": {"tag": "v0.20.0-a3"}}, 'engine.version: "v0.20.0" (from image.tag v0.20.0-a3) is not an engine'),
        ({"engine": {"version": "v0.33.0"}}, "engine.version: v0.33.0 (engine.version) has no ascend-a3 image"),
        ({"image": {"tag": "my-build-a3"}}, 'engine.version: required with image.tag "my-build-a3"'),
        (
            {"image": {"tag": "v0.18.0-a3"}, "engine": {"version": "v0.23.0"}},
            "image.tag: v0.18.0-a3 is the v0.18.0 image, but engine.version is v0.23.0",
        ),
    ],
    ids=["unknown-release", "no-image-for-accelerator", "custom-tag-needs-version", "tag-contradicts-version"],
)
def test_versions_the_chart_cannot_check_are_refused(render: Renderer, values: dict, expected: str):
    message = render.error(overrides={**values, **NO_FINEGRAINED})
    assert expected in message
    if "not an engine" in expected:
        assert "v0.13.0, v0.18.0, v0.23.0 on ascend-a3" in message and "Add an engine version" in message


def test_a_custom_image_with_its_version_renders(render: Renderer):
    rendered = render(
        overrides={"image": {"repository": "registry.local/vllm-ascend", "tag": "build-42-a3"}, **at("v0.23.0")}
    )
    assert rendered.container("decode")["image"] == "registry.local/vllm-ascend:build-42-a3"
    assert "kv_connector_module_path" not in kv_configs(rendered)["decode"]


def test_upstream_vllm_0_33_on_nvidia(render: Renderer, crds):
    rendered = render(overrides={**NVIDIA, **V0_33})
    assert_valid(rendered, crds)
    assert rendered.container("prefill")["image"] == "docker.io/vllm/vllm-openai:v0.33.0"
    # vLLM 0.33 turns prefix caching off with --disable-prefix-caching (its parser has no
    # --no-enable-prefix-caching): the guide's enable-prefix-caching false is written so.
    for run in engines.entry_runs(rendered.objects):
        assert "--disable-prefix-caching" in run.run.argv and "--no-enable-prefix-caching" not in run.run.argv
        assert vllmflags.check_argv(run.run.argv[2:], version="v0.33.0") == []
    # The newest vendored proxy, which imports no vLLM, in the scripts ConfigMap.
    script = paths.CHART / "files" / "vendor" / "vllm-ascend-v0.23.0" / "load_balance_proxy_server_example.py"
    assert script.read_text() in rendered.one("ConfigMap", f"{paths.RELEASE}-scripts")["data"].values()


def test_kv_transfer_fields_follow_the_versions_kvtransferconfig(render: Renderer):
    """vLLM 0.32 removed kv_buffer_size, and from 0.18 KVTransferConfig refuses unknown keys."""
    assert "kv_buffer_size" in kv_configs(render(overrides={"kvTransfer": {"bufferSize": 2e9}}))["prefill"]
    message = render.error(overrides={**NVIDIA, **V0_33, "kvTransfer": {"bufferSize": 2e9}})
    assert "kvTransfer.bufferSize: vLLM 0.33.0's KVTransferConfig has no kv_buffer_size" in message
    assert "refuses the key at start" in message


def test_a_stale_connector_module_fails_where_vllm_imports_it_first(render: Renderer):
    stale = {"kvTransfer": {"modulePath": "vllm_ascend.distributed.mooncake_connector"}}
    message = render.error(overrides={**at("v0.23.0"), **stale})
    assert (
        "kvTransfer.modulePath: vllm_ascend.distributed.mooncake_connector is not a module of vLLM-Ascend 0.23.0"
        in message
    )
    assert "ModuleNotFoundError" in message
    # v0.18.0's vLLM looks in its registry first: the stale path is ignored there.
    render(overrides={**at("v0.18.0"), **stale})
    moved = {"kvTransfer": {"modulePath": "vllm_ascend.distributed.kv_transfer.kv_p2p.mooncake_connector"}}
    assert kv_configs(render(overrides={**at("v0.23.0"), **moved}))["prefill"]["kv_connector_module_path"]


def test_renamed_env_names_its_successor(render: Renderer):
    env = {"VLLM_NIXL_ABORT_REQUEST_TIMEOUT": "480"}
    render(overrides={"engine": {"env": env}})
    message = render.error(overrides=at("v0.18.0", engine={"version": "v0.18.0", "env": env}))
    assert (
        "engine.env.VLLM_NIXL_ABORT_REQUEST_TIMEOUT: MooncakeConnectorV1 with vLLM-Ascend v0.18.0 no longer reads it"
        in message
    )
    assert "use VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT" in message


@pytest.mark.parametrize(
    ("version", "kv_port", "refused"),
    [
        ("v0.13.0", 22000, True),  # Mooncake v0.3.7.post2: 20000 + 1000 x 16 devices
        ("v0.23.0", 22000, False),  # from v0.3.8: 100 per device, [20000, 21600]
        ("v0.23.0", 21000, True),
        ("v0.18.0", 15500, True),  # the transfer engine's RPC range, every version
    ],
)
def test_mooncakes_random_ports_follow_the_version(render: Renderer, version: str, kv_port: int, refused: bool):
    values = {**at(version), "decode": {**NO_FINEGRAINED["decode"], "kvPort": kv_port}}
    if refused:
        message = render.error(overrides=values)
        assert f"decode.kvPort: ports {kv_port}-{kv_port + 7} overlap the range" in message
        assert f"engine.version {version}" in message
    else:
        render(overrides=values)


def test_ascend_base_port_moves_the_listener_range(render: Renderer):
    values = {**at("v0.23.0"), "accelerator": {"ascend": {"env": {"ASCEND_BASE_PORT": "30000"}}}}
    values["decode"] = {**NO_FINEGRAINED["decode"], "kvPort": 30500}
    assert "overlap the range 30000-31600" in render.error(overrides=values)
    render(overrides={**values, "decode": {**NO_FINEGRAINED["decode"], "kvPort": 21000}})


@pytest.mark.parametrize(
    ("version", "prefill_tp", "decode_tp", "refused"),
    [
        ("v0.13.0", 2, 1, True),  # vLLM 0.13's NIXL: decode TP a multiple of prefill TP
        ("v0.13.0", 1, 2, False),
        ("v0.18.0", 2, 1, False),  # from 0.18: either divides the other
        ("v0.18.0", 3, 2, True),
    ],
)
def test_nixls_tensor_rule_follows_the_version(render: Renderer, version, prefill_tp, decode_tp, refused):
    values = {
        **NVIDIA,
        "engine": {"version": version},
        "model": {"hfOverrides": {}},
        "prefill": {**NVIDIA["prefill"], "parallelism": {"tensor": prefill_tp, "data": 1, "dataLocal": 1}},
        "decode": {**NVIDIA["decode"], "parallelism": {"tensor": decode_tp, "data": 1}},
    }
    if refused:
        assert "decode.parallelism.tensor" in render.error(overrides=values)
    else:
        render(overrides=values)


def test_api_server_count_beside_headless_workers(render: Renderer):
    multinode = {
        "prefill": {"workerReplicas": 1, "parallelism": {"tensor": 2, "data": 8, "dataLocal": 4}},
        "engine": {"args": {"api-server-count": 1}},
    }
    render(overrides=multinode)
    message = render.error(
        overrides={**multinode, **at("v0.18.0"), "engine": {"version": "v0.18.0", "args": {"api-server-count": 1}}}
    )
    assert "prefill.args.api-server-count: 1 reaches the role's headless workers" in message
    assert "vLLM 0.18.0 refuses --api-server-count with --headless" in message


def test_an_additional_config_key_the_version_does_not_read(render: Renderer):
    values = {"prefill": {"args": {"additional-config": {"enable_shared_expert_dpp": True}}}}
    message = render.error(overrides=values)
    assert "prefill.args.additional-config.enable_shared_expert_dpp: not a key vLLM-Ascend 0.13.0 reads" in message
    render(overrides={"prefill": {"args": {"additional-config": {"enable_shared_expert_dp": True}}}})


def test_a_flag_of_another_version_is_refused_naming_it(render: Renderer):
    """--disable-log-requests: in vLLM 0.13, gone in 0.18 and 0.23 (vLLM's own parsers)."""
    values = {"engine": {"args": {"disable-log-requests": True}}}
    render(overrides=values)
    message = render.error(
        overrides={**values, **at("v0.23.0"), "engine": {"version": "v0.23.0", "args": {"disable-log-requests": True}}}
    )
    assert "engine.args.disable-log-requests: not an option of vllm serve in vLLM 0.23.0" in message


@pytest.mark.parametrize("version", ASCEND)
def test_every_start_script_parses_with_its_versions_own_parser(render: Renderer, version: str):
    rendered = render(overrides=at(version))
    for run in engines.entry_runs(rendered.objects):
        assert vllmflags.check_argv(run.run.argv[2:], version=version) == [], (version, run.role, run.run.argv)


def test_the_tooling_picks_the_version_as_the_chart_does():
    cases = [
        ({}, "v0.13.0"),
        ({"image": {"tag": "v0.23.0-a3"}}, "v0.23.0"),
        ({"image": {"tag": "v0.18.0-310p"}}, "v0.18.0"),
        ({"image": {"tag": "v0.23.0rc1-a3"}, "engine": {"version": "v0.23.0"}}, "v0.23.0"),
        ({"engine": {"version": "v0.18.0"}, "image": {"tag": "latest"}}, "v0.18.0"),
        ({"accelerator": {"type": "nvidia"}}, "v0.13.0"),
        ({"image": {"tag": "v0.23.0.post1-a3"}}, "v0.23.0"),
        ({"image": {"tag": "v0.18.0.post3"}}, "v0.18.0"),
    ]
    for values, expected in cases:
        assert profiles.engine_version(values) == expected, values
    assert profiles.tag_version("v0.23.0rc1") == "" and profiles.tag_version("latest") == ""
    assert profiles.versions_for("nvidia") == ["v0.13.0", "v0.18.0", "v0.23.0", "v0.32.0", "v0.33.0", "v0.34.0"]
    assert profiles.versions_for("ascend-a3") == ["v0.13.0", "v0.18.0", "v0.23.0"]


def _proxy_options(script: Path) -> set[str]:
    tree = ast.parse(script.read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "add_argument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize("version", ASCEND)
def test_the_proxy_command_is_one_the_versions_proxy_parses(render: Renderer, version: str):
    """Each version's vendored proxy (SOURCE.md's sha256 holds) takes every flag the chart passes."""
    row = profiles.load()["engines"][version]
    script = paths.CHART / "files" / row["proxyScript"]
    source = (script.parent / "SOURCE.md").read_text()
    assert hashlib.sha256(script.read_bytes()).hexdigest() in source and f"tag: {version}" in source
    rendered = render(overrides={**NVIDIA, "engine": {"version": version}})
    args = rendered.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = {a for a in args if isinstance(a, str) and a.startswith("--")}
    assert flags and flags <= _proxy_options(script), flags - _proxy_options(script)
    data = rendered.one("ConfigMap", f"{paths.RELEASE}-scripts")["data"]
    assert script.read_text() in data.values()


def test_generate_writes_a_version_and_drops_what_it_refuses(tmp_path: Path):
    model = modelmod.load(paths.REPO / "tests" / "fixtures" / "models" / "DeepSeek-R1-Distill-Qwen-1.5B")
    assert not model.is_moe and modelmod.load(paths.REPO / "tests" / "fixtures" / "models" / "DeepSeek-R1").is_moe
    roles = {"prefill": topology.RoleTopology(2, 2), "decode": topology.RoleTopology(2, 2)}
    common = dict(
        accelerator="ascend-a3", roles=roles, served_name="m", model_path="/models/m", max_model_len=4096, image=None
    )
    newer = generate.generate(model, engine_version="v0.23.0", **common).values
    assert newer["engine"]["version"] == "v0.23.0"
    # The guide's finegrained TP is no longer in args, so generate writes nothing of it: the
    # chart drops decode.guideArgs' where the version refuses it.
    assert "additional-config" not in newer["decode"].get("args", {})
    older = generate.generate(model, **common).values
    assert "version" not in older.get("engine", {})
    with pytest.raises(
        topology.GenerateError,
        match=re.escape("--engine-version v0.33.0: engine.version: 'v0.33.0' is not an engine version ascend-a3 runs"),
    ):
        generate.generate(model, engine_version="v0.33.0", **common)


def test_values_files_name_a_version_the_tooling_knows():
    for values in sorted(paths.VALUES_DIR.glob("*.yaml")):
        data = yaml.safe_load(values.read_text())
        version = profiles.engine_version(data)
        assert version in profiles.versions_for((data.get("accelerator") or {}).get("type") or "ascend-a3"), values
        assert re.fullmatch(r"v\d+\.\d+\.\d+", version)


@pytest.mark.parametrize("version", VERSIONS)
def test_two_way_flags_are_on_and_off_pairs(version: str):
    """The chart writes false as the other long spelling of a two-spelling flag
    (mooncake-pd.vllm.negatives): that holds only where every such pair is on/off, never two
    names of one switch."""
    pairs = []
    for flag in json.loads((paths.ENGINE_DATA / version / "serve-flags.json").read_text())["flags"]:
        longs = [o.removeprefix("--") for o in flag["options"] if o.startswith("--")]
        if flag["kind"] == "bool" and len(longs) == 2:
            pairs.append(tuple(longs))
    assert pairs
    for a, b in pairs:
        negated = b == f"no-{a}" or a == f"no-{b}"
        switched = {a.split("-", 1)[0], b.split("-", 1)[0]} == {"enable", "disable"} and (
            a.split("-", 1)[1] == b.split("-", 1)[1]
        )
        assert negated or switched, (a, b)


# vLLM's NixlConnector roles per version: kv_both until 0.18; from 0.23 kv_both "is deprecated
# and will be removed in a future release" (vllm-0.23.0 nixl/connector.py ~97-104; 0.32,
# 0.33 and 0.34 the same), so prefill produces and decode consumes.
NIXL_ROLES = {
    "v0.13.0": {"prefill": "kv_both", "decode": "kv_both"},
    "v0.18.0": {"prefill": "kv_both", "decode": "kv_both"},
    "v0.23.0": {"prefill": "kv_producer", "decode": "kv_consumer"},
    "v0.32.0": {"prefill": "kv_producer", "decode": "kv_consumer"},
    "v0.33.0": {"prefill": "kv_producer", "decode": "kv_consumer"},
    "v0.34.0": {"prefill": "kv_producer", "decode": "kv_consumer"},
}


@pytest.mark.parametrize("version", profiles.versions_for("nvidia"))
def test_nixl_roles_follow_the_version(render: Renderer, version: str):
    configs = kv_configs(render(overrides={**NVIDIA, **at(version)}))
    assert {role: c["kv_connector"] for role, c in configs.items()} == {
        "prefill": "NixlConnector",
        "decode": "NixlConnector",
    }
    assert {role: c["kv_role"] for role, c in configs.items()} == NIXL_ROLES[version]


# Cross-field rules as data (chart/files/engines/rules.yaml, issue 39 item 1): the file is held
# against the versions' own data here, and every rule has its bad-values case.
RULES = yaml.safe_load((paths.ENGINE_DATA / "rules.yaml").read_text())["rules"]
OPERATORS = {"eq", "ne", "lt", "le", "gt", "ge", "contains"}


def _operands(rule: dict) -> list:
    return [side for condition in rule["when"] for side in (condition[0], condition[2])] + [rule["key"]]


@pytest.mark.parametrize("rule", RULES, ids=[r["id"] for r in RULES])
def test_each_rule_reads_what_its_versions_have(rule: dict):
    """A rule names versions the chart knows, flags each of them has, --additional-config keys
    its vLLM-Ascend reads and operators the template knows; a typo would leave it silent."""
    assert set(rule) <= {"id", "versions", "ascend", "when", "defaults", "key", "problem", "fix"}, rule["id"]
    assert rule["when"] and rule["problem"] and rule["fix"]
    assert all(len(c) == 3 and c[1] in OPERATORS for c in rule["when"]), rule["id"]
    assert rule["key"] in _operands(rule)[:-1], "the key must be an operand of a condition"
    for version, citation in rule["versions"].items():
        assert version in VERSIONS, (rule["id"], version)
        assert re.match(r"(vllm|vllm-ascend) v\d+\.\d+\.\d+ \S+\.py ", citation), (rule["id"], citation)
        assert version.removeprefix("v") in citation.split()[1], (rule["id"], citation)
        folder = paths.ENGINE_DATA / version
        options = {
            o.removeprefix("--")
            for f in json.loads((folder / "serve-flags.json").read_text())["flags"]
            for o in f["options"]
        }
        if rule.get("ascend"):
            assert version in ASCEND, (rule["id"], version)
            keys = json.loads((folder / "vllm-ascend.json").read_text())["additionalConfigKeys"]
        for operand in _operands(rule) + list(rule.get("defaults") or {}):
            if isinstance(operand, str) and operand.startswith("args."):
                path = operand.removeprefix("args.").split(".")
                assert path[0] in options, (rule["id"], version, operand)
                if path[0] == "additional-config":
                    assert rule.get("ascend") and path[1] in keys, (rule["id"], version, operand)


def test_every_rule_has_its_bad_values_case():
    cases = {
        line.removeprefix("# rule: ").strip()
        for path in (Path(__file__).parent / "bad-values").glob("engine-rule-*.yaml")
        for line in path.read_text().splitlines()[1:2]
        if line.startswith("# rule: ")
    }
    assert {r["id"] for r in RULES} - cases == set()
    assert cases - {r["id"] for r in RULES} == set()


def test_rules_read_every_spelling_and_skip_what_the_values_leave_open(render: Renderer):
    """The other spelling of a two-way flag is the flag turned the other way; a numeric string
    is its number; engine.args is named where it set the flag; a rule with an operand the values
    leave unset (vLLM's own default) is not checked; the edges hold."""
    message = render.error(
        overrides={
            "engine": {"args": {"no-enable-chunked-prefill": True}},
            "prefill": {"args": {"max-num-batched-tokens": "16384"}},
        }
    )
    assert (
        "prefill.args.max-num-batched-tokens: 16384 is below model.maxModelLen (40000) with chunked prefill off"
        in message
    )
    assert "decode.args.max-num-batched-tokens: 256 is below model.maxModelLen (40000)" in message
    message = render.error(
        overrides={
            "engine": {"args": {"max-num-batched-tokens": 300}},
            "decode": {"args": {"max-num-batched-tokens": None, "max-num-seqs": 512}},
        }
    )
    assert "engine.args.max-num-batched-tokens: 300 is below max-num-seqs (512)" in message
    assert "prefill.args.max-num-batched-tokens" not in message  # its own 16384 >= its 8
    # Chunked prefill left to vLLM (on by default in V1): a small budget renders.
    render(overrides={"prefill": {"args": {"max-num-batched-tokens": 1024}}})
    # Equal is allowed: max-num-batched-tokens == max-num-seqs, and == model.maxModelLen without chunked prefill.
    render(overrides={"decode": {"args": {"max-num-batched-tokens": 40, "max-num-seqs": 40}}})
    render(overrides={"model": {"maxModelLen": 16384}, "prefill": {"args": {"enable-chunked-prefill": False}}})


def test_sleep_mode_is_refused_only_beside_ascends_expandable_segments(render: Renderer):
    """The contains operator reads the start script's env: sleep mode renders on Ascend once
    PYTORCH_NPU_ALLOC_CONF drops expandable_segments:True, and the rule is vLLM-Ascend's alone
    (torch_npu reads that variable), so a CPU role with it set renders too."""
    sleep = {"decode": {"args": {"enable-sleep-mode": True}}}
    assert "decode.args.enable-sleep-mode: sleep mode with" in render.error(overrides=sleep)
    render(overrides={**sleep, "accelerator": {"ascend": {"env": {"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:256"}}}})
    render(
        (paths.VALUES_DIR / "qwen2.5-0.5b-instruct-cpu-1p1d.yaml",),
        overrides={
            "engine": {"env": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}},
            "decode": {"args": {"enable-sleep-mode": True}},
        },
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_bounds_come_from_vllms_config_fields(version: str):
    """`mooncake-pd engines generate` writes each option's bounds from the pydantic field its
    parser built it from (engine_probe.record_sources); the ones the chart's defaults set."""
    flags = {
        f["options"][0]: f for f in json.loads((paths.ENGINE_DATA / version / "serve-flags.json").read_text())["flags"]
    }
    assert flags["--gpu-memory-utilization"]["bounds"] == {
        "field": "vllm.config.cache.CacheConfig.gpu_memory_utilization",
        "gt": 0,
        "le": 1,
    }
    assert flags["--max-num-seqs"]["bounds"]["ge"] == 1
    assert flags["--max-num-batched-tokens"]["bounds"]["ge"] == 1
    # --kv-cache-dtype is CacheConfig.cache_dtype: no bound; choices where the parser has them
    # (0.33 and 0.34 type it CacheDType | str and check it in a validator instead).
    assert "bounds" not in flags["--kv-cache-dtype"]
    assert version in ("v0.33.0", "v0.34.0") or "auto" in flags["--kv-cache-dtype"]["choices"]


# vLLM's own config classes on the chart's flags (runtime conformance, in the e2e venv's vLLM
# 0.13.0: the guide's version; the config classes are the same source in its CPU build).
CONFIG_CHECK = """
import json, sys
from vllm.config import CacheConfig, SchedulerConfig
out = []
for case in json.load(sys.stdin):
    try:
        SchedulerConfig(**case["scheduler"])
        CacheConfig(**case["cache"])
        out.append(None)
    except Exception as error:  # pydantic's ValidationError wraps the ValueError
        out.append(f"{type(error).__name__}: {error}"[:300])
print(json.dumps(out))
"""
SCHEDULER_INTS = (
    "max-num-batched-tokens",
    "max-num-seqs",
    "max-num-partial-prefills",
    "max-long-partial-prefills",
    "long-prefill-token-threshold",
)
CONFIG_CASES = (
    "engine-bound-gpu-memory-utilization.yaml",
    "engine-rule-batched-tokens-below-max-model-len.yaml",
    "engine-rule-seqs-above-batched-tokens.yaml",
    "engine-rule-partial-prefills-need-chunked-prefill.yaml",
    "engine-rule-long-partial-above-partial-prefills.yaml",
)


def _config_kwargs(flags: dict) -> dict:
    """SchedulerConfig and CacheConfig arguments from `vllm serve` flags as the start script
    passes them (text values; a two-way flag as its spelling)."""
    scheduler: dict = {"max_model_len": int(flags["max-model-len"]), "is_encoder_decoder": False}
    scheduler.update({name.replace("-", "_"): int(flags[name]) for name in SCHEDULER_INTS if name in flags})
    if "enable-chunked-prefill" in flags or "no-enable-chunked-prefill" in flags:
        scheduler["enable_chunked_prefill"] = "no-enable-chunked-prefill" not in flags
    cache = (
        {"gpu_memory_utilization": float(flags["gpu-memory-utilization"])} if "gpu-memory-utilization" in flags else {}
    )
    return {"scheduler": scheduler, "cache": cache}


def _with(flags: dict, values: dict, role: str) -> dict:
    """A role's rendered flags with a values file's engine.args and <role>.args laid over them
    (for values the chart refuses, which therefore render nothing)."""
    out = dict(flags)
    if "maxModelLen" in (values.get("model") or {}):
        out["max-model-len"] = str(values["model"]["maxModelLen"])
    for section in ((values.get("engine") or {}).get("args") or {}, (values.get(role) or {}).get("args") or {}):
        for name, value in section.items():
            if name in ("enable-chunked-prefill", "no-enable-chunked-prefill"):
                on = bool(value) == (name == "enable-chunked-prefill")
                out.pop("enable-chunked-prefill", None)
                out.pop("no-enable-chunked-prefill", None)
                out["enable-chunked-prefill" if on else "no-enable-chunked-prefill"] = True
            else:
                out[name] = str(value)
    return out


@pytest.mark.conformance
def test_the_rules_and_bounds_agree_with_vllms_config_classes(render: Renderer):
    """The default and every v0.13.0 preset pass vLLM 0.13.0's SchedulerConfig and CacheConfig
    with the flags their start scripts pass; each v0.13.0 bad-values case of the scheduler rules
    and bounds, which the chart refuses, is refused by those classes too."""
    python = paths.e2e_venv(paths.E2E_FIRST_CPU) / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {python}: make e2e-venv")
    goods: dict[str, dict] = {"(default)": {}}
    for preset in sorted((paths.REPO / "values").glob("*.yaml")):
        data = yaml.safe_load(preset.read_text()) or {}
        if profiles.engine_version(data) == "v0.13.0":
            goods[preset.name] = data
    cases, names = [], []
    default_flags = {}
    for name, data in goods.items():
        runs = engines.entry_runs(render(values_files=(paths.REPO / "values" / name,) if data else ()).objects)
        for run in runs:
            if name == "(default)":
                default_flags[run.role] = run.serve["flags"]
            cases.append(_config_kwargs(run.serve["flags"]))
            names.append((name, run.role, True))
    for name in CONFIG_CASES:
        values = yaml.safe_load((Path(__file__).parent / "bad-values" / name).read_text())
        for role, flags in default_flags.items():
            cases.append(_config_kwargs(_with(flags, values, role)))
            names.append((name, role, False))
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(python), "-c", CONFIG_CHECK], input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for (name, role, good), error in zip(names, results, strict=True):
        if good:
            assert error is None, (name, role, error)
    for name in CONFIG_CASES:
        assert any(error for (n, _, good), error in zip(names, results, strict=True) if n == name), name
