"""A change rolls exactly the pods it must, gently: a script change rolls only the role that runs it
(the scripts' checksum), the serving-group and role rollout strategies, engines drained and probed
gently, and NOTES warn where a lone serving group stops serving during a rollout."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import Renderer, assert_valid
from mooncake_pd import paths

CHECKSUM = "checksum/script"


def without_scripts(objects: list[dict], roles: set[str]) -> list[dict]:
    """The objects with the scripts of `roles` and their checksums blanked."""
    out = json.loads(json.dumps(objects))
    for obj in out:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].endswith("-scripts"):
            for key in list(obj["data"]):
                if key.split("-")[0].removesuffix(".sh") in roles:
                    obj["data"][key] = "<script>"
        if obj["kind"] == "ModelServing":
            for role in obj["spec"]["template"]["roles"]:
                if role["name"] in roles:
                    role["entryTemplate"]["metadata"]["annotations"][CHECKSUM] = "<sum>"
        # The install-time copy of a role's template (validation.podTemplates) carries it too.
        if (
            obj["kind"] == "PodTemplate"
            and obj["template"]["metadata"]["labels"]["app.kubernetes.io/component"] in roles
        ):
            obj["template"]["metadata"]["annotations"][CHECKSUM] = "<sum>"
    return out


def test_a_script_change_rolls_only_its_role(render: Renderer):
    before = render()
    after = render(overrides={"prefill": {"args": {"max-num-seqs": 4}}})
    checksums = [
        {
            r["name"]: r["entryTemplate"]["metadata"]["annotations"][CHECKSUM]
            for r in x.modelserving["spec"]["template"]["roles"]
        }
        for x in (before, after)
    ]
    assert checksums[0]["prefill"] != checksums[1]["prefill"]
    assert checksums[0]["decode"] == checksums[1]["decode"]
    assert without_scripts(before.objects, {"prefill"}) == without_scripts(after.objects, {"prefill"})


def test_checksum_is_the_scripts_sha256(render: Renderer):
    import hashlib

    rendered = render()
    scripts = rendered.one("ConfigMap", "deepseek-pd-scripts")["data"]
    for role in ("prefill", "decode"):
        annotation = rendered.role(role)["entryTemplate"]["metadata"]["annotations"][CHECKSUM]
        assert annotation == hashlib.sha256(scripts[f"{role}.sh"].encode()).hexdigest()


def test_serving_group_rolling_update(render: Renderer):
    spec = render().modelserving["spec"]
    assert spec["rolloutStrategy"] == {
        "type": "ServingGroupRollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 1, "partition": 0},
    }
    # Role rollout settings would be refused by Kthena's webhook under this strategy.
    for role in spec["template"]["roles"]:
        assert "maxUnavailable" not in role and "partition" not in role


def test_role_rolling_update(render: Renderer):
    # A role partition needs a Kthena after v1.0.0 (tests/test_kthena_versions.py).
    rendered = render(
        overrides={
            "kthena": {"version": "main-3cc0572"},
            # Role rollouts renumber role replicas: behind the Kthena router, not the proxy.
            "router": {"type": "kthena"},
            "recoveryPolicy": "RoleRecreate",
            "rolloutStrategy": {"type": "RoleRollingUpdate"},
            "decode": {"replicas": 4, "maxUnavailable": "50%", "partition": 1, "port": 7100},
        }
    )
    assert_valid(rendered)
    assert rendered.modelserving["spec"]["rolloutStrategy"] == {"type": "RoleRollingUpdate"}
    decode = rendered.role("decode")
    assert (decode["maxUnavailable"], decode["partition"]) == ("50%", 1)


def test_engines_drain_and_probe_gently(render: Renderer):
    rendered = render(overrides={"decode": {"workerReplicas": 1, "parallelism": {"data": 8, "dataLocal": 4}}})
    role = rendered.role("decode")
    entry, worker = role["entryTemplate"]["spec"], role["workerTemplate"]["spec"]
    for pod in (entry, worker):
        assert pod["terminationGracePeriodSeconds"] == 120
    container = entry["containers"][0]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "30"]
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] == 1800
    assert container["livenessProbe"]["failureThreshold"] >= 5
    assert "lifecycle" not in worker["containers"][0]
    proxy = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert proxy["terminationGracePeriodSeconds"] == 60
    assert proxy["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "10"]


def test_probes_can_be_turned_off(render: Renderer):
    container = render(overrides={"engine": {"livenessProbe": None, "startupProbe": None}}).container("prefill")
    assert "livenessProbe" not in container and "startupProbe" not in container
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


@pytest.mark.parametrize(
    ("sets", "warned"),
    [
        ((), True),
        (("router.type=kthena", "decode.port=7100"), True),
        (("router.type=kthena", "decode.port=7100", "servingGroups=2"), False),
    ],
    ids=["proxy-one-group", "kthena-one-group", "kthena-two-groups"],
)
def test_notes_warn_that_a_lone_serving_group_stops_serving_during_a_rollout(sets, warned):
    """The drills measured it (docs/failure-modes.md, kthena-rollout): Kthena v1.0.0 deletes the
    only group before it creates the new one."""
    cmd = [str(paths.helm_binary("4.1.4")), "install", "demo", str(paths.CHART), "--dry-run=client"]
    cmd += [arg for s in sets for arg in ("--set", s)]
    notes = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split("NOTES:", 1)[1]
    assert ("nothing serves for engine.drainSeconds" in notes) == warned
