"""The TTFT/TPOT split (harness.latency) on the engines' own histograms: what each part is,
and that a reading of more than one request is refused instead of split. harness/ttft_split.py
measures it on real engines (`make ttft-split`)."""

from __future__ import annotations

import pytest

from harness import latency


def histograms(**families: tuple[float, float]) -> str:
    """/metrics text with each family's _sum and _count (two label sets, as DP engines have)."""
    lines = []
    for name, (seconds, count) in families.items():
        family = f"vllm:{name}"
        for engine, share in (("0", 0.25), ("1", 0.75)):
            lines.append(f'{family}_sum{{engine="{engine}",model_name="m"}} {seconds * share}')
            lines.append(f'{family}_count{{engine="{engine}",model_name="m"}} {count * share}')
    return "\n".join(lines) + "\n"


EMPTY = histograms(
    e2e_request_latency_seconds=(0, 0),
    time_to_first_token_seconds=(0, 0),
    request_queue_time_seconds=(0, 0),
    inter_token_latency_seconds=(0, 0),
    nixl_xfer_time_seconds=(0, 0),
)


def test_client_timing_from_chunk_arrivals():
    timing = latency.client_timing(10.0, [10.2, 10.25, 10.3, 10.35])
    assert timing.ttft == pytest.approx(0.2) and timing.tpot == pytest.approx(0.05) and timing.chunks == 4
    assert latency.client_timing(0.0, [0.1]).tpot is None
    with pytest.raises(ValueError, match="no text chunk"):
        latency.client_timing(0.0, [])


def test_a_pd_request_splits_into_router_prefill_transfer_and_first_step():
    prefill_after = histograms(
        e2e_request_latency_seconds=(0.030, 1),
        time_to_first_token_seconds=(0.028, 1),
        request_queue_time_seconds=(0.001, 1),
        inter_token_latency_seconds=(0, 0),
        nixl_xfer_time_seconds=(0, 0),
    )
    decode_after = histograms(
        e2e_request_latency_seconds=(0.2, 1),
        time_to_first_token_seconds=(0.050, 1),
        request_queue_time_seconds=(0.040, 1),
        inter_token_latency_seconds=(0.090, 30),
        nixl_xfer_time_seconds=(0.004, 1),
    )
    client = latency.ClientTiming(ttft=0.100, tpot=0.005, chunks=31)
    split = latency.split_pd(client, (EMPTY, prefill_after), (EMPTY, decode_after))
    assert split["router"] == pytest.approx(0.100 - 0.030 - 0.050)
    assert split["prefill"] == pytest.approx(0.030) and split["kv_transfer"] == pytest.approx(0.004)
    assert split["decode_first_step"] == pytest.approx(0.046) and split["decode_queue"] == pytest.approx(0.040)
    assert split["tpot_engine"] == pytest.approx(0.003) and split["tpot_router"] == pytest.approx(0.002)
    # The parts add up to what the client saw.
    assert sum(split[p] for p in latency.PD_PARTS) == pytest.approx(client.ttft)


def test_a_reading_of_two_requests_is_refused():
    two = histograms(
        e2e_request_latency_seconds=(0.06, 2),
        time_to_first_token_seconds=(0.05, 2),
        request_queue_time_seconds=(0, 2),
        inter_token_latency_seconds=(0, 0),
        nixl_xfer_time_seconds=(0, 0),
    )
    with pytest.raises(ValueError, match="prefill's vllm:e2e_request_latency_seconds observed 2 requests"):
        latency.split_pd(latency.ClientTiming(0.1, None, 1), (EMPTY, two), (EMPTY, two))


def test_plain_engine_split_and_medians_and_table():
    after = histograms(
        e2e_request_latency_seconds=(0.1, 1),
        time_to_first_token_seconds=(0.020, 1),
        request_queue_time_seconds=(0, 1),
        inter_token_latency_seconds=(0.06, 30),
        nixl_xfer_time_seconds=(0, 0),
    )
    split = latency.split_plain(latency.ClientTiming(0.024, 0.0025, 31), (EMPTY, after))
    assert split["ttft_http"] == pytest.approx(0.004) and split["tpot_router"] == pytest.approx(0.0005)
    medians = latency.medians([{"ttft": 0.1, "tpot": None}, {"ttft": 0.3, "tpot": None}, {"ttft": 0.2}])
    assert medians == {"ttft": pytest.approx(0.2), "tpot": None}
    text = latency.table({"plain engine": {"ttft": 0.024}, "PD proxy": {"ttft": 0.1, "router": 0.02}})
    assert text.splitlines()[1].split() == ["ttft", "24.0", "ms", "100.0", "ms"]
    assert text.splitlines()[2].split() == ["router", "-", "20.0", "ms"]
