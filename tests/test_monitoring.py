"""Monitoring is opt-in: off by default; the PodMonitor scrapes the engines by role; the Grafana
dashboard's ConfigMap and its panels query only metrics the engines export."""

from __future__ import annotations

import json
import re

import pytest

from conftest import Renderer, assert_valid
from mooncake_pd import paths


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
