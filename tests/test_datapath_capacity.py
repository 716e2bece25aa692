"""The data path's capacity, judged (harness.capacity) and its harness (harness/streamload.py:
the stand-in engines and the load generator): percentiles, what a component adds, where the
search over offered rates finds saturation, the bounds docs/scale-datapath.md documents, and that
the stand-ins answer as vLLM's PD engines do and the load generator counts what it gets
(harness/datapath_capacity.py runs them against the PD proxy and Kthena's router)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import random
import socket
import sys
from pathlib import Path

import pytest

from harness import capacity, streamload
from mooncake_pd import paths
from support import openai_standin


def latency(p50: float, p99: float, requests: int = 100, failed: int = 0, offered: int | None = None):
    return capacity.Latency(
        offered=requests + failed if offered is None else offered,
        requests=requests,
        failed=failed,
        p50=p50,
        p90=p99,
        p99=p99,
        max=p99,
        rate=requests / 5,
    )


def step(rate: float, added_p99: float, **through):
    return capacity.Step(rate, latency(2.0, 3.0 + added_p99, **through), latency(1.0, 3.0))


def test_percentiles_interpolate_between_ranks_as_numpy_does():
    values = [float(v) for v in range(1, 101)]
    random.Random(3).shuffle(values)
    assert capacity.percentile(values, 50) == pytest.approx(50.5)
    assert capacity.percentile(values, 99) == pytest.approx(99.01)
    assert capacity.percentile(values, 0) == 1.0
    assert capacity.percentile(values, 100) == 100.0
    assert capacity.percentile([7.0], 99) == 7.0
    assert math.isnan(capacity.percentile([], 50))


def test_added_is_the_component_less_the_baseline_at_each_percentile():
    added = capacity.Added.of(latency(3.5, 12.0), latency(1.0, 4.0))
    assert (added.p50, added.p99) == (2.5, 8.0)


def test_a_step_is_past_saturation_by_latency_failures_or_requests_left_unanswered():
    assert step(100, 9.9).past() == ""
    assert "added P99" in step(100, 10.5).past()
    assert "failed" in step(100, 1.0, failed=1).past()
    # Fewer than 90% of the requests started in the window answered in full.
    assert "completed" in step(100, 1.0, requests=80, offered=100).past()
    assert step(100, 1.0, requests=95, offered=100).past() == ""
    unsound = capacity.Step(100, latency(2.0, 3.0), latency(1.0, 2.0, requests=50, offered=100))
    assert not unsound.baseline_sound()
    # A baseline whose P99 shows the harness queueing is not one to subtract from.
    assert not capacity.Step(100, latency(2.0, 3.0), latency(1.0, 1239.0)).baseline_sound()
    assert capacity.Step(100, latency(2.0, 3.0), latency(1.0, 4.0)).baseline_sound()


def test_saturation_is_where_the_added_p99_crosses_the_limit_between_two_steps():
    found = capacity.saturation([step(100, 2.0), step(400, 20.0), step(200, 5.0)])
    assert found.rate == pytest.approx(200 + 200 * (10 - 5) / (20 - 5), abs=0.1)
    assert (found.last_within, found.first_past) == (200, 400)
    # A step past by failures is not interpolated: the crossing is no higher than the last within.
    assert capacity.saturation([step(100, 2.0), step(200, 1.0, failed=3)]).rate == 100
    never = capacity.saturation([step(100, 1.0), step(200, 2.0)])
    assert (never.rate, never.at_least) == (None, 200)
    already = capacity.saturation([step(25, 30.0), step(50, 40.0)])
    assert (already.rate, already.below) == (None, 25)
    # A noisy low step past the limit does not hide the crossing above the highest within.
    noisy = capacity.saturation([step(5, 10.8), step(20, 7.5), step(80, 26.6)])
    assert (noisy.last_within, noisy.first_past) == (20, 80)
    assert noisy.rate == pytest.approx(20 + 60 * (10 - 7.5) / (26.6 - 7.5), abs=0.1)
    assert "5/s below it (noise)" in noisy.reason


def test_the_ceiling_is_where_the_component_stops_keeping_up():
    def queued(rate: float, added_p50: float, **through):
        return capacity.Step(rate, latency(1.0 + added_p50, 500.0, **through), latency(1.0, 3.0))

    steps = [queued(10, 5.0), queued(20, 6.0), queued(40, 40.0), queued(80, 3000.0)]
    # Past 10 ms at P99 everywhere (the added P99 is ~497 ms), behind only at 80/s.
    assert capacity.saturation(steps).below == 10
    top = capacity.ceiling(steps)
    assert top.rate == pytest.approx(40 + 40 * (250 - 40) / (3000 - 40), abs=0.1)
    assert "added P50" in top.reason
    assert capacity.ceiling([queued(10, 5.0), queued(20, 6.0, requests=50, offered=100)]).rate == 10
    # The midpoint towards each crossing, once.
    assert capacity.midpoint(steps, lambda s: s.behind(), [10, 20, 40, 80]) == pytest.approx(56.6)
    assert capacity.midpoint(steps, lambda s: s.behind(), [10, 20, 40, 56.6, 80]) is None
    assert capacity.midpoint(steps, lambda s: s.past(), [10, 20, 40, 80]) is None


def test_the_search_doubles_then_halves_the_gap_then_stops():
    def search(threshold: float, refinements: int, ceiling: float = 1600) -> list[float]:
        measured: dict[float, bool] = {}
        tried = []
        while (rate := capacity.next_rate(measured, 25, ceiling, refinements)) is not None:
            tried.append(rate)
            measured[rate] = rate > threshold
            assert len(tried) < 20
        return tried

    assert search(300, 2) == [25, 50, 100, 200, 400, 282.8, 336.3]
    assert search(300, 0) == [25, 50, 100, 200, 400]
    quick: dict[float, bool] = {}
    while (rate := capacity.next_rate(quick, 5, 1280, 0, factor=4)) is not None:
        quick[rate] = rate > 100
    assert list(quick) == [5, 20, 80, 320]
    assert search(10_000, 2) == [25, 50, 100, 200, 400, 800, 1600]
    # Past at the first rate: lower, down to an eighth of it.
    assert search(1, 2) == [25, 12.5, 6.25, 3.125]


def test_sizing_keeps_each_replica_under_its_share_of_saturation():
    sizing = capacity.Sizing(per_replica_rps=200, headroom=0.5)
    assert [sizing.replicas(r) for r in (1, 100, 101, 1000)] == [1, 1, 2, 10]


def test_bounds_are_read_from_the_table_and_every_break_is_named(tmp_path: Path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "| Figure | What | Measured | Bound |\n| --- | --- | --- | --- |\n"
        "| `proxy-added-p99-ms-c10` | added P99 | 1.2 | <= 5 |\n"
        "| `proxy-saturation-rps` | where it saturates | 300 | >= 150 |\n"
        "| `router-failed-c1000` | failures | 0 | <= 0 |\n"
        "| not a bound | x | y | z |\n"
    )
    found = capacity.bounds(doc)
    assert set(found) == {"proxy-added-p99-ms-c10", "proxy-saturation-rps", "router-failed-c1000"}
    assert found["proxy-saturation-rps"] == capacity.Bound("proxy-saturation-rps", ">=", 150)
    good = {"proxy-added-p99-ms-c10": 4.9, "proxy-saturation-rps": 151.0, "router-failed-c1000": 0.0}
    assert capacity.breaks(good, found) == []
    bad = {"proxy-added-p99-ms-c10": 5.1, "proxy-saturation-rps": math.nan}
    problems = capacity.breaks(bad, found)
    assert len(problems) == 3
    assert any(p.startswith("router-failed-c1000: not measured") for p in problems)
    assert any(p.startswith("proxy-added-p99-ms-c10: 5.10") for p in problems)


def _script():
    path = paths.REPO / "harness" / "datapath_capacity.py"
    spec = importlib.util.spec_from_file_location("datapath_capacity", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["datapath_capacity"] = module
    spec.loader.exec_module(module)
    return module


def test_every_documented_bound_names_a_figure_the_script_writes():
    script = _script()
    row = {"p50": 1.0, "p99": 2.0, "failed": 0, "added": {"p50": 0.5, "p99": 1.0}}
    base = {"p50": 1.0, "p99": 2.0, "harness_core_busy": 0.2, "loadgen_cpu_ms_per_request": 0.3,
            "standin_cpu_ms_per_request": 0.2}  # fmt: skip
    report = {
        "concurrency": {str(n): {"baseline": base, "proxy": row, "router": row} for n in script.CONCURRENCY},
        "saturation": {
            name: {
                "result": {"rate": 100.0, "at_least": 50.0, "below": None},
                "ceiling": {"rate": 200.0, "at_least": 100.0, "below": None},
                "steps": [{"rate": 25.0, "past": "", "component_cpu_ms_per_request": 1.0}],
            }
            for name in ("proxy", "router")
        },
        "memory": {"proxy": {"peak_rss_mib": 300.0}, "router": {"peak_rss_mib": 60.0}},
    }
    written = set(script.flat_figures(report))
    documented = set(capacity.bounds(paths.REPO / "docs" / "scale-datapath.md"))
    assert documented, "docs/scale-datapath.md documents no bounds"
    assert documented <= written, f"documented but never written: {sorted(documented - written)}"


@pytest.mark.parametrize("seed", range(5))
def test_a_chunked_body_reads_the_same_however_the_bytes_arrive(seed: int):
    events = [streamload.sse({"choices": [{"text": f" w{i}"}]}) for i in range(6)]
    done = b"data: [DONE]\n\n"
    wire = b"".join(events) + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done) + b"HTTP/1.1 next"
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(wire)), 25))
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    got: list[bytes] = []
    body = streamload.ChunkedBody(got.append)
    finished = [body.feed(piece) for piece in pieces if not body.done]
    assert finished[-1] and not any(finished[:-1])
    assert b"".join(got).count(streamload.MARK) == 6
    assert b"".join(got).endswith(done)
    assert body.rest + b"".join(pieces[len(finished) :]) == b"HTTP/1.1 next"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_against_standins(mode: str, tokens: int, tpot: float) -> dict:
    """The stand-ins and a closed-loop load of 3 streams in one event loop, on loopback."""
    port = free_port()

    async def main() -> dict:
        server = asyncio.ensure_future(streamload.serve([("127.0.0.1", port)], tpot))
        await asyncio.sleep(0.2)
        base = f"http://127.0.0.1:{port}"
        args = argparse.Namespace(
            mode=mode, url=base if mode == "direct" else None, prefill=base, decode=base, concurrency=3, rate=0.0,
            tokens=tokens, tpot_hint=tpot, model="m", duration=0.6, warmup=0.2, drain=5.0, seed=1, request_timeout=5.0,
        )  # fmt: skip
        try:
            return await streamload.Load(args).run()
        finally:
            server.cancel()

    return asyncio.run(main())


def test_the_load_through_the_standins_counts_every_token_at_the_token_rate():
    result = run_against_standins("pd", tokens=5, tpot=0.02)
    assert result["failed_all"] == 0 and result["ttft_ms"], result["failures"]
    assert result["offered"] == len(result["ttft_ms"])
    # The first token at once (well under one token interval), the last after four intervals.
    assert max(result["ttft_ms"]) < 20
    assert min(result["total_ms"]) >= 4 * 20 * 0.95
    direct = run_against_standins("direct", tokens=3, tpot=0.01)
    assert direct["failed_all"] == 0 and direct["ttft_ms"]


def test_the_standin_answers_the_prefill_half_and_the_decode_stream_as_vllm_does():
    port = free_port()

    async def exchange() -> tuple[dict, bytes]:
        server = asyncio.ensure_future(streamload.serve([("127.0.0.1", port)], 0.001))
        await asyncio.sleep(0.2)
        try:
            pool = streamload.Pool("127.0.0.1", port)
            ask = {"prompt": "x", "max_tokens": 1, "stream": False, "kv_transfer_params": {"do_remote_decode": True}}
            status, body, _, _ = await pool.request("/v1/completions", ask, True)
            assert status == 200
            prefill = json.loads(body)
            decode = {"prompt": "x", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True},
                      "kv_transfer_params": prefill["kv_transfer_params"]}  # fmt: skip
            status, stream, tokens, _ = await pool.request("/v1/chat/completions", decode, True)
            assert (status, tokens) == (200, 3)
            return prefill, stream
        finally:
            server.cancel()

    prefill, stream = asyncio.run(exchange())
    assert prefill["usage"]["completion_tokens"] == 1
    # The fields decode needs, as the stand-in the conformance tests use (and vLLM's NIXL) give.
    assert set(prefill["kv_transfer_params"]) == set(openai_standin.PREFILL_ANSWER)
    assert prefill["kv_transfer_params"]["do_remote_prefill"] is True
    events = [line for line in stream.decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[-2].removeprefix("data: "))["usage"]["completion_tokens"] == 3
    assert "".join(json.loads(e.removeprefix("data: "))["choices"][0]["delta"]["content"] for e in events[:3]) == (
        "w0 w1 w2"
    )
