"""`mooncake-pd autoscale simulate` against cases worked out by hand from Kthena's code
(volcano-sh/kthena@3cc0572, pkg/autoscaler; file:line references as in mooncake_pd.autoscale)."""

from __future__ import annotations

import ast
import graphlib
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import autoscale as a
from mooncake_pd.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "autoscale"

# Scale-up/-down limits wide enough not to interfere, no stabilization, panic off.
QUIET = {
    "scaleDown": {"period": "15s", "stabilizationWindow": "0s", "instances": 100, "percent": 100},
    "scaleUp": {
        "stablePolicy": {"period": "15s", "stabilizationWindow": "0s", "instances": 100, "percent": 100},
        "panicPolicy": {"period": "15s", "panicModeHold": "0s"},
    },
}


def role(lo: int = 1, hi: int = 16, target: str = "10", source: str = "pod") -> dict[str, Any]:
    src = {"pod": {"port": 8000}} if source == "pod" else {"prometheus": {"serverURL": "http://p:9090", "query": "q"}}
    return {
        "minReplicas": lo,
        "maxReplicas": hi,
        "metrics": [{"name": "m", "targetValue": target}],
        "metricSources": {"m": src},
    }


def spec(roles: dict[str, Any] | None = None, behavior: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    target = {"targetRef": {"name": "ms"}, "roles": roles or {"decode": role()}}
    target.update(extra)
    return {"tolerancePercent": 10, "behavior": QUIET if behavior is None else behavior, "disaggregatedTarget": target}


def run(s: dict[str, Any], rows: list[dict[str, Any]], reconcile_ms: int = 10, **start: int) -> list[a.Tick]:
    """Reconciles 15 s + 10 ms apart, as Kthena's sliding 15 s period plus a short reconcile."""
    policy = a.policy_from_spec(s)
    return a.simulate(policy, a.series_from_rows(policy, rows), start, reconcile_ms)


def finals(ticks: list[a.Tick], name: str = "decode") -> list[int]:
    return [next(r.final for r in t.roles if r.name == name) for t in ticks]


def rows(*values: float | None, key: str = "decode/m", step: int = 15) -> list[dict[str, Any]]:
    return [{"time": i * step, key: v} for i, v in enumerate(values)]


# --- recommendation (recommendation.go)


def test_pod_metric_inside_the_tolerance_band_keeps_the_count():
    # sum 10.5 / target 10 = 1.05: |1.05 - 1| <= 0.10 -> current (recommendation:127-130).
    assert finals(run(spec(), rows(10.5)), "decode") == [1]
    # 12 / 10 = 1.2 is outside: ceil(1.2) = 2.
    assert finals(run(spec(), rows(12)), "decode") == [2]


def test_pod_metric_band_is_around_one_replica_not_the_current_count():
    # Kthena sums the pods' values into one "instance" (scaler:121): at 4 replicas, 41 / 10 =
    # 4.1 is far from 1, so the count moves to ceil(4.1) = 5 despite a 10 % tolerance.
    assert finals(run(spec(), rows(41), decode=4)) == [5]


def test_prometheus_metric_band_is_around_the_current_count():
    # desired 41 / 10 = 4.1; 4.1 / 4 = 1.025 is within 10 % -> 4 (recommendation:86-98).
    s = spec({"decode": role(source="prometheus")})
    assert finals(run(s, rows(41), decode=4)) == [4]
    assert finals(run(s, rows(50), decode=4)) == [5]


def test_scale_up_by_ratio_then_limited_per_period():
    # 50 / 10 -> 5 replicas from 2 with generous limits.
    assert finals(run(spec(), rows(50), decode=2)) == [5]
    # Stable policy instances 4, percent 100, Or: limit max(2 + 4, 2 + 2) = 6 (revision:100-121).
    behavior = {**QUIET, "scaleUp": {**QUIET["scaleUp"], "stablePolicy": {"period": "15s", "instances": 4}}}
    assert finals(run(spec(behavior=behavior), rows(100), decode=2)) == [6]


def test_unready_pods_hold_the_recommendation_but_not_a_scale_up():
    # 48 / 10 = 4.8 with 1 unready pod: newRatio 48 / 2 / 10 = 2.4, desired ceil(2.4 * 2) = 5.
    s = spec()
    policy = a.policy_from_spec(s)
    samples = a.series_from_rows(policy, [{"time": 0, "decode/m": 48, "decode/@unready": 1}])
    assert finals(a.simulate(policy, samples, {"decode": 3})) == [5]


def test_scale_down_stabilization_window_keeps_the_max_recommendation():
    behavior = {**QUIET, "scaleDown": {**QUIET["scaleDown"], "stabilizationWindow": "60s"}}
    # t0 recommends 5, then 0.5 -> 1. The t0 record stays fresh while t0 + 60 s >= now
    # (window:33-35), so the count holds at 5 until the reconcile at 60.04 s (revision:77-98).
    ticks = run(spec(behavior=behavior), rows(50, 5, 5, 5, 5, 5), decode=5)
    assert finals(ticks) == [5, 5, 5, 5, 1, 1]
    assert [t.roles[0].desired for t in ticks] == [5, 1, 1, 1, 1, 1]
    # Exactly 60 s later (no reconcile duration) the t0 record is still in the window.
    assert finals(run(spec(behavior=behavior), rows(50, 5, 5, 5, 5, 5), reconcile_ms=0, decode=5)) == [5, 5, 5, 5, 5, 1]


def test_scale_down_rate_limit_by_instances():
    # instances 1, percent 100, Or: limit min(past - 1, past - past) = 0 -> no limit; with
    # And: max(past - 1, 0) -> one replica per period (revision:82-95). 5 / 10 recommends 1.
    behavior = {
        **QUIET,
        "scaleDown": {"period": "15s", "stabilizationWindow": "0s", "instances": 1, "selectPolicy": "And"},
    }
    assert finals(run(spec(behavior=behavior), rows(5, 5, 5), decode=4)) == [3, 2, 1]
    # "past" is the largest count in force within the period, edge included (window:164-183): at
    # exactly 15 s spacing the 3 of t0..t15 still counts at t30.
    assert finals(run(spec(behavior=behavior), rows(5, 5, 5, 5), reconcile_ms=0, decode=4)) == [3, 2, 2, 1]


def test_panic_mode_caps_by_panic_percent_and_never_scales_down():
    panic = {"period": "15s", "percent": 100, "panicThresholdPercent": 200, "panicModeHold": "30s"}
    stable = {"period": "15s", "stabilizationWindow": "0s", "instances": 1, "percent": 0}
    behavior = {**QUIET, "scaleUp": {"stablePolicy": stable, "panicPolicy": panic}}
    ticks = run(spec(behavior=behavior), rows(20, 80, 80, 80), decode=2)
    # t15: 8 >= 2 * 200 % -> panic; cap = min in the panic period (2) + 100 % = 4 (scaler:129-134,
    # revision:54-62). t30: 8 >= 4 * 200 % refreshes the hold; min in the period is 4 -> cap 8.
    assert finals(ticks) == [2, 4, 8, 8]
    assert [t.roles[0].mode for t in ticks] == ["Stable", "Panic", "Panic", "Panic"]
    # At exactly 15 s spacing the 2 that ended at t15 is still in the panic period at t30.
    assert finals(run(spec(behavior=behavior), rows(20, 80, 80, 80), reconcile_ms=0, decode=2)) == [2, 4, 4, 8]
    # The same spike without panic (hold 0s) follows the stable limit: +1 per period.
    quiet_panic = {**behavior, "scaleUp": {"stablePolicy": stable, "panicPolicy": {**panic, "panicModeHold": "0s"}}}
    assert finals(run(spec(behavior=quiet_panic), rows(20, 80, 80, 80), decode=2)) == [2, 3, 4, 5]


def test_ratio_constraint_raises_the_deficient_role():
    ratio = {"numeratorRole": "prefill", "denominatorRole": "decode", "minRatio": "0.5", "maxRatio": "2"}
    s = spec({"prefill": role(hi=8), "decode": role(hi=8)}, ratioConstraint=ratio)
    data = [{"time": 0, "prefill/m": 5, "decode/m": 60}]
    (tick,) = run(s, data)
    by = {r.name: r for r in tick.roles}
    # prefill 1, decode 6: 1/6 < 0.5 -> prefill = ceil(0.5 * 6) = 3 (ratio:94-106).
    assert (by["prefill"].desired, by["prefill"].final, by["decode"].final) == (1, 3, 6)
    assert tick.ratio_adjusted
    # prefill capped at 2: saturate it, then decode = floor(2 / 0.5) = 4.
    s = spec({"prefill": role(hi=2), "decode": role(hi=8)}, ratioConstraint=ratio)
    (tick,) = run(s, data)
    assert {r.name: r.final for r in tick.roles} == {"prefill": 2, "decode": 4}


def test_min_max_clamp_and_fixed_role():
    # Above max at the start: recommend returns max at once (recommendation:40-45).
    assert finals(run(spec({"decode": role(hi=8)}), rows(10), decode=10)) == [8]
    # A recommendation above max is clamped (recommendation:71-73).
    assert finals(run(spec({"decode": role(hi=8)}), rows(500))) == [8]
    # A fixed role (min == max) is set to that size without metrics (dscaler:149-155).
    s = spec({"prefill": {"minReplicas": 2, "maxReplicas": 2}, "decode": role()})
    assert finals(run(s, rows(30)), "prefill") == [2]


def test_a_reconcile_without_metrics_is_skipped():
    ticks = run(spec(), rows(50, None, 50), decode=1)
    assert finals(ticks) == [5, 5, 5]
    assert ticks[1].skipped == "no metric collected for role decode"


def test_scale_from_zero_needs_a_prometheus_source():
    # No pods, nothing to scrape (collector:246-248): a pod-sourced role stays at 0.
    assert finals(run(spec({"decode": role(lo=0)}), rows(50), decode=0)) == [0]
    # A Prometheus value still arrives: 50 / 10 = 5 (recommendation:86-98).
    assert finals(run(spec({"decode": role(lo=0, source="prometheus")}), rows(50), decode=0)) == [5]


def test_homogeneous_target_scales_replicas():
    s = {
        "metrics": [{"name": "m", "targetValue": "10"}],
        "behavior": QUIET,
        "homogeneousTarget": {
            "minReplicas": 1,
            "maxReplicas": 4,
            "target": {"targetRef": {"name": "ms"}, "metricSources": {"m": {"pod": {}}}},
        },
    }
    policy = a.policy_from_spec(s)
    ticks = a.simulate(policy, a.series_from_rows(policy, [{"time": 0, "m": 30}]), {})
    assert [(r.name, r.final) for r in ticks[0].roles] == [("replicas", 3)]


# --- defaults and refusals


def test_defaults_of_the_crd_and_the_mutating_webhook():
    # Whole behavior missing: the webhook's defaults (mutator:83-117).
    b = a.defaulted_behavior(None)
    assert b["scaleDown"] == {
        "instances": 0,
        "percent": 100,
        "period": "1m",
        "selectPolicy": "Or",
        "stabilizationWindow": "5m",
    }
    assert b["scaleUp"]["panicPolicy"]["panicModeHold"] == "0s"
    # A given scaleDown gets the CRD's defaults plus a 5m window; a given panicPolicy the CRD's.
    b = a.defaulted_behavior({"scaleDown": {}, "scaleUp": {"panicPolicy": {"period": "10s"}}})
    assert b["scaleDown"] == {
        "instances": 1,
        "percent": 100,
        "period": "15s",
        "selectPolicy": "Or",
        "stabilizationWindow": "5m",
    }
    assert b["scaleUp"]["panicPolicy"] == {
        "percent": 1000,
        "panicThresholdPercent": 200,
        "panicModeHold": "60s",
        "period": "10s",
    }
    assert b["scaleUp"]["stablePolicy"]["instances"] == 4


def test_quantities_and_durations():
    assert a.parse_quantity("250m", "x") == 0.25
    assert a.parse_quantity("1Ki", "x") == 1024
    assert a.parse_quantity(3, "x") == 3.0
    assert a.parse_duration_ms("1m30s", "x") == 90_000
    assert a.parse_duration_ms("0", "x") == 0
    with pytest.raises(a.AutoscaleError, match="quoted string"):
        a.parse_quantity(0.5, "targetValue")


@pytest.mark.parametrize(
    "bad, message",
    [
        (spec({"decode": role(lo=5, hi=2)}), "minReplicas 5 > maxReplicas 2"),
        (spec({"decode": role(target="0")}), "must be > 0"),
        (
            spec(
                {"prefill": role(lo=3, hi=8), "decode": role(hi=2)},
                ratioConstraint={
                    "numeratorRole": "prefill",
                    "denominatorRole": "decode",
                    "minRatio": "0",
                    "maxRatio": "1",
                },
            ),
            "not achievable",
        ),
        ({**spec(), "homogeneousTarget": {"minReplicas": 1, "maxReplicas": 2}}, "exactly one of"),
        (spec({"decode": {**role(), "metricSources": {}}}), "would never collect"),
    ],
)
def test_policies_the_webhook_refuses_are_refused(bad, message):
    with pytest.raises(a.AutoscaleError, match=message):
        a.policy_from_spec(bad)


# --- CLI


def test_cli_table(capsys):
    code = main(
        [
            "autoscale",
            "simulate",
            str(FIXTURES / "pd-policy.yaml"),
            "--series",
            str(FIXTURES / "pd-series.csv"),
            "--start",
            "prefill=1,decode=1",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].split() == ["time_s", "decode", "prefill", "note"]
    assert out[2].split() == ["15", "1->3", "P", "1->3", "(desired", "4)", "P"]
    assert "no metric collected for role prefill" in out[4]
    assert out[-1].split() == ["120", "1->1", "1->1"]


def test_cli_json_from_a_json_series(tmp_path, capsys):
    series = tmp_path / "s.json"
    series.write_text(
        json.dumps([{"time": 0, "decode/vllm:num_requests_running": 64, "prefill/vllm:num_requests_waiting": 5}])
    )
    assert main(["autoscale", "simulate", str(FIXTURES / "pd-policy.yaml"), "--series", str(series), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ticks"][0]["roles"]["decode"] == {"current": 1, "desired": 4, "final": 3, "mode": "Panic"}
    assert doc["ticks"][0]["roles"]["prefill"]["final"] == 2  # raised to keep prefill/decode >= 0.5
    assert doc["ticks"][0]["ratioAdjusted"] is True


def test_cli_values_like_file_and_plot(tmp_path, capsys):
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps({"autoscaling": {"policy": spec()}}))
    series = tmp_path / "s.csv"
    series.write_text("time,m\n0,30\n15,30\n")
    out = tmp_path / "plot.png"
    args = ["autoscale", "simulate", str(values), "--key", "autoscaling.policy", "--series", str(series)]
    assert main([*args, "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert capsys.readouterr().out.splitlines()[1].split() == ["0", "1->3"]


@pytest.mark.parametrize(
    "series, message",
    [
        (
            "time,prefill/vllm:num_requests_waiting,oops/m\n0,1,2\n",
            "column 'oops/m': 'oops' is not a role of the policy",
        ),
        ("time,prefill/nope\n0,1\n", "role prefill has no metric 'nope'"),
        ("time,prefill/vllm:num_requests_waiting\n15,1\n0,1\n", "row 2: time 0 is not after the previous row's 15"),
        ("time,prefill/vllm:num_requests_waiting\n0,x\n", "'x' is not a number"),
        ("prefill/vllm:num_requests_waiting\n1\n", "needs a header row with a 'time' column"),
    ],
)
def test_cli_bad_series_exits_2_with_one_line(tmp_path, capsys, series, message):
    path = tmp_path / "s.csv"
    path.write_text(series)
    assert main(["autoscale", "simulate", str(FIXTURES / "pd-policy.yaml"), "--series", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("mooncake-pd autoscale: ")


def test_cli_bad_policy_and_missing_file_exit_2(tmp_path, capsys):
    policy = tmp_path / "p.yaml"
    policy.write_text("kind: ConfigMap\n")
    series = FIXTURES / "pd-series.csv"
    assert main(["autoscale", "simulate", str(policy), "--series", str(series)]) == 2
    assert "holds no AutoscalingPolicy" in capsys.readouterr().err
    assert main(["autoscale", "simulate", str(tmp_path / "none.yaml"), "--series", str(series)]) == 2
    assert "cannot read the policy file" in capsys.readouterr().err
    assert (
        main(["autoscale", "simulate", str(FIXTURES / "pd-policy.yaml"), "--series", str(series), "--start", "x"]) == 2
    )
    assert "expected ROLE=N" in capsys.readouterr().err


def _section_imports() -> dict[str, set[str]]:
    """Per section of the package, the sections its code imports (read from its source)."""
    folder = Path(a.__file__).parent
    graph: dict[str, set[str]] = {}
    for section in a.SECTIONS:
        tree = ast.parse((folder / f"{section}.py").read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        prefix = "mooncake_pd.autoscale."
        graph[section] = {n.removeprefix(prefix).split(".")[0] for n in names if n.startswith(prefix)}
    return graph


def test_the_package_is_its_sections_each_importing_only_earlier_ones():
    folder = Path(a.__file__).parent
    assert sorted(p.stem for p in folder.glob("*.py")) == sorted([*a.SECTIONS, "__init__"])
    graph = _section_imports()
    assert graph["policy"] == set() and graph["output"], graph
    for section, imported in graph.items():
        earlier = set(a.SECTIONS[: a.SECTIONS.index(section)])
        assert imported <= earlier, f"{section} imports {sorted(imported - earlier)}, which do not come before it"
    # So the graph has no cycle: a topological order exists (the sections' own).
    order = list(graphlib.TopologicalSorter(graph).static_order())
    assert sorted(order) == sorted(a.SECTIONS)


@pytest.mark.parametrize("section", ["policy", "parsing", "samples", "window", "algorithm", "output"])
def test_each_section_imports_alone_in_a_fresh_interpreter(section: str):
    program = f"import mooncake_pd.autoscale.{section} as m; print(m.__name__)"
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"mooncake_pd.autoscale.{section}"


def test_the_package_exports_every_public_name_of_its_sections():
    exported = set(a.__all__)
    for section in a.SECTIONS:
        module = importlib.import_module(f"mooncake_pd.autoscale.{section}")
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and (getattr(value, "__module__", None) == module.__name__ or name.isupper())
        }
        assert public <= exported, f"{section}: {sorted(public - exported)} not in mooncake_pd.autoscale.__all__"
        assert all(getattr(a, name) is getattr(module, name) for name in public)
