"""Where the time goes on the PD path (issue #28 item 3): `make ttft-split`.

Starts what the e2e run starts (tests/test_e2e.py: the chart's cpu preset for a tiny model the
run makes, real vLLM 0.13 CPU engines and NIXL, the PD proxy in vLLM's CPU image's Python), and
sends the same streamed completions, one at a time, to:
- one plain engine (decode's flags without the connector): the reference;
- prefill then decode directly, as the KV canary does (the least a router must do);
- the PD proxy (router.type proxy);
- Kthena v1.0.0's router (router.type kthena), on the local cluster, to the engine pods Kthena's
  controller created, run as processes by the process kubelet (tests/support/kthenarun.py;
  `--no-kthena` skips it).
For each request it reads both engines' /metrics before and after, and splits TTFT into router,
prefill, KV transfer and decode's first step, and TPOT into engine and router
(harness.latency says how). It also measures the cores each process keeps busy while it
serves nothing (polling threads compete with decode on a small machine). Prints the medians and
writes them, with every request's split, to out/ttft-split/summary.json. Plumbing figures on 2
cores: the ratios, not the milliseconds, carry over to a cluster.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "scripts")]

from harness import latency  # noqa: E402
from support.localpods import AUTH, ENGINE_NICE, get_text, post_json, wait_ready  # noqa: E402
from support.pdcheck import (  # noqa: E402
    PREFILL_ASK,
    PROMPTS,
    READY_TIMEOUT,
    engine,
    local_run,
    metrics_url,
    pd_setup,
    proxy_container,
    start_plain_engine,
)

OUT = REPO / "out" / "ttft-split"
MAX_TOKENS = 32


def stream(base: str, body: dict[str, Any], start: float | None = None, timeout: float = 120) -> latency.ClientTiming:
    """A streamed /v1/completions request: when each text chunk arrived, counted from `start`
    (default: when this request is sent)."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    start = time.perf_counter() if start is None else start
    connection.request(
        "POST", "/v1/completions", json.dumps({**body, "stream": True}), {"Content-Type": "application/json", **AUTH}
    )
    answer = connection.getresponse()
    if answer.status != 200:
        raise RuntimeError(f"{base}: HTTP {answer.status}: {answer.read()[:300]!r}")
    times = []
    for raw in answer:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[len("data: ") :])
        if any(c.get("text") for c in chunk.get("choices") or []):
            times.append(time.perf_counter())
    connection.close()
    return latency.client_timing(start, times)


