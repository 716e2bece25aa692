"""The Kthena router carries requests to the engine pods Kthena created (issue #28 items 1 and 2;
part of `make e2e`, hence `make test`; alone: `make e2e-kthena`).

On the local cluster (tests/support/kube), the chart with `router.type: kthena` is applied as
rendered. Kthena v1.0.0's controller makes the engine pods of the ModelServing, kube-scheduler
binds them to two nodes of the process kubelet (tests/support/kube/kubelet.py), which runs each
pod's container as a process with the env resolved from the pod object and the start script from
the ConfigMap the API server holds, at the pod's own loopback address, and sets the pod Ready
from the rendered readiness probe. Kthena v1.0.0's router, in a network namespace of its own,
discovers those pods through the API server (the rendered ModelServer and ModelRoute) and sends
each request to a prefill pod and then to the decode pod of its group, NIXL moving the KV cache.

The proof is the proxy path's (tests/test_e2e.py): greedy outputs through the router equal a
plain engine's, and decode's metrics count a NIXL transfer and every prompt token as external
hits; chat, streamed completions, the helm-test pod's chat check and KV canary, and the
benchmark Job's script run against the router too. Then a prefill replica is added by hand
(the role's replicas, as the autoscaler patches them): Kthena creates the pod, the kubelet runs
it, and the router sends it requests; measured, with the whole run's figures, in
out/e2e-kthena/summary.json.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from mooncake_pd import manifests, paths, verify
from support.kthenarun import (
    PODS_READY_TIMEOUT,
    VALUES,
    KthenaDeployment,
    address,
    kthena_deployment,
    metrics,
    role_of,
    wait_ready_pods,
)
from support.localpods import AUTH, Network, post_json, prepare, run_to_end
from support.localverify import helm_test_container
from support.pdcheck import (
    MAX_TOKENS,
    PROMPTS,
    LocalRun,
    complete,
    completions,
    judge,
    local_run,
    pd_setup,
)
from support.reference import References

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_kthena]

OUT = paths.REPO / "out" / "e2e-kthena"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
# How long, and how many rounds of four fresh prompts, the router is given to send an added
# prefill replica a request. Kthena v1.0.0's router picks a prefill pod of the decode pod's group
# by the sum of three scores (pkg/kthena-router/scheduler/scheduler_impl.go, Schedule and
# RunScorePlugins; plugins/prefix_cache.go, least_request.go, least_latency.go): prefix-cache
# gives a pod that served the prompt's prefix up to 100, so the same prompts again stay with the
# replica that served them (why the proof's eight prompts never reached the added replica in
# 181 s, 2026-12-05..07); with a prompt no pod has seen the two tie, least-request favours the
# less busy one, and a tie goes either way. 60 s and 120 rounds of four leave a slow machine
# room (a round is about a second here).
ADDED_REPLICA_S = 60.0
ADDED_REPLICA_ROUNDS = 120


@dataclass
class RouterRun:
    reference: list[str] = field(default_factory=list)
    reference_chat: str = ""
    outputs: dict[str, list[str]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    chat: str = ""
    stream: tuple[str, bool] = ("", False)
    helm_test: tuple[int, str] = (0, "")
    canary: tuple[int, str] = (0, "")
    bench: tuple[int, str] = (0, "")
    pods: dict[str, str] = field(default_factory=dict)
    added: dict[str, Any] = field(default_factory=dict)
    kubelet_events: list[tuple[float, str]] = field(default_factory=list)
    kubelet_errors: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    peak_rss: int = 0


@pytest.fixture(scope="module")
def routed(cluster, references: References) -> RouterRun:
    result = RouterRun()

    def summary(run: LocalRun) -> dict[str, Any]:
        result.peak_rss, result.timings["wall"] = run.peak_rss, run.wall
        return {
            "timings_s": {k: round(v, 1) for k, v in result.timings.items()},
            "peak_rss_gib": round(result.peak_rss / 2**30, 2),
            "pods": result.pods,
            "problems": result.problems,
            "added_replica": result.added,
            "kubelet_events": result.kubelet_events,
            "kubelet_errors": result.kubelet_errors,
        }

    with local_run(OUT, "mooncake-pd-kthena-", summary) as run:
        _run(result, run, cluster, references)
    return result


def chat_body() -> dict[str, Any]:
    return {"model": "tiny", "messages": CHAT, "max_tokens": MAX_TOKENS, "temperature": 0}


def chat(base: str) -> str:
    answer = post_json(f"{base}/v1/chat/completions", chat_body())
    return str(answer["choices"][0]["message"]["content"])


def streamed(base: str, prompt: str) -> tuple[str, bool]:
    """(the text of a streamed completion, whether it ended with [DONE])."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    request = urllib.request.Request(
        f"{base}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json", **AUTH}
    )
    text, done = [], False
    with urllib.request.urlopen(request, timeout=120) as answer:
        for raw in answer:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                text.append("".join(c.get("text", "") for c in json.loads(line[6:]).get("choices", [])))
    return "".join(text), done


