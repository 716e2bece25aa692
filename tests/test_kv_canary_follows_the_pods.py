"""The KV canary behind Kthena's router judges the pairs the router forms now (issue 51 item 1):
it lists the release's engine pods from the API server at each run and pairs each Ready decode
entry pod with each Ready prefill entry pod of its serving group, so a rollout that renumbers
the groups, or an autoscaled replica, never makes it judge a pod that is gone or miss one that
came; a pair whose pod goes during the run is skipped and said, never failed. Behind the PD
proxy it keeps the proxy's own list. The chart gives it a ServiceAccount that may only get and
list the namespace's pods, mounted into the canary's container alone.

The real API server's RBAC and a two-group rollout by Kthena's controller:
tests/test_cluster_kv_canary_follows_the_pods.py; real engines behind the router:
tests/test_e2e_kthena.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import Renderer
from mooncake_pd import chartfiles, paths

canary = chartfiles.program("kv_canary")
DISCOVER = {
    "namespace": "serving",
    "selector": "modelserving.volcano.sh/name=deepseek-pd",
    "roles": {"prefill": "prefill", "decode": "decode"},
    "port": {"prefill": 7100, "decode": 7100},
    "serviceAccount": "/var/run/secrets/kubernetes.io/serviceaccount",
}
KTHENA = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena.yaml"


def pod(
    name: str, group: str, role: str, ip: str, ready: bool = True, entry: bool = True, deleting: bool = False
) -> dict[str, Any]:
    """An engine pod as Kthena v1.0.0 labels it and the API server lists it."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            "modelserving.volcano.sh/name": "deepseek-pd",
            "modelserving.volcano.sh/group-name": group,
            "modelserving.volcano.sh/role": role,
            "modelserving.volcano.sh/entry": "true" if entry else "false",
        },
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-07T06:00:00Z"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": metadata, "status": {"podIP": ip, "conditions": conditions}}


def group(n: int, ip: int) -> list[dict[str, Any]]:
    return [
        pod(f"deepseek-pd-{n}-prefill-0-0", f"deepseek-pd-{n}", "prefill", f"10.0.0.{ip}"),
        pod(f"deepseek-pd-{n}-decode-0-0", f"deepseek-pd-{n}", "decode", f"10.0.0.{ip + 1}"),
    ]


def names(pairs) -> list[tuple[str, str]]:
    return [(p["name"], d["name"]) for p, d in pairs]


def test_pairs_are_formed_within_each_serving_group_as_the_router_forms_them():
    pods = group(1, 10) + group(2, 20)
    pairs = canary.discovered_pairs(DISCOVER, pods)
    assert names(pairs) == [
        ("deepseek-pd-1-prefill-0-0", "deepseek-pd-1-decode-0-0"),
        ("deepseek-pd-2-prefill-0-0", "deepseek-pd-2-decode-0-0"),
    ]
    assert pairs[0][0]["url"] == "http://10.0.0.10:7100" and pairs[0][1]["url"] == "http://10.0.0.11:7100"


def test_a_renumbered_group_and_an_added_replica_are_judged_and_gone_ones_are_not():
    # After a rollout group 0 came back as group 2; the autoscaler added a prefill replica to it.
    pods = group(1, 10) + group(2, 20)
    pods.append(pod("deepseek-pd-2-prefill-1-0", "deepseek-pd-2", "prefill", "10.0.0.30"))
    # Group 0's old pods on their way out, a worker of a multi-node instance, a replica starting.
    pods.append(pod("deepseek-pd-0-prefill-0-0", "deepseek-pd-0", "prefill", "10.0.0.1", deleting=True))
    pods.append(pod("deepseek-pd-0-decode-0-0", "deepseek-pd-0", "decode", "10.0.0.2", deleting=True))
    pods.append(pod("deepseek-pd-2-decode-0-1", "deepseek-pd-2", "decode", "10.0.0.40", entry=False))
    pods.append(pod("deepseek-pd-1-prefill-1-0", "deepseek-pd-1", "prefill", "10.0.0.50", ready=False))
    assert names(canary.discovered_pairs(DISCOVER, pods)) == [
        ("deepseek-pd-1-prefill-0-0", "deepseek-pd-1-decode-0-0"),
        ("deepseek-pd-2-prefill-0-0", "deepseek-pd-2-decode-0-0"),
        ("deepseek-pd-2-prefill-1-0", "deepseek-pd-2-decode-0-0"),
    ]


