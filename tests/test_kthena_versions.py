"""The Kthena a release is written for (kthena.version, issue #25 item 7): v1.0.0, the release
users install, by default; a later Kthena by choice. The ModelServing names it, the tooling
validates against that version's vendored CRDs, and a field only a later Kthena has is refused
for v1.0.0 naming the key."""

from __future__ import annotations

import yaml

from conftest import Renderer, assert_valid
from mooncake_pd import manifests, paths, profiles, validate

ROLE_ROLLOUT = {"recoveryPolicy": "RoleRecreate", "rolloutStrategy": {"type": "RoleRollingUpdate"}}


def test_the_default_is_the_release_users_install():
    chart_values = yaml.safe_load((paths.CHART / "values.yaml").read_text())
    assert chart_values["kthena"]["version"] == paths.DEFAULT_KTHENA == profiles.kthena_versions()[0] == "v1.0.0"
    assert paths.crds_dir() == paths.KTHENA_CRDS / "v1.0.0"


def test_every_listed_version_has_its_crds_vendored():
    for version in profiles.kthena_versions():
        folder = paths.KTHENA_CRDS / version
        names = {p.name for p in folder.glob("*.yaml")}
        assert "workload.serving.volcano.sh_modelservings.yaml" in names, folder
        assert version in (paths.KTHENA_CRDS / "SOURCE.md").read_text()


def test_the_modelserving_names_its_kthena(render: Renderer):
    rendered = render()
    assert validate.kthena_version(rendered.objects) == "v1.0.0"
    later = render(overrides={"kthena": {"version": "main-3cc0572"}})
    assert validate.kthena_version(later.objects) == "main-3cc0572"


def test_role_rollout_on_v1_leaves_out_the_role_partition(render: Renderer):
    rendered = render(overrides=ROLE_ROLLOUT)
    for role in ("prefill", "decode"):
        assert "partition" not in rendered.role(role)
        assert rendered.role(role)["maxUnavailable"] == 1
    assert_valid(rendered)


def test_role_partition_renders_for_a_later_kthena_and_its_crds_only(render: Renderer):
    later = {"kthena": {"version": "main-3cc0572"}, "router": {"type": "kthena"}}
    rendered = render(overrides={**ROLE_ROLLOUT, **later, "decode": {"replicas": 2, "partition": 1, "port": 7100}})
    assert rendered.role("decode")["partition"] == 1
    assert_valid(rendered)
    # The same object against v1.0.0's CRD: the role has no such field there.
    ms = rendered.modelserving
    errors = validate.validate_crd_object(ms, paths.KTHENA_CRDS / "v1.0.0")
    assert any("partition" in e for e in errors), errors


def test_crd_folder_follows_the_annotation():
    ms = manifests.load(
        """
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata:
  name: x
  annotations: {mooncake-pd/kthena-version: main-3cc0572}
"""
    )
    assert validate.kthena_version([ms]) == "main-3cc0572"
    assert validate.kthena_version([{"kind": "ModelServing", "metadata": {"name": "x"}}]) is None
