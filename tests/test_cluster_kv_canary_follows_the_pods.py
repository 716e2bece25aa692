"""The KV canary behind Kthena's router on the local cluster (issue 51 item 1): the real API
server (kube-apiserver v1.34.2, RBAC) judges the chart's ServiceAccount, Role and RoleBinding,
and Kthena v1.0.0's controller renumbers two serving groups in a rollout while the canary runs.

- The canary's token (a TokenRequest for the rendered ServiceAccount, as the kubelet projects it)
  lists the release's pods, and the API server refuses it everything else: secrets, pods of
  another namespace, a watch, a delete.
- Through a rolling update of two groups (a helm upgrade; Kthena replaces groups under new
  ordinals), the canary runs again and again with the pods the API server lists at each run:
  no run fails, and after the rollout it judges the new groups' pairs, not the old ones. Then one
  group's decode stops loading the KV cache, and the very next run fails that pair and only it.

The engines are in-process stand-ins addressed by the pods' IPs (KWOK's pods run nothing): an
address whose pod is gone does not answer, so a run that meets a pod mid-rollout meets what a
real one would. Real engines behind the router: tests/test_e2e_kthena.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import chartfiles, paths
from support.kube.api import ApiError, Client, wait_for
from support.kube.releases import HELM_TIMEOUT, SETTLE_TIMEOUT, pods_of, release_fixture
from support.kube.serviceaccount import api_env, token

pytestmark = pytest.mark.cluster
canary = chartfiles.program("kv_canary")
RELEASE = paths.RELEASE
LABEL = "modelserving.volcano.sh"
ACCOUNT = f"{RELEASE}-kv-canary"
SETS = (
    "restartGracePeriodSeconds=0",  # the default 60 s grace only delays what follows
    "router.type=kthena",
    "decode.port=7100",
    "servingGroups=2",
    "test.kvCanary.cronJob.enabled=true",
)
# A helm upgrade's rollout of two groups: each gone and back within a second or two here
# (out/cluster-recovery.json); 90 s leaves a loaded machine ten times that and more.
ROLLOUT_S = 90.0
# Canary runs during the rollout: one every RUN_EVERY s at most, no more than MAX_RUNS.
RUN_EVERY, MAX_RUNS = 0.2, 600


def serving_ips(api: Client, namespace: str) -> set[str]:
    return {p["status"]["podIP"] for p in pods_of(api, namespace, RELEASE) if canary.serving(p)}


class Engines:
    """Prefill and decode stand-ins at the pods' addresses: an address answers while a serving
    pod has it; each decode loads every prompt token from prefill unless it is `broken`."""

    def __init__(self, api: Client, namespace: str):
        self.api, self.namespace = api, namespace
        self.hits: dict[str, float] = {}
        self.broken: set[str] = set()

    def _host(self, url: str) -> str:
        host = url.split("//", 1)[1].rsplit(":", 1)[0]
        if host not in serving_ips(self.api, self.namespace):
            raise canary.Unreachable(f"{url}: no pod has this address now")
        return host

    def post(self, url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]):
        host = self._host(url)
        params = body.get("kv_transfer_params")
        if params and params.get("do_remote_decode"):
            return 200, {"choices": [{"text": "x"}], "kv_transfer_params": {"remote_host": host}}
        if params:
            self.hits[host] = self.hits.get(host, 0) + (0 if host in self.broken else 10)
        return 200, {"choices": [{"text": "an answer"}], "usage": {"prompt_tokens": 10}}

    def get(self, url: str, timeout: float) -> str:
        return f"vllm:external_prefix_cache_hits_total {self.hits.get(self._host(url), 0)}\n"


# release(namespace): the chart behind Kthena's router with two groups and the canary's CronJob
# (SETS), installed in `namespace`; uninstalled afterwards, also when the test fails.
release = release_fixture(*SETS)


def settled(api: Client, namespace: str, count: int = 4, revisions: set[str] | None = None) -> list[dict[str, Any]]:
    """Wait until the release has `count` serving pods (of other revisions than `revisions`)."""

    def done() -> list[dict[str, Any]] | None:
        pods = [p for p in pods_of(api, namespace, RELEASE) if not p["metadata"].get("deletionTimestamp")]
        new = [p for p in pods if p["metadata"]["labels"].get(f"{LABEL}/revision") not in (revisions or ())]
        return pods if len(pods) == len(new) == count and all(canary.serving(p) for p in pods) else None

    return wait_for(
        f"{count} serving pods in {namespace}", done, SETTLE_TIMEOUT if revisions is None else ROLLOUT_S, interval=0.2
    )


def account_env(cluster, api: Client, namespace: str, folder: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The canary's discover config and env, with a token of the chart's ServiceAccount."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(token(api, namespace, ACCOUNT))
    (folder / "ca.crt").write_bytes(cluster.ca.read_bytes())
    discover = {
        "namespace": namespace,
        "selector": f"modelserving.volcano.sh/name={RELEASE}",
        "roles": {"prefill": "prefill", "decode": "decode"},
        "port": {"prefill": 7100, "decode": 7100},
        "serviceAccount": str(folder),
    }
    return discover, api_env(api)


def test_the_canarys_account_lists_the_release_pods_and_nothing_else(cluster, release, tmp_path: Path):
    api = cluster.client()
    namespace = "canary-access"
    release(namespace)
    pods = settled(api, namespace)
    discover, env = account_env(cluster, api, namespace, tmp_path / "sa")
    listed = canary.api_pods(discover, env)
    assert sorted(p["metadata"]["name"] for p in listed) == sorted(p["metadata"]["name"] for p in pods)
    # The projected volume's CA comes from kube-root-ca.crt, which kube-controller-manager
    # publishes in the namespace.
    assert "ca.crt" in api.get("v1", "ConfigMap", "kube-root-ca.crt", namespace)["data"]
    as_canary = Client(api.server, (tmp_path / "sa" / "token").read_text(), cluster.ca)
    refused = {
        "secrets": ("GET", f"/api/v1/namespaces/{namespace}/secrets"),
        "pods of another namespace": ("GET", "/api/v1/namespaces/default/pods"),
        "pods of every namespace": ("GET", "/api/v1/pods"),
        "a watch": ("GET", f"/api/v1/namespaces/{namespace}/pods?watch=true"),
        "a delete": ("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pods[0]['metadata']['name']}"),
        "a log": ("GET", f"/api/v1/namespaces/{namespace}/pods/{pods[0]['metadata']['name']}/log"),
    }
    for what, (method, path) in refused.items():
        with pytest.raises(ApiError) as refusal:
            as_canary.request(method, path, timeout=10)
        assert refusal.value.status == 403, f"{what}: {refusal.value}"
    assert as_canary.request("GET", f"/api/v1/namespaces/{namespace}/pods/{pods[0]['metadata']['name']}")


def test_a_two_group_rollout_raises_no_canary_failure_and_a_broken_pair_fails_at_the_next_run(
    cluster, release, tmp_path: Path
):
    api = cluster.client()
    namespace = "canary-rollout"
    runner = release(namespace)
    old = settled(api, namespace)
    revisions = {p["metadata"]["labels"][f"{LABEL}/revision"] for p in old}
    discover, env = account_env(cluster, api, namespace, tmp_path / "sa")
    config = {"model": "m", "prompt": "Hello", "maxTokens": 4, "transferMetrics": None, "discover": discover}
    engines = Engines(api, namespace)

    def one_run() -> list[Any]:
        return canary.run_discovered(
            config, lambda: canary.api_pods(discover, env), engines.post, engines.get, sleep=lambda s: time.sleep(0.5)
        )

    first = one_run()
    assert [r.ok for r in first] == [True, True], [r.line() for r in first]

    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            runner.upgrade(RELEASE, namespace, sets=(*SETS, "decode.args.max-num-seqs=4"))
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)

    thread = threading.Thread(target=upgrade)
    thread.start()
    runs: list[list[str]] = []
    deadline = time.monotonic() + ROLLOUT_S
    try:
        while len(runs) < MAX_RUNS and time.monotonic() < deadline:
            results = one_run()
            runs.append([r.line() for r in results])
            judged = [r for r in results if not r.skipped]
            assert judged and all(r.ok for r in judged), f"run {len(runs)} during the rollout: {runs[-1]}"
            pods = [p for p in pods_of(api, namespace, RELEASE) if canary.serving(p)]
            if (
                not thread.is_alive()
                and len(pods) == 4
                and not revisions & {p["metadata"]["labels"][f"{LABEL}/revision"] for p in pods}
            ):
                break
            time.sleep(RUN_EVERY)
    finally:
        thread.join(timeout=HELM_TIMEOUT + 20)
    assert not errors, errors
    new = settled(api, namespace, revisions=revisions)
    groups = sorted({p["metadata"]["labels"][f"{LABEL}/group-name"] for p in new})
    assert groups != [f"{RELEASE}-0", f"{RELEASE}-1"], "the rollout kept the groups' ordinals: nothing renumbered"
    assert len(runs) >= 2, runs

    after = one_run()
    judged = sorted((r.prefill, r.decode) for r in after)
    assert judged == [(f"{g}-prefill-0-0", f"{g}-decode-0-0") for g in groups], [r.line() for r in after]
    assert all(r.ok for r in after), [r.line() for r in after]

    # One group's decode stops loading the KV cache: the next run fails that pair, and only it.
    broken = next(p for p in new if p["metadata"]["name"] == f"{groups[0]}-decode-0-0")
    engines.broken = {broken["status"]["podIP"]}
    by_decode = {r.decode: r for r in one_run()}
    failed = by_decode[broken["metadata"]["name"]]
    assert not failed.ok and "the KV cache did not move" in failed.line(), failed.line()
    assert by_decode[f"{groups[1]}-decode-0-0"].ok