def test_an_ipv6_pod_address_is_bracketed():
    (pair,) = canary.discovered_pairs(
        DISCOVER,
        [pod("p", "g", "prefill", "fd00::1"), pod("d", "g", "decode", "fd00::2")],
    )
    assert pair[0]["url"] == "http://[fd00::1]:7100"


class Engines:
    """Engines by address as the canary sees them over HTTP: each decode loads every prompt
    token from prefill, except those in `broken`; an address in `gone` does not answer."""

    def __init__(self) -> None:
        self.hits: dict[str, float] = {}
        self.broken: set[str] = set()
        self.gone: set[str] = set()

    def host(self, url: str) -> str:
        return url.split("//", 1)[1].rsplit(":", 1)[0]

    def post(self, url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]):
        host = self.host(url)
        if host in self.gone:
            raise canary.Unreachable(f"{url}: connection refused")
        params = body.get("kv_transfer_params")
        if params and params.get("do_remote_decode"):
            return 200, {"choices": [{"text": "x"}], "kv_transfer_params": {"remote_engine_id": host}}
        if params:
            self.hits[host] = self.hits.get(host, 0) + (0 if host in self.broken else 10)
        return 200, {"choices": [{"text": "an answer"}], "usage": {"prompt_tokens": 10}}

    def get(self, url: str, timeout: float) -> str:
        if self.host(url) in self.gone:
            raise canary.Unreachable(f"{url}: connection refused")
        return f"vllm:external_prefix_cache_hits_total {self.hits.get(self.host(url), 0)}\n"


def config() -> dict[str, Any]:
    return {"model": "m", "prompt": "Hello", "maxTokens": 4, "transferMetrics": None, "discover": DISCOVER}


def test_a_pair_whose_pod_goes_during_the_run_is_skipped_and_said_not_failed():
    engines = Engines()
    listed = group(1, 10) + group(2, 20)
    after = group(2, 20)  # group 1 went while the canary ran (a rollout)
    engines.gone = {"10.0.0.10", "10.0.0.11"}
    calls = iter([listed, after])
    results = canary.run_discovered(
        config(), lambda: next(calls, after), engines.post, engines.get, sleep=lambda s: None
    )
    lines = [r.line() for r in results]
    assert lines[0].startswith("SKIP: deepseek-pd-1-prefill-0-0 -> deepseek-pd-1-decode-0-0: a pod of the pair is gone")
    assert lines[1].startswith("PASS: deepseek-pd-2-prefill-0-0 -> deepseek-pd-2-decode-0-0")


def test_an_unreachable_pair_whose_pods_still_serve_fails():
    # NetworkPolicy, a hung engine: the pods are Ready and listed, and nothing answers.
    engines = Engines()
    engines.gone = {"10.0.0.10"}
    (result,) = canary.run_discovered(config(), lambda: group(1, 10), engines.post, engines.get, sleep=lambda s: None)
    assert not result.ok and not result.skipped and "not reachable" in result.line()


def test_a_pair_that_does_not_move_the_kv_cache_fails_beside_healthy_ones():
    engines = Engines()
    engines.broken = {"10.0.0.21"}
    results = canary.run_discovered(config(), lambda: group(1, 10) + group(2, 20), engines.post, engines.get)
    assert [r.ok for r in results] == [True, False]
    assert "the KV cache did not move" in results[1].line()


def test_no_pair_yet_is_looked_for_again_then_fails(monkeypatch: pytest.MonkeyPatch, capsys):
    monkeypatch.setattr(canary, "ATTEMPTS", 3)
    sleeps: list[float] = []
    listings = iter([[], group(1, 10)[:1], group(1, 10)])
    engines = Engines()
    results = canary.run_discovered(config(), lambda: next(listings), engines.post, engines.get, sleep=sleeps.append)
    assert [r.ok for r in results] == [True] and sleeps == [canary.RETRY_SECONDS] * 2
    assert "no Ready prefill/decode pair of one serving group" in capsys.readouterr().out
    assert canary.run_discovered(config(), lambda: [], engines.post, engines.get, sleep=lambda s: None) == []


