"""autoscaling.*: one Kthena AutoscalingPolicy for the release's prefill and decode roles that
passes the CRD's schema and CEL rules and the simulator's (Kthena's webhook) checks; the
ModelServing leaves the replicas the autoscaler owns alone; every replica count the policy
allows makes valid objects whose pods the router and the policy's metric sources find
(volcano-sh/kthena@3cc0572; docs/autoscaling-simulator-notes.md)."""

from __future__ import annotations

import copy
import csv
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import Rendered, Renderer, assert_valid
from mooncake_pd import autoscale, paths, validate
from mooncake_pd.engines import PodIdentity

KTHENA = "modelserving.volcano.sh"
ON = {"router": {"type": "kthena"}, "decode": {"port": 7100}, "autoscaling": {"enabled": True}}
PRESETS = sorted(paths.VALUES_DIR.glob("*autoscaling*.yaml"))
ARGO = sorted((paths.REPO / "examples" / "argocd").glob("application*.yaml"))


def policy(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("AutoscalingPolicy")


def with_autoscaling(**extra: Any) -> dict[str, Any]:
    values = copy.deepcopy(ON)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values


def test_off_by_default(defaults: Rendered):
    assert defaults.find("AutoscalingPolicy") == []
    assert [r["replicas"] for r in defaults.modelserving["spec"]["template"]["roles"]] == [1, 1]


def test_policy_targets_the_release_and_validates_with_cel(render: Renderer, crds):
    rendered = render(overrides=ON)
    assert_valid(rendered, crds)
    spec = policy(rendered)["spec"]
    target = spec["disaggregatedTarget"]
    assert target["targetRef"] == {
        "apiVersion": "workload.serving.volcano.sh/v1alpha1",
        "kind": "ModelServing",
        "name": rendered.modelserving["metadata"]["name"],
    }
    assert sorted(target["roles"]) == ["decode", "prefill"]
    assert target["ratioConstraint"] == {
        "numeratorRole": "prefill",
        "denominatorRole": "decode",
        "minRatio": "0.500",
        "maxRatio": "1.500",
    }
    assert target["roles"]["prefill"]["metrics"] == [{"name": "vllm:num_requests_waiting", "targetValue": "4"}]
    assert target["roles"]["decode"]["metrics"] == [{"name": "vllm:num_requests_running", "targetValue": "120"}]


def test_policy_renders_every_defaulted_field(render: Renderer, crds):
    """Neither the CRD's defaults nor Kthena's mutating webhook add anything to the live object
    (Argo CD would show it as drift)."""
    spec_policy = policy(render(overrides=ON))
    assert validate.missing_crd_defaults(spec_policy, crds) == []
    behavior = spec_policy["spec"]["behavior"]
    assert autoscale.defaulted_behavior(behavior) == behavior


def test_pod_sources_scrape_the_engine_port_of_the_roles_entry_pods(render: Renderer):
    rendered = render(
        overrides=with_autoscaling(
            prefill={"replicas": 2, "workerReplicas": 1, "parallelism": {"data": 8, "dataLocal": 4}}
        )
    )
    name = rendered.modelserving["metadata"]["name"]
    roles = policy(rendered)["spec"]["disaggregatedTarget"]["roles"]
    for role in ("prefill", "decode"):
        for key, source in roles[role]["metricSources"].items():
            pod = source["pod"]
            assert pod["name"] == key and pod["uri"] == "/metrics"
            assert pod["port"] == rendered.container(role)["ports"][0]["containerPort"] == 7100
            selector = pod["labelSelector"]["matchLabels"]
            pods = [PodIdentity(name, 0, r, n, i) for r in ("prefill", "decode") for n in range(3) for i in range(2)]
            chosen = [p for p in pods if all(p.labels().get(k) == v for k, v in selector.items())]
            assert chosen == [p for p in pods if p.role == role and p.index == 0]


def test_prometheus_metric_renders_a_prometheus_source(render: Renderer, crds):
    query = 'sum(rate(vllm:prompt_tokens_total{modelserving="deepseek-pd",role="prefill"}[2m]))'
    values = with_autoscaling(
        metrics={"podMonitor": {"enabled": True}},
        autoscaling={
            "enabled": True,
            "prometheus": {"url": "http://prometheus-operated.monitoring.svc:9090"},
            "prefill": {"metrics": [{"name": "prompt-tokens", "targetValue": 20000, "query": query}]},
        },
    )
    rendered = render(overrides=values)
    assert_valid(rendered, crds)
    prefill = policy(rendered)["spec"]["disaggregatedTarget"]["roles"]["prefill"]
    assert prefill["metrics"] == [{"name": "prompt-tokens", "targetValue": "20000"}]
    assert prefill["metricSources"] == {
        "prompt-tokens": {"prometheus": {"serverURL": "http://prometheus-operated.monitoring.svc:9090", "query": query}}
    }
    # The PodMonitor puts the labels the query selects on every series.
    monitor = yaml.safe_dump(rendered.one("PodMonitor"))
    assert "modelserving" in monitor and "role" in monitor


def test_target_values_render_as_quoted_quantities(render: Renderer, crds):
    """A YAML float is refused by the CRD's int-or-string: 0.8 becomes "0.8"."""
    values = with_autoscaling(
        autoscaling={"enabled": True, "decode": {"metrics": [{"name": "vllm:kv_cache_usage_perc", "targetValue": 0.8}]}}
    )
    rendered = render(overrides=values)
    assert_valid(rendered, crds)
    metrics = policy(rendered)["spec"]["disaggregatedTarget"]["roles"]["decode"]["metrics"]
    assert metrics == [{"name": "vllm:kv_cache_usage_perc", "targetValue": "0.8"}]


@pytest.mark.parametrize(
    ("prefills", "decodes", "band", "expected"),
    [
        (2, 1, 50, ("1.000", "3.000")),
        (1, 3, 50, ("0.166", "0.500")),
        (1, 3, 10, ("0.300", "0.367")),
        (3, 2, 0, ("1.500", "1.500")),
    ],
)
def test_ratio_band_is_derived_around_the_rendered_ratio(render: Renderer, prefills, decodes, band, expected):
    values = with_autoscaling(
        prefill={"replicas": prefills},
        decode={"port": 7100, "replicas": decodes},
        autoscaling={
            "enabled": True,
            "prefill": {"minReplicas": 1, "maxReplicas": 6},
            "decode": {"minReplicas": 1, "maxReplicas": 6},
            "ratio": {"bandPercent": band},
        },
    )
    ratio = policy(render(overrides=values))["spec"]["disaggregatedTarget"]["ratioConstraint"]
    assert (ratio["minRatio"], ratio["maxRatio"]) == expected
    assert float(ratio["minRatio"]) <= prefills / decodes <= float(ratio["maxRatio"])


def test_given_ratio_bounds_are_used_as_given(render: Renderer):
    values = with_autoscaling(autoscaling={"enabled": True, "ratio": {"minRatio": "0.25", "maxRatio": "2"}})
    ratio = policy(render(overrides=values))["spec"]["disaggregatedTarget"]["ratioConstraint"]
    assert (ratio["minRatio"], ratio["maxRatio"]) == ("0.25", "2")


def test_a_band_met_only_at_one_corner_is_reachable(render: Renderer, crds):
    """1 prefill : 2 decode is the only way to meet exactly 0.5 within these bounds."""
    values = with_autoscaling(
        autoscaling={
            "enabled": True,
            "prefill": {"minReplicas": 1, "maxReplicas": 1},
            "decode": {"minReplicas": 2, "maxReplicas": 3},
            "ratio": {"minRatio": "0.5", "maxRatio": "0.5"},
        }
    )
    assert_valid(render(overrides=values), crds)


# --- replicas ownership ---------------------------------------------------------------------


def test_upgrade_render_leaves_role_replicas_to_the_autoscaler(render: Renderer):
    """With autoscaling on, no render (install or upgrade) carries roles[].replicas, so neither
    helm's merge patch nor a server-side apply sends a value over the autoscaler's."""
    for values in (ON, with_autoscaling(prefill={"replicas": 3}, decode={"port": 7100, "replicas": 2})):
        rendered = render(overrides=values)
        for role in rendered.modelserving["spec"]["template"]["roles"]:
            assert "replicas" not in role, role["name"]
        # Only the owned field is left to the CRD's default (1 at create).
        missing = validate.missing_crd_defaults(rendered.modelserving)
        assert missing == [f"ModelServing/deepseek-pd.spec.template.roles[{i}].replicas (default 1)" for i in (0, 1)]


def test_argocd_examples_ignore_the_replicas_the_autoscaler_owns():
    for path in ARGO:
        app = yaml.safe_load(path.read_text())
        ignored = [d for d in app["spec"].get("ignoreDifferences", []) if d["kind"] == "ModelServing"]
        assert ignored and ignored[0]["group"] == "workload.serving.volcano.sh", path.name
        assert ".spec.template.roles[].replicas" in ignored[0]["jqPathExpressions"], path.name
        assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"], path.name
        assert "kthena-controller-manager" in path.read_text(), "the comment names the field's manager"


# --- every replica count in [min, max] ------------------------------------------------------


def patched(modelserving: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
    """The ModelServing after Kthena's JSON patch ("add" roles/<i>/replicas, autoscale_controller.go:458-496)."""
    out = copy.deepcopy(modelserving)
    for role in out["spec"]["template"]["roles"]:
        role["replicas"] = counts[role["name"]]
    return out


def kthena_name_check(modelserving: dict[str, Any]) -> list[str]:
    """Kthena's webhook: <name>-<groups>-<role>-<roleReplicas>-<workers> a DNS-1035 label (facts.md)."""
    name, spec = modelserving["metadata"]["name"], modelserving["spec"]
    problems = []
    for role in spec["template"]["roles"]:
        text = f"{name}-{spec['replicas']}-{role['name']}-{role['replicas']}-{role['workerReplicas']}"
        if len(text) > 63 or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", text):
            problems.append(text)
    return problems


BOUNDS = {"prefill": {"minReplicas": 1, "maxReplicas": 12}, "decode": {"minReplicas": 2, "maxReplicas": 100}}
# The longest release name whose pod-name check holds at decode's 100 replicas: 63 - len("-1-decode-100-0").
LONGEST = "a" * (63 - len("-1-decode-100-0"))


@pytest.mark.parametrize("fullname", ["deepseek-pd", LONGEST], ids=["short-name", "longest-name"])
def test_every_count_between_min_and_max_is_valid_and_routed(render: Renderer, crds, fullname: str):
    values = with_autoscaling(
        fullnameOverride=fullname,
        gangPolicy={"minRoleReplicas": {"prefill": 1, "decode": 1}},
        autoscaling={"enabled": True, **BOUNDS, "ratio": {"minRatio": "0.05", "maxRatio": "6"}},
    )
    rendered = render(overrides=values)
    assert_valid(rendered, crds)
    assert rendered.find("Service") == [], "no per-replica Services: they could not follow the autoscaler"
    assert rendered.find("Deployment") == [], "no PD proxy: its host list is fixed at render"
    server = rendered.one("ModelServer")["spec"]["workloadSelector"]
    sources = {r: p["metricSources"] for r, p in policy(rendered)["spec"]["disaggregatedTarget"]["roles"].items()}
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        lo, hi = BOUNDS[role]["minReplicas"], BOUNDS[role]["maxReplicas"]
        for count in (lo, (lo + hi) // 2, hi):
            counts = {role: count, other: BOUNDS[other]["minReplicas"]}
            ms = patched(rendered.modelserving, counts)
            assert validate.validate([ms], crds) == [], (role, count)
            assert kthena_name_check(ms) == [], (role, count)
            for name, minimum in ms["spec"]["template"]["gangPolicy"]["minRoleReplicas"].items():
                assert minimum <= counts[name]
            # Every entry pod Kthena creates at this count is one the router and the policy see.
            pods = [PodIdentity(fullname, 0, role, r) for r in range(count)]
            for pod in pods:
                labels = pod.labels()
                assert all(labels.get(k) == v for k, v in server["matchLabels"].items())
                assert labels[server["pdGroup"]["groupKey"]] == f"{fullname}-0"
                wanted = server["pdGroup"][f"{role}Labels"]
                assert all(labels.get(k) == v for k, v in wanted.items())
                for source in sources[role].values():
                    assert all(labels.get(k) == v for k, v in source["pod"]["labelSelector"]["matchLabels"].items())


def test_longest_name_plus_one_is_refused_at_max(render: Renderer):
    values = with_autoscaling(fullnameOverride=LONGEST + "a", autoscaling={"enabled": True, **BOUNDS})
    assert "lower autoscaling.decode.maxReplicas" in render.error(overrides=values)


# --- the simulator takes the chart's policy -------------------------------------------------

DAY = """time,prefill/vllm:num_requests_waiting,decode/vllm:num_requests_running
0,0,40
60,2,90
120,12,200
180,30,420
240,30,480
300,8,300
360,0,100
420,0,60
"""


@pytest.mark.parametrize("preset", [None, *PRESETS], ids=["defaults", *[p.stem for p in PRESETS]])
def test_simulator_accepts_the_rendered_policy(render: Renderer, preset: Path | None, tmp_path: Path):
    rendered = render((preset,)) if preset else render(overrides=ON)
    spec = autoscale.find_policy_spec(rendered.text)
    sim = autoscale.policy_from_spec(spec)  # refuses what Kthena's validating webhook refuses
    assert [r.name for r in sim.roles] == ["decode", "prefill"]
    assert sim.behavior.scale_up.period_ms > 0 and sim.ratio is not None
    rows = list(csv.DictReader(DAY.splitlines()))
    samples = autoscale.series_from_rows(sim, rows)
    ticks = autoscale.simulate(sim, samples, {"prefill": 1, "decode": 1}, reconcile_ms=10)
    bounds = {r.name: (r.min_replicas, r.max_replicas) for r in sim.roles}
    finals = [{r.name: t.roles[i].final for i, r in enumerate(sim.roles)} for t in ticks]
    for counts in finals:
        for name, n in counts.items():
            assert bounds[name][0] <= n <= bounds[name][1]
    assert max(c["prefill"] for c in finals) > 1 and max(c["decode"] for c in finals) > 1, "the load scales both roles"


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_presets_render_a_valid_policy(render: Renderer, crds, preset: Path):
    rendered = render((preset,))
    assert_valid(rendered, crds)
    assert policy(rendered)["spec"]["disaggregatedTarget"]["targetRef"]["name"] == "deepseek-pd"
    assert "Generated by:" in preset.read_text() and "edited by hand" in preset.read_text()


def test_presets_differ_where_they_should():
    def preset(word: str) -> dict[str, Any]:
        return yaml.safe_load(next(p for p in PRESETS if word in p.name).read_text())["autoscaling"]

    latency, cost = preset("latency-first"), preset("cost-first")
    assert latency["prefill"]["minReplicas"] >= cost["prefill"]["minReplicas"]
    assert float(latency["prefill"]["metrics"][0]["targetValue"]) < float(cost["prefill"]["metrics"][0]["targetValue"])
    assert float(latency["decode"]["metrics"][0]["targetValue"]) < float(cost["decode"]["metrics"][0]["targetValue"])
    assert latency["behavior"]["scaleUp"]["panicPolicy"]["panicThresholdPercent"] < 1000
    windows = [p["behavior"]["scaleDown"]["stabilizationWindow"] for p in (latency, cost)]
    assert windows[0] != windows[1]


# --- CEL rules of every Kthena kind the chart renders ----------------------------------------


def test_validate_evaluates_cel_rules_of_every_kthena_kind(render: Renderer, crds):
    """Breaks, in a rendered object of each kind, a rule only CEL states: validate reports it."""
    rendered = render(overrides=ON)
    assert_valid(rendered, crds)
    ms = copy.deepcopy(rendered.modelserving)
    ms["spec"]["template"]["roles"][1]["name"] = ms["spec"]["template"]["roles"][0]["name"]
    route = copy.deepcopy(rendered.one("ModelRoute"))
    route["spec"]["rules"][0]["targetModels"][0]["externalModelProviderName"] = "x"
    asp = copy.deepcopy(policy(rendered))
    asp["spec"]["disaggregatedTarget"]["ratioConstraint"]["denominatorRole"] = "prefill"
    # The ModelRoute's one-of rule came after Kthena v1.0.0 (its CRD there has no such field).
    later = paths.KTHENA_CRDS / "main-3cc0572"
    for obj, message, folder in (
        (ms, "roles name must be unique", crds),
        (route, "exactly one of modelServerName or externalModelProviderName must be set", later),
        (asp, "numeratorRole and denominatorRole must differ", crds),
    ):
        errors = validate.validate([obj], folder)
        assert any("(CEL)" in e and message in e for e in errors), (obj["kind"], errors)


# Kthena v1.0.0's autoscaler takes a Prometheus query's value only from a scalar or a vector of one
# sample (pkg/autoscaler/autoscaler/metric_collector.go fetchPrometheusMetric): queries that keep a
# series per pod or DP rank are refused at render, those aggregated to one series render.
ONE_SERIES = [
    'sum(rate(vllm:prompt_tokens_total{modelserving="deepseek-pd",role="prefill"}[2m]))',
    "sum by () (vllm:num_requests_waiting)",
    "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[2m])))",
    "sum(rate(vllm:prompt_tokens_total[2m])) / sum(rate(vllm:generation_tokens_total[2m]))",
    "(sum(vllm:num_requests_waiting) + 1) * 2",
    'max(vllm:num_requests_waiting{path="a(b)"})',
    "clamp_min(sum(vllm:num_requests_waiting), 1)",
    "scalar(max(vllm:num_requests_running))",
]
SEVERAL_SERIES = {
    'vllm:num_requests_waiting{role="prefill"}': "vllm:num_requests_waiting{...} is not aggregated",
    "sum by (pod) (vllm:num_requests_waiting)": "sum by (pod) keeps a series per pod",
    "sum(vllm:num_requests_running) by (engine)": "sum by (engine) keeps a series per engine",
    "max without (engine) (vllm:num_requests_waiting)": "max ... without (...) keeps every other label",
    "histogram_quantile(0.9, sum by (le, pod) (rate(vllm:e2e_request_latency_seconds_bucket[2m])))": (
        "sum by (le, pod) keeps a series per pod"
    ),
    "rate(vllm:prompt_tokens_total[2m])": "rate(vllm:prompt_tokens_total[2m]) is not aggregated",
    "sum(vllm:num_requests_waiting) / vllm:num_requests_running": "vllm:num_requests_running is not aggregated",
}


def query_values(query: str, interval: str = "30s") -> dict[str, Any]:
    return with_autoscaling(
        metrics={"podMonitor": {"enabled": True, "interval": interval}},
        autoscaling={
            "enabled": True,
            "prometheus": {"url": "http://prometheus-operated.monitoring.svc:9090"},
            "prefill": {"metrics": [{"name": "q", "targetValue": "1", "query": query}]},
        },
    )


@pytest.mark.parametrize("query", ONE_SERIES)
def test_a_query_aggregated_to_one_series_renders(render: Renderer, query: str):
    assert policy(render(overrides=query_values(query)))


@pytest.mark.parametrize("query", sorted(SEVERAL_SERIES))
def test_a_query_with_a_series_per_pod_or_rank_is_refused(render: Renderer, query: str):
    message = render.error(overrides=query_values(query))
    assert "autoscaling.prefill.metrics[0].query: can return more than one series" in message
    assert SEVERAL_SERIES[query] in message
    assert "metric_collector.go fetchPrometheusMetric" in message


@pytest.mark.parametrize(
    ("interval", "window", "refused"), [("30s", "1m", False), ("30s", "59s", True), ("1m", "90s", True)]
)
def test_a_query_window_needs_two_scrapes(render: Renderer, interval: str, window: str, refused: bool):
    values = query_values(f"sum(rate(vllm:prompt_tokens_total[{window}]))", interval)
    if refused:
        assert f"the window [{window}] holds fewer than two scrapes" in render.error(overrides=values)
    else:
        assert policy(render(overrides=values))
