"""Day 2 in the chart: script changes roll exactly the pods that run them, rollout strategies,
draining, and the optional PodMonitor and Grafana dashboard."""

from __future__ import annotations

import json
import re

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


def test_monitoring_is_off_by_default(render: Renderer):
    kinds = {o["kind"] for o in render().objects}
    assert "PodMonitor" not in kinds
    assert not [o for o in render().find("ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]


@pytest.mark.parametrize("proxy", [False, True])
def test_pod_monitor_scrapes_the_engines_by_role(render: Renderer, crds, proxy: bool):
    rendered = render(
        overrides={"metrics": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}, "proxy": proxy}}}
    )
    assert_valid(rendered, crds)
    monitor = rendered.one("PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    selector = monitor["spec"]["selector"]
    components = selector["matchExpressions"][0]["values"]
    assert set(components) == ({"prefill", "decode", "proxy"} if proxy else {"prefill", "decode"})
    for role in ("prefill", "decode"):
        template = rendered.role(role)["entryTemplate"]
        labels = template["metadata"]["labels"]
        assert selector["matchLabels"].items() <= labels.items()
        assert labels["app.kubernetes.io/component"] in components
        ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
        assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in ports
    targets = {r["targetLabel"] for r in monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]}
    assert {"role", "serving_group", "modelserving"} <= targets
    assert len(monitor["spec"]["podMetricsEndpoints"]) == (2 if proxy else 1)


def test_dashboard_configmap(render: Renderer):
    rendered = render(overrides={"metrics": {"dashboard": {"enabled": True}}})
    configmap = rendered.one("ConfigMap", "deepseek-pd-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (paths.CHART / "dashboards" / "mooncake-pd.json").read_text()
    assert configmap["data"]["mooncake-pd.json"] == shipped


KNOWN_METRICS = {
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:request_time_per_output_token_seconds_bucket",
    "vllm:kv_cache_usage_perc",
    "vllm:external_prefix_cache_hits_total",
    "vllm:external_prefix_cache_queries_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:nixl_xfer_time_seconds_count",
    "vllm:nixl_num_failed_transfers_total",
}


def test_dashboard_panels():
    dashboard = json.loads((paths.CHART / "dashboards" / "mooncake-pd.json").read_text())
    assert dashboard["uid"] == "mooncake-pd"
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for needed in ["time to first token", "time per output token", "kv cache usage", "kv transfer", "requests by role"]:
        assert needed in titles
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            if target["expr"].startswith("sum by (alertname) (ALERTS{"):
                # The chart's own alerts (metrics.prometheusRule) for this ModelServing.
                assert 'alertname=~"MooncakePd.*"' in target["expr"] and "$modelserving" in target["expr"]
                continue
            metrics = set(re.findall(r"vllm:[a-z_]+", target["expr"]))
            assert metrics and metrics <= KNOWN_METRICS, metrics
            assert "role" in target["expr"] and "$modelserving" in target["expr"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
