"""One 2P1D topology for real (part of `make e2e`, hence `make test`; alone: `make e2e-2p1d`).

The cpu preset with `prefill.replicas: 2` is rendered and its three engine pods run as processes,
each at its own loopback address (127.0.0.2-4, as replicas on three nodes would be) with the
same ports, started by the rendered scripts with the env their pods get, preflight included.
The rendered proxy, given the per-replica Services' names, sends each request to a prefill
engine and then to decode. The proof, as in tests/test_e2e.py: greedy output through the proxy
equals the decode engine's own (a request without KV parameters is computed there), and
decode's metrics count a NIXL transfer and the prompt tokens as external hits for every
request; both prefill engines computed prompts, so the KV cache came from each of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from mooncake_pd import manifests, paths, verify
from support.localpods import (
    ENGINE_NICE,
    Network,
    get_text,
    prepare,
    wait_ready,
)
from support.pdcheck import (
    PROMPTS,
    READY_TIMEOUT,
    LocalRun,
    complete,
    completions,
    engine,
    judge,
    local_run,
    metrics_url,
    render,
)
from support.proxyargs import parse_proxy_args
from support.reference import References

# In `make test-all` only: the proxy's choice between two prefills and the per-replica Services
# it is given; the render tests check those Services and the proxy's flags in the gate, and the
# run costs 1.6-1.9 min and three engines (9.3 GiB).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_2p1d, pytest.mark.full]

OUT = paths.REPO / "out" / "e2e-2p1d"
# (role, replica) -> the pod's address: every pod binds the same ports, as on separate nodes.
PODS = {("prefill", 0): "127.0.0.2", ("prefill", 1): "127.0.0.3", ("decode", 0): "127.0.0.4"}
PROXY = "http://127.0.0.1:8080"
PROMPT_TOKENS = "vllm:prompt_tokens_total"


@dataclass
class Topology:
    reference: list[str] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)
    prompt_tokens: int = 0
    prefill_prompt_tokens: dict[str, float] = field(default_factory=dict)
    proxy_args: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    peak_rss: int = 0


@pytest.fixture(scope="module")
def topology(references: References) -> Topology:
    result = Topology()

    def summary(run: LocalRun) -> dict[str, Any]:
        result.peak_rss, result.timings["wall"] = run.peak_rss, run.wall
        return {
            "timings_s": {k: round(v, 1) for k, v in result.timings.items()},
            "peak_rss_gib": round(result.peak_rss / 2**30, 2),
            "prefill_prompt_tokens": result.prefill_prompt_tokens,
        }

    with local_run(OUT, "mooncake-pd-2p1d-", summary) as run:
        _run(result, run, references)
    return result


def _run(result: Topology, run: LocalRun, references: References) -> None:
    processes, base = run.processes, run.base
    models = base / "models"
    # The session's tiny model (support/reference.py), made once.
    references.tiny_model(run, models / "tiny", base / "other")
    objects = render(models, {"prefill.replicas": 2})
    roles = {r["name"]: r for r in manifests.one(objects, "ModelServing")["spec"]["template"]["roles"]}
    network = Network()
    network.add_services(objects)
    for (role, replica), address in PODS.items():
        network.add_address(f"deepseek-pd-0-{role}-{replica}.default.svc", address)

    clock = time.monotonic()
    running = []
    for (role, replica), address in PODS.items():
        pod, prepared = engine(objects, roles[role], base / "pods", network, replica, address)
        running.append((processes.run(prepared, pod.name, ENGINE_NICE), prepared))
    for proc, prepared in running:
        wait_ready(proc, prepared.probe_url, READY_TIMEOUT)
    result.timings["engines_ready"] = time.monotonic() - clock

    deployment = manifests.one(objects, "Deployment", "deepseek-pd-proxy")
    spec = deployment["spec"]["template"]["spec"]
    proxy = prepare(objects, spec, spec["containers"][0], base / "pods" / "proxy", network)
    result.proxy_args = proxy.argv[len(spec["containers"][0].get("command", [])) :]  # its args, as run here
    proxy_proc = processes.run(proxy, "proxy")
    wait_ready(proxy_proc, proxy.probe_url, 120)

    decode = metrics_url(roles["decode"], PODS[("decode", 0)])
    decode_url = decode.removesuffix("/metrics")
    # The reference: decode computes a request without KV parameters itself (prefix caching is
    # off in the preset, so nothing of it is reused below).
    result.reference = [complete(decode_url, prompt)["choices"][0]["text"] for prompt in PROMPTS]
    prefills = {f"prefill-{r}": metrics_url(roles["prefill"], PODS[("prefill", r)]) for r in (0, 1)}
    before_prompts = {name: verify.metric_total(get_text(url), PROMPT_TOKENS) for name, url in prefills.items()}
    clock = time.monotonic()
    for mode in ("sequential", "concurrent"):
        before = get_text(decode)
        outputs, tokens = completions(PROXY, concurrent=mode == "concurrent")
        result.prompt_tokens += tokens
        result.problems[mode] = judge(result.reference, outputs, before, get_text(decode), tokens)
    result.timings["requests"] = time.monotonic() - clock
    result.prefill_prompt_tokens = {
        name: verify.metric_total(get_text(url), PROMPT_TOKENS) - before_prompts[name] for name, url in prefills.items()
    }


def test_the_proxy_is_given_both_prefill_replicas(topology: Topology):
    proxy = parse_proxy_args(topology.proxy_args)
    assert proxy.prefiller_hosts == (PODS[("prefill", 0)], PODS[("prefill", 1)])


@pytest.mark.parametrize("mode", ["sequential", "concurrent"])
def test_output_through_either_prefill_equals_decode_alone_and_decode_used_the_transfer(topology: Topology, mode: str):
    assert len(set(topology.reference)) > 1, "the engine answers every prompt alike: the model proves nothing"
    assert topology.problems[mode] == [], topology.problems[mode]


def test_both_prefill_engines_computed_prompts(topology: Topology):
    """Every prompt was prefilled by one of the two engines, and each of them took some."""
    counted = topology.prefill_prompt_tokens
    assert sum(counted.values()) == topology.prompt_tokens, (counted, topology.prompt_tokens)
    assert all(tokens > 0 for tokens in counted.values()), counted