def _run(result: RouterRun, run: LocalRun, cluster, references: References) -> None:
    clock = time.monotonic()
    setup = pd_setup(run, VALUES, make_model=references.tiny_model)
    result.timings["model_and_render"] = time.monotonic() - clock

    # 1. The reference: decode's flags without the connector, on one plain engine (the NIXL run's,
    # where it is the same engine: support/reference.py).
    clock = time.monotonic()
    reference = references.engine(run, setup, "test_e2e_kthena")
    result.reference = reference.completions()
    result.reference_chat = str(reference.post("/v1/chat/completions", chat_body())["choices"][0]["message"]["content"])
    result.timings["plain_engine"] = time.monotonic() - clock

    # 2. The release as rendered (its helm hooks, the test pod and the benchmark Job, are run
    # below as processes against the router), the pods Kthena makes of it, and the router.
    with kthena_deployment(run, cluster, setup) as deployment:
        try:
            _routed(result, run, deployment)
        finally:
            result.kubelet_events, result.kubelet_errors = deployment.kubelet.events, deployment.kubelet.errors


def _routed(result: RouterRun, run: LocalRun, deployment: KthenaDeployment) -> None:
    api, setup, router, pods = deployment.api, deployment.setup, deployment.router, deployment.pods
    result.timings.update(deployment.timings)
    result.pods = {name: f"{p['spec']['nodeName']} {p['status']['podIP']} {_owner(p)}" for name, p in pods.items()}

    # 3. The proof, sequential and four at a time.
    decode = next(p for p in pods.values() if role_of(p) == "decode")
    for mode in ("sequential", "concurrent"):
        before = metrics(decode)
        outputs, tokens = completions(router, concurrent=mode == "concurrent")
        result.outputs[mode] = outputs
        result.problems[mode] = judge(result.reference, outputs, before, metrics(decode), tokens)
    result.chat = chat(router)
    result.stream = streamed(router, PROMPTS[3])

    # 4. The helm hooks as processes against the router: the test pod's chat check and canary,
    # the benchmark Job. Cluster DNS: the router's Service leads to the router (the canary
    # reaches the pods it lists at their own addresses).
    network = Network()
    network.add_services(setup.objects)
    network.add("kthena-router.kthena-system.svc", 80, address(router)[1])
    clock = time.monotonic()
    result.helm_test = helm_test_container(setup.objects, "chat", run.base, network, run.processes)
    # The canary finds the engine pods by label from the API server, with the token of the
    # chart's ServiceAccount (its Role: get and list pods), as the kubelet would project it.
    result.canary = helm_test_container(setup.objects, "kv-canary", run.base, network, run.processes, api)
    job = next(o for o in setup.objects if o["kind"] == "Job")
    spec = job["spec"]["template"]["spec"]
    container = prepare(setup.objects, spec, spec["containers"][0], setup.work / "bench", network)
    result.bench = run_to_end(run.processes, container, 600, "benchmark")
    result.timings["hooks"] = time.monotonic() - clock

    # 5. A prefill replica added by hand, as the autoscaler patches the role's replicas.
    clock = time.monotonic()
    modelserving = manifests.one(setup.objects, "ModelServing")
    for role in modelserving["spec"]["template"]["roles"]:
        if role["name"] == "prefill":
            role["replicas"] = 2
    api.apply(modelserving)
    pods = wait_ready_pods(api, 3, PODS_READY_TIMEOUT)
    result.timings["added_replica_ready"] = time.monotonic() - clock
    prefills = {name: p for name, p in pods.items() if role_of(p) == "prefill"}
    (added,) = set(prefills) - set(result.pods)
    prefill_before = {name: metrics(p) for name, p in prefills.items()}
    decode_before = metrics(decode)
    clock = time.monotonic()
    rounds = 0
    result.problems["added_replica"] = []

    def until_the_added_replica_computes(seconds: float) -> bool:
        """Rounds of four fresh prompts at a time, until the router has sent the new replica a
        request (it learns of it from the API server): by time, not by a count of rounds that a
        fast machine spends first (the count only bounds the loop)."""
        nonlocal rounds
        deadline = time.monotonic() + seconds
        while rounds < ADDED_REPLICA_ROUNDS and time.monotonic() < deadline:
            rounds += 1
            prompts = [f"{rounds}-{i} {prompt}" for i, prompt in enumerate(PROMPTS[:4])]
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(lambda prompt: complete(router, prompt), prompts))
            empty = [i for i, a in enumerate(answers) if not a["choices"][0]["text"]]
            if empty:
                result.problems["added_replica"].append(f"round {rounds}: empty completions for prompts {empty}")
            if _prompt_tokens(metrics(prefills[added])) > _prompt_tokens(prefill_before[added]):
                return True
        return False

    # Judged: the router sends the new replica fresh prompts (ADDED_REPLICA_S says why fresh),
    # polls it (its GET /v1/models, which only the router sends), and the pair it forms moves the
    # KV cache (the KV canary's own pair, prefill's new replica to decode).
    routed = until_the_added_replica_computes(ADDED_REPLICA_S)
    log = next((OUT / "logs").glob(f"{added}.*.log"))
    polled = log.read_text(errors="replace").count('"GET /v1/models')
    # The rendered canary again, as the CronJob's next run: it finds the added replica by its
    # labels and judges its pair with decode beside the first one's.
    code, output = helm_test_container(
        setup.objects, "kv-canary", run.base, network, run.processes, api, again="-after-scale-out"
    )
    pair = [line for line in output.splitlines() if line.startswith(("PASS: ", "FAIL: ", "SKIP: "))]
    after = {name: metrics(p) for name, p in prefills.items()}
    result.added = {
        "pod": added,
        "rounds": rounds,
        "seconds": round(time.monotonic() - clock, 1),
        "routed": routed,
        "polled_by_the_router": polled,
        "canary": pair,
        "canary_exit": code,
        "prefill_prompt_tokens": {n: _prompt_tokens(after[n]) - _prompt_tokens(prefill_before[n]) for n in prefills},
        "decode_external_hits": _delta(decode_before, metrics(decode), "vllm:external_prefix_cache_hits_total"),
    }


