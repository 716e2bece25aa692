"""The KV-transfer canary (chart/files/kv_canary.py): its judgement on decode's counters, the
requests it sends, and where the chart runs it (the helm-test pod, the CronJob, the alert that
reads the CronJob). Conformance runs it in the slim Python image against stand-in engines; the
e2e runs it against real engines, healthy and with a KV cache that does not move."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conftest import Renderer
from mooncake_pd import chartfiles, paths

canary = chartfiles.program("kv_canary")
NIXL = {"count": "vllm:nixl_xfer_time_seconds_count", "failed": "vllm:nixl_num_failed_transfers_total"}
CONFIG: dict[str, Any] = {
    "model": "ds_r1",
    "prompt": "Hello",
    "maxTokens": 4,
    "prefill": [{"name": "p0", "url": "http://p0:7100"}, {"name": "p1", "url": "http://p1:7100"}],
    "decode": [{"name": "d0", "url": "http://d0:7101"}],
    "transferMetrics": NIXL,
}


def metrics(hits: float, count: float = 0, failed: float = 0) -> str:
    return (
        "# HELP vllm:external_prefix_cache_hits_total x\n"
        f'vllm:external_prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
        f'vllm:nixl_xfer_time_seconds_count{{engine="0"}} {count}\n'
        f'vllm:nixl_num_failed_transfers_total{{engine="0"}} {failed}\n'
    )


class FakeEngines:
    """Prefill and decode as the canary sees them over HTTP; decode's counters move as told, and
    prefill alone answers `reference` (decode answers "an answer")."""

    def __init__(
        self,
        loaded: float = 10,
        transfers: float = 1,
        failed: float = 0,
        params: Any = "default",
        reference: str = "an answer",
    ):
        self.loaded, self.transfers, self.failed, self.reference = loaded, transfers, failed, reference
        self.params = {"remote_engine_id": "e1", "remote_block_ids": [1]} if params == "default" else params
        self.hits = self.count = self.fails = 0.0
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        self.status = {"prefill": 200, "decode": 200, "reference": 200}

    def post(
        self, url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        self.posts.append((url, body))
        self.headers.append(headers)
        if ":7100" in url and "kv_transfer_params" not in body:
            return self.status["reference"], {"choices": [{"text": self.reference}]}
        if ":7100" in url:
            return self.status["prefill"], {"choices": [{"text": "x"}], "kv_transfer_params": self.params}
        self.hits += self.loaded
        self.count += self.transfers
        self.fails += self.failed
        return self.status["decode"], {"choices": [{"text": "an answer"}], "usage": {"prompt_tokens": 10}}

    def get(self, url: str, timeout: float) -> str:
        assert url.endswith("/metrics")
        return metrics(self.hits, self.count, self.fails)


def test_a_pair_whose_kv_cache_came_over_passes_and_the_requests_are_the_proxys():
    engines = FakeEngines()
    results = canary.run(CONFIG, engines.post, engines.get, now=lambda: 1.5)
    assert [(r.prefill, r.decode, r.ok) for r in results] == [("p0", "d0", True), ("p1", "d0", True)]
    (p_url, first), (d_url, second), (r_url, alone) = engines.posts[:3]
    assert p_url == r_url == "http://p0:7100/v1/completions" and d_url == "http://d0:7101/v1/completions"
    assert first["max_tokens"] == 1 and first["kv_transfer_params"]["do_remote_decode"] is True
    assert second["kv_transfer_params"] == engines.params and second["max_tokens"] == 4
    # The reference: prefill alone, greedy, as many tokens as decode's answer, no KV transfer.
    assert "kv_transfer_params" not in alone and alone["max_tokens"] == 4 and alone["temperature"] == 0
    assert alone["prompt"] == first["prompt"] == second["prompt"]
    # One request id for prefill's and decode's request (the connector pairs them by it), another
    # for the reference; a new one per pair.
    ids = [h["X-Request-Id"] for h in engines.headers]
    assert ids[0] == ids[1] != ids[2] and ids[3] == ids[4] != ids[0]
    # A fresh nonce per pair: decode's own prefix cache cannot answer a repeated prompt.
    prompts = {body["prompt"] for _, body in engines.posts}
    assert len(prompts) == 2 and all(p.endswith(": Hello") for p in prompts)
    assert results[0].line() == (
        "PASS: p0 -> d0: vllm:external_prefix_cache_hits_total +10 for 10 prompt tokens, transfers +1, failed +0"
    )


@pytest.mark.parametrize(
    ("engines", "problem"),
    [
        (FakeEngines(loaded=0), "decode loaded 0 of 10 prompt tokens from prefill"),
        (FakeEngines(loaded=4), "decode loaded 4 of 10 prompt tokens"),
        (FakeEngines(transfers=0), "vllm:nixl_xfer_time_seconds_count did not rise"),
        (FakeEngines(failed=1), "vllm:nixl_num_failed_transfers_total rose by 1"),
        (FakeEngines(params=None), "prefill answered without kv_transfer_params"),
        # The counters moved and the answer is wrong: MooncakeConnector given two request ids.
        (
            FakeEngines(reference="the right answer"),
            "decode answered 'an answer' where prefill alone answered 'the right answer'",
        ),
    ],
)
def test_a_kv_cache_that_did_not_move_fails_the_pair_naming_why(engines: FakeEngines, problem: str):
    results = canary.run(CONFIG, engines.post, engines.get)
    assert not any(r.ok for r in results)
    assert all(problem in r.line() and r.line().startswith("FAIL: ") for r in results), results[0].line()


def test_http_errors_and_unreachable_engines_fail_the_pair():
    engines = FakeEngines()
    engines.status["decode"] = 500
    assert "decode answered HTTP 500" in canary.run(CONFIG, engines.post, engines.get)[0].line()
    engines = FakeEngines()
    engines.status["reference"] = 503
    result = canary.run(CONFIG, engines.post, engines.get)[0]
    assert not result.ok and "prefill answered the reference request HTTP 503" in result.line()

    def unreachable(url: str, timeout: float) -> str:
        raise canary.Unreachable(f"{url}: refused")

    results = canary.run(CONFIG, engines.post, unreachable)
    assert [r.ok for r in results] == [False, False] and "not reachable: http://d0:7101/metrics" in results[0].line()


def test_without_transfer_counters_the_hits_alone_decide():
    """vLLM-Ascend's MooncakeConnectorV1 exports no transfer counter (profiles.yaml)."""
    config = {**CONFIG, "transferMetrics": None}
    engines = FakeEngines(transfers=0)
    assert all(r.ok for r in canary.run(config, engines.post, engines.get))
    assert not any(r.ok for r in canary.run(config, FakeEngines(loaded=0).post, FakeEngines(loaded=0).get))


