"""mooncake-pd kv_canary: proves, for every prefill/decode pair, that a request's KV cache came
over from prefill to decode and that decode answered from it, not only that a request answered.

A chat check through the router passes when PD has silently degraded: decode computes every
prompt itself when the KV cache stops moving (a prefill restarted under a NIXL engine_id decode
had met, a side channel that is not reachable) and still answers. And counters can pass where
the answers are wrong: upstream vLLM's MooncakeConnector, given two requests whose ids differ,
moves nothing, and decode still counts every prompt token as an external hit and answers from
blocks it never received (measured with vLLM 0.13.0 on CPU, 2026-12-04). So for each pair the
canary does what the PD proxy does, itself, and judges both the counters and the answer:
1. decode's /metrics (before);
2. the prompt to prefill with kv_transfer_params {do_remote_decode: true} and max_tokens 1, as
   vLLM-Ascend v0.13.0's example proxy sends it (load_balance_proxy_server_example.py,
   send_request_to_service), with one X-Request-Id that step 3 sends too (the proxy's, ~558 and
   ~588: the connector matches prefill's and decode's request by it); prefill answers with the
   kv_transfer_params decode needs;
3. the same prompt to decode with those kv_transfer_params, greedy;
4. decode's /metrics (after);
5. the reference: the same prompt to prefill alone, greedy, as many tokens, no KV transfer (its
   own prefix cache holds only blocks it computed).
The pair passes when decode's answer equals the reference, its
vllm:external_prefix_cache_hits_total (prompt tokens it did not compute, vllm/v1/metrics/loggers.py)
rose by at least MIN_TRANSFERRED_FRACTION of the request's prompt tokens, and, where the connector
counts transfers (NIXL), one more transfer was counted and no failed one. Each prompt starts with
a fresh nonce, so decode's own prefix cache cannot answer it. Other traffic only adds to the
counters, so a busy deployment never fails it falsely; a failure counted while it ran fails the
pair, whoever's request it was.

Which pairs: behind the PD proxy, the instances the proxy itself is given (the replica Services,
listed at render: "prefill" and "decode"). Behind Kthena's router, the pods the router finds
("discover"): the canary lists the release's engine pods from the API server at each run, by
the labels Kthena v1.0.0 sets (pkg/apis/workload/v1alpha1/labels.go), and pairs each Ready
decode entry pod with each Ready prefill entry pod of its serving group, as the router pairs
them (pkg/kthena-router/scheduler/scheduler_impl.go, Schedule: GetPrefillPodsForDecodeGroup). A
rollout renumbers groups, and the autoscaler adds and removes replicas; a list made at render
would then judge pods that are gone and miss those that came. A pod that is gone or no longer
Ready when its pair's turn comes (a rollout under way) is skipped and said, never failed: its
replacement is judged at the next run.

Env: CANARY_CONFIG, JSON: {"model", "prompt", "maxTokens", "transferMetrics": {"count",
"failed"} or null, and either "prefill": [{"name", "url"}], "decode": [{"name", "url"}] or
"discover": {"namespace", "selector", "roles": {"prefill", "decode"}, "port": {"prefill",
"decode"}, "serviceAccount": the folder of the token, ca.crt (a projected volume)}};
KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set by the kubelet) with "discover";
OPENAI_API_KEY (engine.apiKeySecret, optional), sent to the engines as a bearer token.
Exit 0 when every pair judged passed and at least one was, 1 otherwise. Python 3.9+, standard
library only.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
# Decode counts every prompt token it loaded as an external hit: the e2e run measured hits equal to
# prompt tokens on vLLM 0.13 with NIXL. Half leaves room for a connector that recomputes the
# last block itself, and is far above what a decode that computes the prompt counts (0).
MIN_TRANSFERRED_FRACTION = 0.5
ATTEMPTS = 12
RETRY_SECONDS = 10
TIMEOUT_SECONDS = 300
METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(?P<value>\S+)")
# What prefill is asked for: vLLM-Ascend v0.13.0's example proxy's kv_transfer_params
# (send_request_to_service), which NixlConnector and MooncakeConnector read alike.
PREFILL_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}

# post(url, body, timeout, headers) -> (HTTP status, JSON body); get(url, timeout) -> text.
Post = Callable[[str, dict[str, Any], float, dict[str, str]], tuple[int, dict[str, Any]]]
Get = Callable[[str, float], str]
# (prefill, decode) instances, each {"name", "url"}.
Pairs = list[tuple[dict[str, str], dict[str, str]]]


class Unreachable(Exception):
    """An engine did not answer at all (connection refused, DNS, timeout)."""


class ApiError(Exception):
    """The API server did not list the pods (no access, no answer)."""


# The labels Kthena v1.0.0 sets on the pods of a ModelServing
# (pkg/apis/workload/v1alpha1/labels.go): its name, the serving group, the role, and the entry
# pod of a role instance (the one that serves; workers of a multi-node instance do not).
GROUP_LABEL = "modelserving.volcano.sh/group-name"
ROLE_LABEL = "modelserving.volcano.sh/role"
ENTRY_LABEL = "modelserving.volcano.sh/entry"


@dataclass
class PairResult:
    prefill: str
    decode: str
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    external_hits: float = 0.0
    transfers: float | None = None
    failed_transfers: float | None = None
    answer: str = ""
    reference: str | None = None
    skipped: str = ""

    def line(self) -> str:
        if self.skipped:
            return f"SKIP: {self.prefill} -> {self.decode}: {self.skipped}; {'; '.join(self.problems)}"
        head = f"{'PASS' if self.ok else 'FAIL'}: {self.prefill} -> {self.decode}"
        facts = f"{EXTERNAL_HITS} +{self.external_hits:g} for {self.prompt_tokens} prompt tokens"
        if self.transfers is not None:
            facts += f", transfers +{self.transfers:g}, failed +{self.failed_transfers or 0:g}"
        return f"{head}: {facts}" + (f"; {'; '.join(self.problems)}" if self.problems else "")


def metric_total(text: str, name: str) -> float:
    """The sum of a metric's samples (every label set) in Prometheus text; 0 when absent."""
    total = 0.0
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if m and m.group("name") == name:
            total += float(m.group("value"))
    return total


