"""Fault drills under a bounded load (issue #28 item 4): `make drills`.

Starts what the e2e run starts (tests/test_e2e.py: the chart's cpu preset for a tiny model the
run makes, real vLLM 0.13 CPU engines and NIXL, the PD proxy in vLLM's CPU image's Python) and a
plain engine for the greedy reference of every prompt. Then, for each drill, a few clients send
streamed greedy completions through the proxy for a bounded time (WARM_S seconds, then until
answers are right again or MAX_OUTAGE_S after the fault, then AFTER_RECOVERY_S; at most
MAX_REQUESTS requests per client, a failed one at most once a second), a fault is injected, and the harness does
what Kthena's recovery does for a dead pod, at once: it starts the process again from the same
rendered script (the real controller's timing is not part of these figures: see
docs/failure-modes.md). Throughout, each engine's rendered livenessProbe is played as the
kubelet plays it (Liveness): an engine whose /health fails failureThreshold times in a row is
restarted. Each request is classed ok, failed, truncated or wrong against the
reference (mooncake_pd.drill); each drill's counts and its recovery time are printed, written to
out/drills/summary.json, and held against the thresholds docs/failure-modes.md documents: a
drill worse than documented makes the exit code 1.

Drills: prefill killed (SIGKILL), decode killed mid-stream (SIGKILL), the proxy killed
(SIGKILL), prefill restarted (SIGTERM, as a rollout stops it). Binds loopback only; every process
it started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "scripts")]

from mooncake_pd import drill  # noqa: E402
from support.localpods import ENGINE_NICE, wait_ready  # noqa: E402
from support.pdcheck import (  # noqa: E402
    MAX_TOKENS,
    PROMPTS,
    READY_TIMEOUT,
    completions,
    engine,
    local_run,
    pd_setup,
    proxy_container,
    start_plain_engine,
)

OUT = REPO / "out" / "drills"
DOC = REPO / "docs" / "failure-modes.md"
CLIENTS = 3
WARM_S = 5.0
# Long enough for the rendered liveness probe to restart a dead engine (5 x 30 s) and its load.
MAX_OUTAGE_S = 240.0
AFTER_RECOVERY_S = 5.0
MAX_REQUESTS = 400
PROXY = ("127.0.0.1", 8080)


def stream(prompt: int, timeout: float = 60) -> tuple[str | None, bool, str]:
    """One streamed greedy completion through the proxy: (text, complete, error)."""
    body = {"model": "tiny", "prompt": PROMPTS[prompt], "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    text, done = None, False
    try:
        connection = http.client.HTTPConnection(*PROXY, timeout=timeout)
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        if answer.status != 200:
            return None, False, f"HTTP {answer.status}"
        text, last, error = "", "", ""
        for raw in answer:
            line = raw.decode(errors="replace").strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                last = line
                chunk = json.loads(line[len("data: ") :])
                if "error" in chunk:
                    # vLLM ends a stream whose request failed with an error object, then [DONE]:
                    # the client is told, so it is not a complete answer.
                    error = f"error in the stream after {len(text)} characters: {str(chunk['error'])[:160]}"
                text += "".join(c.get("text") or "" for c in chunk.get("choices") or [])
        connection.close()
        if error:
            return text, False, error
        return text, done, "" if done else f"stream ended without [DONE] after {len(text)} characters: {last[:160]}"
    except (OSError, http.client.HTTPException, ValueError) as e:
        return text, False, f"{e.__class__.__name__}: {e}"


class Load:
    """CLIENTS threads sending requests back to back until stopped (bounded in count and time)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.requests: list[drill.Request] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(CLIENTS)]

    def _client(self, index: int) -> None:
        for n in range(MAX_REQUESTS):
            if self.stop.is_set():
                return
            prompt = (index * 3 + n) % len(PROMPTS)
            start = self.clock()
            text, complete, error = stream(prompt)
            with self.lock:
                self.requests.append(drill.Request(start, self.clock(), prompt, text, complete, error))
            if not complete:
                time.sleep(1.0)  # a refused request answers at once: one try a second per client

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)

    def recovered_since(self, fault_at: float, reference: list[str]) -> bool:
        with self.lock:
            return any(r.start >= fault_at and drill.classify(r, reference) == "ok" for r in self.requests)


class Liveness:
    """What the kubelet does with an engine's rendered livenessProbe: GET its path every
    periodSeconds (timeoutSeconds), and restart the container after failureThreshold failures in
    a row (vLLM's /health answers 503 once its engine core is dead,
    vllm/entrypoints/serve/instrumentator/health.py). Readiness is not played: no Service drops
    a NotReady pod here, so the proxy keeps sending to it until it restarts."""

    def __init__(self, name: str, probe: dict[str, Any], url: str, restart: Callable[[str], float]):
        self.name, self.url, self.restart = name, url, restart
        self.period = float(probe.get("periodSeconds", 10))
        self.timeout = float(probe.get("timeoutSeconds", 1))
        self.threshold = int(probe.get("failureThreshold", 3))
        self.restarts: list[float] = []
        self.stop = threading.Event()
        self.paused = threading.Event()  # while a drill restarts the engine itself
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as answer:
                return answer.status == 200
        except (OSError, ValueError):
            return False

    def _run(self) -> None:
        failures = 0
        while not self.stop.wait(self.period):
            if self.paused.is_set():
                failures = 0
                continue
            failures = 0 if self._healthy() else failures + 1
            if failures >= self.threshold:
                self.restarts.append(time.monotonic())
                self.restart(self.name)
                failures = 0