def test_other_traffic_only_adds_to_the_counters():
    assert canary.judge(canary.PairResult("p", "d", prompt_tokens=10), metrics(5, 3), metrics(95, 12), NIXL).ok


def test_main_retries_engines_that_do_not_answer_yet(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setattr(canary, "ATTEMPTS", 2)
    monkeypatch.setattr(canary, "RETRY_SECONDS", 0)
    config = {**CONFIG, "prefill": [{"name": "p", "url": "http://127.0.0.1:9"}], "decode": []}
    assert canary.main({"CANARY_CONFIG": json.dumps(config)}) == 1
    assert "FAIL: not reachable: http://127.0.0.1:9/health" in capsys.readouterr().out


# ---- Where the chart runs it ----------------------------------------------------------------


def _canary_container(spec: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in spec["containers"] if c["name"] == "kv-canary")


def test_the_test_pod_pairs_every_prefill_with_every_decode(render: Renderer):
    rendered = render((paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-2p2d.yaml",))
    container = _canary_container(rendered.one("Pod")["spec"])
    config = json.loads(next(e["value"] for e in container["env"] if e["name"] == "CANARY_CONFIG"))
    services = {s["metadata"]["name"]: s for s in rendered.find("Service")}
    for role in ("prefill", "decode"):
        assert len(config[role]) == 2
        for instance in config[role]:
            host, port = re.fullmatch(r"http://([^.]+)\.default\.svc:(\d+)", instance["url"]).groups()
            assert host == instance["name"] and services[host]["spec"]["ports"][0]["port"] == int(port)
    # The connector of the Ascend profile counts no transfers: the hits alone decide there.
    assert (
        config["transferMetrics"] is None
        and config["model"] == rendered.modelserving["metadata"]["annotations"]["mooncake-pd/served-model-name"]
    )
    assert container["command"] == ["python3", "/workspace/kv_canary.py"]
    assert "kv_canary.py" in rendered.one("ConfigMap")["data"]


def test_nixl_profiles_give_the_canary_the_transfer_counters(render: Renderer):
    rendered = render((paths.CHART / "ci" / "cpu-values.yaml",))
    container = _canary_container(rendered.one("Pod")["spec"])
    config = json.loads(next(e["value"] for e in container["env"] if e["name"] == "CANARY_CONFIG"))
    assert config["transferMetrics"] == NIXL


def test_the_cronjob_and_its_alert(render: Renderer):
    rendered = render(
        overrides={
            "test": {"kvCanary": {"enabled": False, "cronJob": {"enabled": True, "intervalMinutes": 60}}},
            "metrics": {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
            "networkPolicy": {"enabled": True},
        }
    )
    cron = rendered.one("CronJob")
    assert cron["metadata"]["name"] == "deepseek-pd-kv-canary" and cron["spec"]["schedule"] == "0 * * * *"
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] == 600
    assert [c["name"] for c in job["template"]["spec"]["containers"]] == ["kv-canary"]
    assert job["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "kv-canary"
    # The test pod's own canary is off; the CronJob's program is still in the ConfigMap.
    assert [c["name"] for c in rendered.one("Pod")["spec"]["containers"]] == ["chat"]
    assert "kv_canary.py" in rendered.one("ConfigMap")["data"]
    rules = rendered.one("PrometheusRule")["spec"]["groups"][0]["rules"]
    alert = next(r for r in rules if r["alert"] == "MooncakePdKvCanaryFailing")
    # Two intervals and the deadline: 2 x 3600 + 600.
    assert "> 7800" in alert["expr"] and 'cronjob="deepseek-pd-kv-canary"' in alert["expr"]
    policy = next(p for p in rendered.find("NetworkPolicy") if p["metadata"]["name"] == "deepseek-pd-engines")
    peers = policy["spec"]["ingress"][0]["from"]
    assert any(
        (p.get("podSelector") or {}).get("matchExpressions", [{}])[0].get("values") == ["test", "kv-canary"]
        for p in peers
    )