def judge(result: PairResult, before: str, after: str, transfer_metrics: dict[str, str] | None) -> PairResult:
    """Decide a pair whose requests answered, from decode's answer against the reference and
    decode's /metrics before and after."""
    if result.reference is not None and result.answer != result.reference:
        result.problems.append(
            f"decode answered {result.answer[:80]!r} where prefill alone answered {result.reference[:80]!r} "
            "(greedy, the same prompt): decode did not answer from the prompt's KV cache"
        )
    result.external_hits = metric_total(after, EXTERNAL_HITS) - metric_total(before, EXTERNAL_HITS)
    needed = MIN_TRANSFERRED_FRACTION * result.prompt_tokens
    if result.prompt_tokens <= 0:
        result.problems.append("decode reported no prompt tokens (usage.prompt_tokens)")
    elif result.external_hits < needed:
        result.problems.append(
            f"decode loaded {result.external_hits:g} of {result.prompt_tokens} prompt tokens from prefill "
            f"(at least {needed:g} expected): it computed the prompt itself, the KV cache did not move"
        )
    if transfer_metrics:
        result.transfers = metric_total(after, transfer_metrics["count"]) - metric_total(
            before, transfer_metrics["count"]
        )
        result.failed_transfers = metric_total(after, transfer_metrics["failed"]) - metric_total(
            before, transfer_metrics["failed"]
        )
        if result.transfers < 1:
            result.problems.append(f"{transfer_metrics['count']} did not rise: no transfer reached decode")
        if result.failed_transfers > 0:
            result.problems.append(f"{transfer_metrics['failed']} rose by {result.failed_transfers:g}")
    result.ok = not result.problems
    return result


def completion_text(body: dict[str, Any]) -> str:
    return ((body.get("choices") or [{}])[0].get("text")) or ""