def test_outside_a_pod_the_canary_says_it_cannot_list_the_pods(capsys):
    assert canary.main({"CANARY_CONFIG": json.dumps(config())}) == 1
    assert "FAIL: the engine pods could not be listed: KUBERNETES_SERVICE_HOST" in capsys.readouterr().out


# ---- What the chart renders ------------------------------------------------------------------


def _pods(rendered) -> list[dict[str, Any]]:
    """The specs of the pods that run the canary: the helm test pod, the CronJob's."""
    specs = [rendered.one("Pod")["spec"]]
    specs += [c["spec"]["jobTemplate"]["spec"]["template"]["spec"] for c in rendered.find("CronJob")]
    return specs


def test_behind_kthenas_router_the_canary_finds_the_pods_with_a_least_privilege_account(render: Renderer):
    rendered = render((KTHENA,), overrides={"test": {"kvCanary": {"cronJob": {"enabled": True}}}})
    (account,) = rendered.find("ServiceAccount")
    (role,) = rendered.find("Role")
    (binding,) = rendered.find("RoleBinding")
    name = account["metadata"]["name"]
    assert name == role["metadata"]["name"] == binding["metadata"]["name"] == "deepseek-pd-kv-canary"
    # get and list pods in the release's namespace: nothing else, no watch, no write.
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]
    assert rendered.find("ClusterRole") == [] and rendered.find("ClusterRoleBinding") == []
    specs = _pods(rendered)
    assert len(specs) == 2
    for spec in specs:
        assert spec["serviceAccountName"] == name and spec["automountServiceAccountToken"] is False
        volume = next(v for v in spec["volumes"] if v["name"] == "kv-canary-api")
        sources = volume["projected"]["sources"]
        assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
        assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
        for container in spec["containers"]:
            mounted = [m["name"] for m in container.get("volumeMounts", [])]
            # The token reaches the canary's container alone; the chat check has none.
            assert ("kv-canary-api" in mounted) == (container["name"] == "kv-canary"), container["name"]
        container = next(c for c in spec["containers"] if c["name"] == "kv-canary")
        config = json.loads(next(e["value"] for e in container["env"] if e["name"] == "CANARY_CONFIG"))
        assert "prefill" not in config and "decode" not in config
        assert config["discover"] == {
            "namespace": "default",
            "selector": f"modelserving.volcano.sh/name={rendered.modelserving['metadata']['name']}",
            "roles": {"prefill": "prefill", "decode": "decode"},
            "port": {"prefill": 7100, "decode": 7100},
            "serviceAccount": "/var/run/secrets/kubernetes.io/serviceaccount",
        }


def test_behind_the_proxy_the_canary_keeps_the_proxys_list_and_has_no_api_access(render: Renderer):
    rendered = render(overrides={"test": {"kvCanary": {"cronJob": {"enabled": True}}}})
    assert rendered.find("ServiceAccount") == [] and rendered.find("Role") == []
    for spec in _pods(rendered):
        assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
        container = next(c for c in spec["containers"] if c["name"] == "kv-canary")
        config = json.loads(next(e["value"] for e in container["env"] if e["name"] == "CANARY_CONFIG"))
        assert "discover" not in config and config["prefill"] and config["decode"]


def test_under_autoscaling_the_canary_runs_and_its_cronjob_is_allowed(render: Renderer):
    values = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena-autoscaling-cost-first.yaml"
    rendered = render((values,), overrides={"test": {"kvCanary": {"cronJob": {"enabled": True}}}})
    assert [c["name"] for c in rendered.one("Pod")["spec"]["containers"]] == ["chat", "kv-canary"]
    assert len(rendered.find("CronJob")) == 1 and len(rendered.find("Role")) == 1