def _owner(pod: dict[str, Any]) -> str:
    """Who created the pod: Kthena's controller owns it through its ModelServing."""
    return ",".join(f"{o['kind']}/{o['name']}" for o in pod["metadata"].get("ownerReferences") or [])


def _prompt_tokens(text: str) -> float:
    return verify.metric_total(text, PROMPT_TOKENS)


def _delta(before: str, after: str, name: str) -> float:
    return verify.metric_total(after, name) - verify.metric_total(before, name)


def test_kthena_created_the_pods_the_process_kubelet_runs(routed: RouterRun):
    places = [where.split() for where in routed.pods.values()]
    assert len(places) == 2, routed.pods
    # The chart keeps prefill and decode on different nodes; Kthena's ModelServing owns both.
    assert {node for node, _, _ in places} == {"process-0", "process-1"}, routed.pods
    assert {owner for _, _, owner in places} == {f"ModelServing/{paths.RELEASE}"}, routed.pods
    assert routed.kubelet_errors == []


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_router_output_equals_one_plain_engine_and_decode_used_the_transferred_cache(routed: RouterRun, mode: str):
    assert routed.problems[mode] == [], routed.problems[mode]


def test_chat_and_streaming_through_the_router(routed: RouterRun):
    assert routed.chat == routed.reference_chat
    text, done = routed.stream
    assert text == routed.reference[3]
    assert done, "the router's stream did not end with [DONE]"


def test_helm_test_pod_and_canary_pass_against_the_router(routed: RouterRun):
    assert routed.helm_test[0] == 0, routed.helm_test[1][-3000:]
    assert routed.canary[0] == 0, routed.canary[1][-3000:]


def test_benchmark_job_runs_against_the_router(routed: RouterRun):
    code, output = routed.bench
    assert code == 0, output[-3000:]
    line = next(x for x in output.splitlines() if x.startswith("mooncake-pd-benchmark-result: "))
    report = json.loads(line.split(": ", 1)[1])
    assert report["failed"] == 0 and report["completed"] == report["num_prompts"] > 0, report


def test_a_prefill_replica_added_by_hand_gets_traffic_and_moves_the_kv_cache(routed: RouterRun):
    """Kthena created the pod, the kubelet runs it, the router polls it and sends it fresh prompts
    within ADDED_REPLICA_S, and its pair with decode moves the KV cache."""
    added = routed.added
    assert routed.problems.get("added_replica") == [], routed.problems
    assert added["routed"], f"the router sent the added replica none of {added['rounds']} fresh rounds: {added}"
    assert added["prefill_prompt_tokens"][added["pod"]] > 0, added
    assert added["polled_by_the_router"] > 0, added
    # The canary's next run found the added replica by label and judged both pairs.
    assert added["canary_exit"] == 0, added
    assert sorted(line.split(" -> ")[0] for line in added["canary"]) == sorted(
        f"PASS: {name}" for name in added["prefill_prompt_tokens"]
    ), added
    assert added["decode_external_hits"] > 0, added
