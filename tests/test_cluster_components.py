"""The local cluster's data agrees with itself (no cluster needed): cluster/components.yaml pins
the versions its build modules require, and cluster/nodes.yaml carries each profile's device as
chart/files/profiles.yaml states it."""

from __future__ import annotations

import re

from mooncake_pd import profiles
from support.kube import build
from support.kube.cluster import PROFILE_LABEL, node_objects


def _requires(module: str) -> dict[str, str]:
    text = (build.CLUSTER / module / "go.mod").read_text()
    return dict(re.findall(r"^\s*(?:require\s+)?([\w./-]+) (v[\w.+-]+)(?: // indirect)?$", text, re.MULTILINE))


def test_build_modules_require_the_pinned_versions():
    comps = build.components()
    assert _requires("build")["k8s.io/kubernetes"] == comps["kubernetes"].version
    assert _requires("build")["go.etcd.io/etcd/server/v3"] == comps["etcd"].version
    assert _requires("kthena")["github.com/volcano-sh/kthena"] == comps["kthena"].version
    apis, version = build.load()["volcano"]["apis"].split("@")
    assert _requires("crds")[apis] == version
    # The staging modules are pinned to the release's own (v0.34.2 for v1.34.2).
    staging = "v0" + comps["kubernetes"].version[2:]
    replaced = re.findall(
        r"^\t(k8s\.io/[\w-]+) => \1 (v[\w.]+)$", (build.CLUSTER / "build" / "go.mod").read_text(), re.M
    )
    assert replaced and {v for _, v in replaced} == {staging}


def test_kube_apiserver_reports_its_release():
    kube = build.components()["kubernetes"]
    assert f"gitVersion={kube.version}" in kube.ldflags
    major, minor = kube.version[1:].split(".")[:2]
    assert f"gitMajor={major}" in kube.ldflags and f"gitMinor={minor}" in kube.ldflags


def test_every_packaged_binary_has_a_folder_per_version():
    for component in build.components().values():
        assert component.folder.name == f"{component.name}-{component.version}"
        assert component.packages


def test_nodes_carry_their_profiles_device():
    seen = set()
    for node in node_objects():
        profile = profiles.profile(node["metadata"]["labels"][PROFILE_LABEL])
        seen.add(profile.type)
        capacity = node["status"]["capacity"]
        assert capacity == node["status"]["allocatable"]
        if profile.resource_name:
            assert capacity[profile.resource_name] == str(profile.devices_per_node), node["metadata"]["name"]
        assert not [r for r in capacity if "/" in r and r != profile.resource_name]
    assert seen == set(profiles.all_profiles())


def test_a_failed_crd_generation_says_what_controller_gen_said_not_its_usage_hint():
    output = (
        "go: downloading volcano.sh/apis v1.13.2\n"
        "go: volcano.sh/apis@v1.13.2: reading https://proxy.golang.org/...: 403 Forbidden\n"
        "Error: not all generators ran successfully\n"
        "run `controller-gen crd:crdVersions=v1 paths=volcano.sh/apis/... -w` to see all available markers, "
        "or `controller-gen ... -h` for usage\n"
    )
    said = build.controller_gen_errors(output)
    assert "403 Forbidden" in said and "not all generators" in said and "to see all available markers" not in said
