"""Where the time of one request goes on the PD path, from the engines' own histograms read
before and after it and the client's own chunk times (harness/ttft_split.py measures it).

vLLM 0.13 times a request in its engine from its arrival at the API server
(vllm/v1/metrics/stats.py: time_to_first_token = first token - arrival, e2e_request_latency =
finish - arrival, queue = scheduled - queued, prefill = first token - scheduled) and NIXL times
each transfer on decode (vllm:nixl_xfer_time_seconds, nixl_connector.py). For one streamed
request through a router, sent while nothing else runs:

- TTFT seen by the client = router + prefill's whole request (it returns after its one token)
  + decode's TTFT; decode's TTFT = KV transfer (NIXL's own time) + the rest of decode's wait for
  the KV cache and its first step (what is left);
- router = client TTFT - prefill's e2e latency - decode's TTFT: the router's hops, its HTTP and
  JSON, and any wait between prefill's answer and the request to decode;
- TPOT seen by the client = (last chunk - first chunk) / (chunks - 1); decode's own is its
  inter-token latency; the router's share is the difference (re-streaming every chunk).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from mooncake_pd.verify import metric_total

TTFT = "vllm:time_to_first_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE = "vllm:request_queue_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
ITL = "vllm:inter_token_latency_seconds"
NIXL_XFER = "vllm:nixl_xfer_time_seconds"

# The parts, in the order they happen; every value in seconds.
PD_PARTS = ("router", "prefill", "kv_transfer", "decode_first_step")
TPOT_PARTS = ("tpot_engine", "tpot_router")


@dataclass(frozen=True)
class ClientTiming:
    """One streamed request as its client saw it: seconds to the first text chunk and between
    chunks (None with a single chunk), and how many chunks carried text."""

    ttft: float
    tpot: float | None
    chunks: int


def client_timing(start: float, chunk_times: list[float]) -> ClientTiming:
    """From the request's start and the arrival of each text chunk (one token each)."""
    if not chunk_times:
        raise ValueError("the request streamed no text chunk")
    first, last = chunk_times[0], chunk_times[-1]
    tpot = (last - first) / (len(chunk_times) - 1) if len(chunk_times) > 1 else None
    return ClientTiming(first - start, tpot, len(chunk_times))


def observed(before: str, after: str, family: str) -> tuple[float, float]:
    """(seconds, observations) a histogram gained between two /metrics texts."""
    return (
        metric_total(after, f"{family}_sum") - metric_total(before, f"{family}_sum"),
        metric_total(after, f"{family}_count") - metric_total(before, f"{family}_count"),
    )


def _mean(before: str, after: str, family: str) -> float | None:
    seconds, count = observed(before, after, family)
    return seconds / count if count else None


def _one(before: str, after: str, family: str, where: str) -> float:
    seconds, count = observed(before, after, family)
    if count != 1:
        raise ValueError(f"{where}'s {family} observed {count:g} requests, not 1: was another request running?")
    return seconds


def split_pd(client: ClientTiming, prefill: tuple[str, str], decode: tuple[str, str]) -> dict[str, float | None]:
    """One PD request's split; prefill and decode are their /metrics (before, after) it."""
    prefill_e2e = _one(*prefill, E2E, "prefill")
    decode_ttft = _one(*decode, TTFT, "decode")
    transfer, _ = observed(*decode, NIXL_XFER)
    engine_tpot = _mean(*decode, ITL)
    return {
        "ttft": client.ttft,
        "router": client.ttft - prefill_e2e - decode_ttft,
        "prefill": prefill_e2e,
        "kv_transfer": transfer,
        "decode_first_step": decode_ttft - transfer,
        "decode_queue": _one(*decode, QUEUE, "decode"),
        "tpot": client.tpot,
        "tpot_engine": engine_tpot,
        "tpot_router": client.tpot - engine_tpot if client.tpot is not None and engine_tpot is not None else None,
    }


def split_plain(client: ClientTiming, engine: tuple[str, str]) -> dict[str, float | None]:
    """One request to a plain engine: its TTFT and TPOT, the engine's and the client's."""
    engine_ttft = _one(*engine, TTFT, "the engine")
    engine_tpot = _mean(*engine, ITL)
    return {
        "ttft": client.ttft,
        "ttft_engine": engine_ttft,
        "ttft_http": client.ttft - engine_ttft,
        "tpot": client.tpot,
        "tpot_engine": engine_tpot,
        "tpot_router": client.tpot - engine_tpot if client.tpot is not None and engine_tpot is not None else None,
    }


def medians(rows: Iterable[dict[str, float | None]]) -> dict[str, float | None]:
    """The median of each part over the requests (None where no request had it)."""
    rows = list(rows)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    result: dict[str, float | None] = {}
    for key in keys:
        values = [v for row in rows if (v := row.get(key)) is not None]
        result[key] = statistics.median(values) if values else None
    return result


def table(runs: dict[str, dict[str, float | None]]) -> str:
    """Milliseconds, one column per run (plain engine, PD through each router)."""
    keys = list(dict.fromkeys(k for split in runs.values() for k in split))
    names = list(runs)
    width = max(len(k) for k in keys) + 2
    lines = [" " * width + "".join(f"{n:>22}" for n in names)]
    for key in keys:
        cells = []
        for name in names:
            value = runs[name].get(key)
            cells.append(f"{value * 1000:>19.1f} ms" if value is not None else f"{'-':>22}")
        lines.append(f"{key:<{width}}" + "".join(cells))
    return "\n".join(lines)