def kill(proc) -> None:
    """SIGKILL to the process group at once (a crash); Processes.stop reaps it afterwards."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.popen.pid, signal.SIGKILL)


def run_drills(run, only: set[str] | None) -> dict[str, Any]:
    processes = run.processes
    setup = pd_setup(run)
    roles = setup.roles
    plain, plain_url = start_plain_engine(run, setup)
    reference, _ = completions(plain_url, concurrent=False)
    processes.stop(plain)

    containers = {
        name: engine(setup.objects, roles[name], setup.work, setup.network)[1] for name in ("prefill", "decode")
    }
    containers["proxy"] = proxy_container(setup)
    procs: dict[str, Any] = {}
    starts: dict[str, int] = {}

    def start(name: str) -> float:
        starts[name] = starts.get(name, 0) + 1
        container = containers[name]
        procs[name] = processes.run(container, f"{name}-{starts[name]}", 10 if name == "proxy" else ENGINE_NICE)
        return wait_ready(procs[name], container.probe_url, READY_TIMEOUT)

    for name in ("prefill", "decode", "proxy"):
        start(name)
    # One request through the pair before the clock runs: the NIXL handshake is not a drill.
    stream(0)

    def relive(name: str) -> float:
        processes.stop(procs[name])
        return start(name)

    kubelets = {}
    for name in ("prefill", "decode"):
        container = roles[name]["entryTemplate"]["spec"]["containers"][0]
        probe = container["livenessProbe"]
        url = f"http://127.0.0.1:{probe['httpGet']['port']}{probe['httpGet']['path']}"
        kubelets[name] = Liveness(name, probe, url, relive)
        kubelets[name].thread.start()

    def crash(name: str) -> Callable[[], None]:
        def act() -> None:
            kubelet = kubelets.get(name)  # the proxy's is not played: its probe is not /health
            if kubelet:
                kubelet.paused.set()
            kill(procs[name])
            relive(name)
            if kubelet:
                kubelet.paused.clear()

        return act

    def rollout(name: str) -> Callable[[], None]:
        def act() -> None:
            kubelets[name].paused.set()
            relive(name)  # SIGTERM, SIGKILL after the harness's grace
            kubelets[name].paused.clear()

        return act

    drills = {
        "prefill-killed": crash("prefill"),
        "decode-killed": crash("decode"),
        "proxy-killed": crash("proxy"),
        "prefill-restarted": rollout("prefill"),
    }
    summaries = []
    liveness: dict[str, dict[str, int]] = {}
    origin = time.monotonic()

    def clock() -> float:
        return time.monotonic() - origin

    for name, act in drills.items():
        if only and name not in only:
            continue
        with Load(clock) as load:
            time.sleep(WARM_S)
            fault_at = clock()
            act()
            deadline = fault_at + MAX_OUTAGE_S
            while clock() < deadline and not load.recovered_since(fault_at, reference):
                time.sleep(0.5)
            time.sleep(AFTER_RECOVERY_S)
        summary = drill.summarize(name, load.requests, reference, fault_at)
        summaries.append(summary)
        restarted = {k: len(v.restarts) for k, v in kubelets.items() if v.restarts}
        liveness[name] = restarted
        for kubelet in kubelets.values():
            kubelet.restarts.clear()
        print(json.dumps({**summary.as_dict(), "liveness_restarts": restarted}), flush=True)
    for kubelet in kubelets.values():
        kubelet.stop.set()
    return {"summaries": summaries, "reference": reference, "liveness": liveness}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="run this drill only (repeatable)")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    limits = drill.thresholds(DOC)

    def summary(run) -> dict[str, Any]:
        return {
            "drills": [
                {**s.as_dict(), "liveness_restarts": result.get("liveness", {}).get(s.drill, {})}
                for s in result.get("summaries", [])
            ],
            "load": {"clients": CLIENTS, "max_tokens": MAX_TOKENS, "warm_s": WARM_S, "max_outage_s": MAX_OUTAGE_S},
            "wall_s": round(run.wall, 1),
        }

    with local_run(OUT, "mooncake-pd-drills-", summary) as run:
        result.update(run_drills(run, set(args.only) if args.only else None))
    problems = [p for s in result["summaries"] for p in drill.worse_than_documented(s, limits.get(s.drill))]
    for problem in problems:
        print(f"worse than documented: {problem}")
    print(f"wrote {OUT / 'summary.json'}")
    worse = {p.split(":", 1)[0] for p in problems}
    print(f"drills: {len(result['summaries']) - len(worse)} passed, {len(worse)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