def probe_pair(
    prefill: dict[str, str],
    decode: dict[str, str],
    config: dict[str, Any],
    nonce: str,
    post: Post,
    get: Get,
    timeout: float = TIMEOUT_SECONDS,
) -> PairResult:
    """One pair's proof. `post` and `get` do the HTTP (raising Unreachable when nothing answers)."""
    result = PairResult(prefill["name"], decode["name"])
    prompt = f"mooncake-pd kv canary {nonce}: {config['prompt']}"
    request = {"model": config["model"], "prompt": prompt, "temperature": 0}
    # One id for prefill's and decode's request, as the proxy and Kthena's router send: the
    # connector pairs the two by it (MooncakeConnector moves nothing when they differ).
    request_id = f"mooncake-pd-kv-canary-{nonce}"
    pair_headers = {"X-Request-Id": request_id}
    before = get(decode["url"] + "/metrics", timeout)
    status, first = post(
        prefill["url"] + "/v1/completions",
        dict(request, max_tokens=1, kv_transfer_params=PREFILL_PARAMS),
        timeout,
        pair_headers,
    )
    params = first.get("kv_transfer_params")
    if status != 200:
        result.problems.append(f"prefill answered HTTP {status}: {json.dumps(first)[:300]}")
        return result
    if not params:
        result.problems.append("prefill answered without kv_transfer_params: it is not a KV producer")
        return result
    status, second = post(
        decode["url"] + "/v1/completions",
        dict(request, max_tokens=int(config["maxTokens"]), kv_transfer_params=params),
        timeout,
        pair_headers,
    )
    if status != 200:
        result.problems.append(f"decode answered HTTP {status}: {json.dumps(second)[:300]}")
        return result
    result.prompt_tokens = int((second.get("usage") or {}).get("prompt_tokens") or 0)
    result.answer = completion_text(second)
    if not result.answer:
        result.problems.append("decode answered an empty completion")
    after = get(decode["url"] + "/metrics", timeout)
    status, alone = post(
        prefill["url"] + "/v1/completions",
        dict(request, max_tokens=int(config["maxTokens"])),
        timeout,
        {"X-Request-Id": request_id + "-reference"},
    )
    if status != 200:
        result.problems.append(f"prefill answered the reference request HTTP {status}: {json.dumps(alone)[:300]}")
    else:
        result.reference = completion_text(alone)
    return judge(result, before, after, config.get("transferMetrics"))


def static_pairs(config: dict[str, Any]) -> Pairs:
    """Every prefill x decode instance of a rendered list, as the PD proxy may pair them."""
    return [(p, d) for p in config["prefill"] for d in config["decode"]]


def serving(pod: dict[str, Any]) -> bool:
    """A pod that serves: not being deleted, Ready, with an address."""
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return ready and bool(status.get("podIP")) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def pod_url(pod: dict[str, Any], port: int) -> str:
    address = pod["status"]["podIP"]
    return f"http://{f'[{address}]' if ':' in address else address}:{port}"