def cpu_seconds(pgid: int) -> float:
    """User and system CPU seconds of every live process in a process group (/proc)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def idle_cpu(procs: dict[str, Any], seconds: float = 4.0) -> dict[str, float]:
    """The cores each process group keeps busy while it serves nothing (polling threads)."""
    before = {name: cpu_seconds(proc.popen.pid) for name, proc in procs.items()}
    time.sleep(seconds)
    return {name: round((cpu_seconds(proc.popen.pid) - before[name]) / seconds, 3) for name, proc in procs.items()}


def request(prompt: str) -> dict[str, Any]:
    # ignore_eos: every request streams MAX_TOKENS tokens, so TPOT is over the same length.
    return {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}


def direct_pd(prefill: str, decode: str, prompt: str) -> latency.ClientTiming:
    """Prefill then decode, sent by this script itself: no router process in between."""
    start = time.perf_counter()  # the client's TTFT runs from before the prefill request
    ask = {**request(prompt), "max_tokens": 1, "kv_transfer_params": PREFILL_ASK}
    first = post_json(f"{prefill}/v1/completions", ask)
    return stream(decode, {**request(prompt), "kv_transfer_params": first["kv_transfer_params"]}, start)


def measure(run, requests: int, values: dict[str, Any], kthena: bool = True) -> dict[str, Any]:
    processes = run.processes
    setup = pd_setup(run, values)
    prompts = [PROMPTS[i % len(PROMPTS)] + f" ({i})" for i in range(requests)]
    rows: dict[str, list[dict[str, float | None]]] = {"plain engine": [], "PD direct": [], "PD proxy": []}

    # The plain engine: decode's own flags without the connector.
    plain, plain_url = start_plain_engine(run, setup)
    stream(plain_url, request("warm up"))
    idle = {"plain engine": idle_cpu({"engine": plain})}
    for prompt in prompts:
        plain_before = get_text(f"{plain_url}/metrics")
        timing = stream(plain_url, request(prompt))
        rows["plain engine"].append(latency.split_plain(timing, (plain_before, get_text(f"{plain_url}/metrics"))))
    processes.stop(plain)

    # The PD pair and the proxy, as the chart starts them.
    started = {}
    for name in ("prefill", "decode"):
        _, prepared = engine(setup.objects, setup.roles[name], setup.work, setup.network)
        started[name] = (processes.run(prepared, f"{name}-engine", ENGINE_NICE), prepared)
    for proc, prepared in started.values():
        assert prepared.probe_url, "an engine without a readiness probe"
        wait_ready(proc, prepared.probe_url, READY_TIMEOUT)
    proxy_ready = proxy_container(setup)
    proxy = processes.run(proxy_ready, "proxy")
    assert proxy_ready.probe_url, "the proxy without a readiness probe"
    wait_ready(proxy, proxy_ready.probe_url, 120)
    urls = {name: metrics_url(setup.roles[name]).removesuffix("/metrics") for name in ("prefill", "decode")}
    proxy_url = "http://127.0.0.1:8080"
    # One of each first: the NIXL handshake and the first compiled shapes are not what we measure.
    direct_pd(urls["prefill"], urls["decode"], "warm up")
    stream(proxy_url, request("warm up"))
    idle["PD"] = idle_cpu({"prefill": started["prefill"][0], "decode": started["decode"][0], "proxy": proxy})
    for label, send in (
        ("PD direct", lambda p: direct_pd(urls["prefill"], urls["decode"], p)),
        ("PD proxy", lambda p: stream(proxy_url, request(p))),
    ):
        for prompt in prompts:
            before = {name: get_text(f"{url}/metrics") for name, url in urls.items()}
            timing = send(prompt)
            after = {name: get_text(f"{url}/metrics") for name, url in urls.items()}
            rows[label].append(
                latency.split_pd(timing, (before["prefill"], after["prefill"]), (before["decode"], after["decode"]))
            )
    processes.close()
    if kthena:
        rows["Kthena router"], idle["Kthena"] = kthena_rows(run, prompts, values)
    return {
        "medians": {label: latency.medians(r) for label, r in rows.items()},
        "requests": rows,
        "idle_cores": idle,
        "max_tokens": MAX_TOKENS,
    }


def kthena_rows(run, prompts: list[str], values: dict[str, Any]) -> tuple[list[dict[str, float | None]], Any]:
    """The same requests through Kthena v1.0.0's router, to the pods Kthena's controller created on
    the local cluster (tests/support/kthenarun.py: the process kubelet runs them)."""
    from support.kthenarun import VALUES, kthena_deployment, role_of
    from support.kube import build
    from support.kube.cluster import Cluster

    build.build_all(log=lambda _: None)
    setup = pd_setup(run, {**VALUES, **values})
    cluster = Cluster(run.base / "cluster")
    cluster.up()
    rows = []
    try:
        with kthena_deployment(run, cluster, setup) as deployment:
            urls = {
                role_of(
                    pod
                ): f"http://{pod['status']['podIP']}:{pod['spec']['containers'][0]['ports'][0]['containerPort']}"
                for pod in deployment.pods.values()
            }
            stream(deployment.router, request("warm up"))
            procs = {run_.name: c.proc for run_ in deployment.kubelet.pods.values() for c in run_.containers if c.proc}
            idle = idle_cpu(procs)
            for prompt in prompts:
                before = {name: get_text(f"{url}/metrics") for name, url in urls.items()}
                timing = stream(deployment.router, request(prompt))
                after = {name: get_text(f"{url}/metrics") for name, url in urls.items()}
                rows.append(
                    latency.split_pd(timing, (before["prefill"], after["prefill"]), (before["decode"], after["decode"]))
                )
    finally:
        cluster.down()
        shutil.copytree(cluster.folder / "logs", OUT / "logs" / "cluster", dirs_exist_ok=True)
    return rows, idle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10, help="requests per path, one at a time (default: 10)")
    parser.add_argument(
        "--set-json",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="a chart value on top of the e2e run's (helm --set-json), to measure what a setting costs",
    )
    parser.add_argument(
        "--no-kthena",
        action="store_true",
        help="skip the Kthena router's column (it starts the local cluster: make cluster-tools builds it)",
    )
    args = parser.parse_args(argv)
    values = {}
    for item in args.set_json:
        key, _, text = item.partition("=")
        values[key] = json.loads(text)
    result: dict[str, Any] = {}

    def summary(run) -> dict[str, Any]:
        return {**result, "wall_s": round(run.wall, 1)}

    with local_run(OUT, "mooncake-pd-ttft-split-", summary) as run:
        result.update(measure(run, args.requests, values, not args.no_kthena), values=values)
    print(latency.table(result["medians"]))
    print("cores kept busy while idle:", json.dumps(result["idle_cores"]))
    print(f"wrote {OUT / 'summary.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