def discovered_pairs(discover: dict[str, Any], pods: list[dict[str, Any]]) -> Pairs:
    """Kthena's router's pairs among `pods`: each serving decode entry pod with each serving
    prefill entry pod of the same group, by pod name."""
    by_role: dict[str, list[dict[str, Any]]] = {"prefill": [], "decode": []}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        labels = pod["metadata"].get("labels") or {}
        if labels.get(ENTRY_LABEL) != "true" or not serving(pod):
            continue
        for role in by_role:
            if labels.get(ROLE_LABEL) == discover["roles"][role]:
                by_role[role].append(pod)

    def instance(pod: dict[str, Any], role: str) -> dict[str, str]:
        return {"name": pod["metadata"]["name"], "url": pod_url(pod, int(discover["port"][role]))}

    def group(pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get(GROUP_LABEL)

    return [
        (instance(p, "prefill"), instance(d, "decode"))
        for d in by_role["decode"]
        for p in by_role["prefill"]
        if group(p) == group(d)
    ]


def run(
    config: dict[str, Any],
    post: Post,
    get: Get,
    now: Callable[[], float] = time.time,
    pairs: Pairs | None = None,
    still_serving: Callable[[list[str]], bool] | None = None,
) -> list[PairResult]:
    """Every pair (the rendered lists' unless `pairs` is given), one after the other. A pair
    that does not answer fails, unless `still_serving` says one of its pods is gone or no longer
    Ready (a rollout under way): then it is skipped and said."""
    results = []
    for index, (prefill, decode) in enumerate(static_pairs(config) if pairs is None else pairs):
        nonce = f"{int(now() * 1e6)}-{index}"
        try:
            results.append(probe_pair(prefill, decode, config, nonce, post, get))
        except Unreachable as err:
            result = PairResult(prefill["name"], decode["name"], problems=[f"not reachable: {err}"])
            if still_serving is not None and not still_serving([prefill["name"], decode["name"]]):
                result.skipped = "a pod of the pair is gone or no longer Ready (a rollout or a scale-in)"
            results.append(result)
    return results


def _post(url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw or b"{}")
        except ValueError:
            return err.code, {"raw": raw[:300].decode(errors="replace")}
    except (urllib.error.URLError, OSError) as err:
        raise Unreachable(f"{url}: {err}") from err


def _get(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:
        raise Unreachable(f"{url}: {err}") from err


def wait_reachable(urls: list[str], get: Get, sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Retry while engines do not answer yet (helm test right after an install): the base URLs
    whose /health never answered."""
    missing = list(urls)
    for attempt in range(1, ATTEMPTS + 1):
        missing = []
        for url in urls:
            try:
                get(url + "/health", 10)
            except Unreachable:
                missing.append(url)
        if not missing:
            return []
        if attempt < ATTEMPTS:
            print(
                f"attempt {attempt}: not reachable yet: {', '.join(missing)}; retrying in {RETRY_SECONDS}s", flush=True
            )
            sleep(RETRY_SECONDS)
    return missing


# Where the kubelet projects the pod's ServiceAccount token and the cluster's CA (the chart mounts
# them into the canary's container alone: kv-canary-rbac.yaml).
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
API_TIMEOUT_SECONDS = 30


def api_pods(discover: dict[str, Any], env: dict[str, str]) -> list[dict[str, Any]]:
    """The pods of discover's namespace and label selector, from the API server the pod's
    environment names, with its ServiceAccount's token (read at each call: the kubelet rotates
    a projected token)."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ApiError("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset: the canary is not in a pod")
    folder = discover.get("serviceAccount") or SERVICE_ACCOUNT
    try:
        with open(os.path.join(folder, "token")) as f:
            token = f.read().strip()
        context = ssl.create_default_context(cafile=os.path.join(folder, "ca.crt"))
    except (OSError, ssl.SSLError) as err:
        raise ApiError(f"no ServiceAccount token or CA in {folder}: {err}") from err
    query = urllib.parse.urlencode({"labelSelector": discover["selector"]})
    namespace = urllib.parse.quote(discover["namespace"], safe="")
    url = f"https://{f'[{host}]' if ':' in host else host}:{port}/api/v1/namespaces/{namespace}/pods?{query}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_SECONDS, context=context) as resp:
            items: list[dict[str, Any]] = json.load(resp).get("items") or []
            return items
    except urllib.error.HTTPError as err:
        raise ApiError(f"{url}: HTTP {err.code}: {err.read()[:300].decode(errors='replace')}") from err
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ApiError(f"{url}: {err}") from err


def run_discovered(
    config: dict[str, Any],
    list_pods: Callable[[], list[dict[str, Any]]],
    post: Post,
    get: Get,
    sleep: Callable[[float], None] = time.sleep,
) -> list[PairResult]:
    """The pairs Kthena's router would form now, judged; found again while there is none, or
    while every pair found was skipped (its pods went during the run), up to ATTEMPTS times."""
    discover = config["discover"]

    def still_serving(names: list[str]) -> bool:
        try:
            alive = {p["metadata"]["name"] for p in list_pods() if serving(p)}
        except ApiError:
            return True  # cannot tell: the pair's failure stands
        return all(name in alive for name in names)

    results: list[PairResult] = []
    for attempt in range(1, ATTEMPTS + 1):
        pairs = discovered_pairs(discover, list_pods())
        if pairs:
            results = run(config, post, get, pairs=pairs, still_serving=still_serving)
            if any(not r.skipped for r in results):
                return results
            why = "every pair found went away during the run"
        else:
            why = f"no Ready prefill/decode pair of one serving group among the pods of {discover['selector']}"
        if attempt < ATTEMPTS:
            print(f"attempt {attempt}: {why}; looking again in {RETRY_SECONDS}s", flush=True)
            sleep(RETRY_SECONDS)
    return results


def with_api_key(post: Post, api_key: str) -> Post:
    """`post` sending the engines' key as a bearer token (unchanged without a key)."""
    if not api_key:
        return post

    def keyed(url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        return post(url, body, timeout, {**headers, "Authorization": f"Bearer {api_key}"})

    return keyed


def main(env: dict[str, str]) -> int:
    config = json.loads(env["CANARY_CONFIG"])
    post = with_api_key(_post, env.get("OPENAI_API_KEY", ""))
    if config.get("discover"):
        try:
            results = run_discovered(config, lambda: api_pods(config["discover"], env), post, _get)
        except ApiError as err:
            print(f"FAIL: the engine pods could not be listed: {err}")
            return 1
    else:
        pairs = static_pairs(config)
        missing = wait_reachable([e["url"] for e in config["prefill"] + config["decode"]], _get)
        if missing:
            print(f"FAIL: not reachable: {', '.join(u + '/health' for u in missing)}")
            return 1
        results = run(config, post, _get, pairs=pairs)
    for result in results:
        print(result.line(), flush=True)
    judged = [r for r in results if not r.skipped]
    passed = sum(r.ok for r in judged)
    skipped = f" ({len(results) - len(judged)} skipped: gone during the run)" if len(judged) < len(results) else ""
    if not judged:
        print("FAIL: no prefill/decode pair to judge")
        return 1
    print(f"kv canary: {passed} of {len(judged)} prefill/decode pairs moved the KV cache and answered from it{skipped}")
    return 0 if passed == len(judged) else 1


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
