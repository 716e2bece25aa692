"""Fault drills under a bounded load (issue #28 item 4): `make drills`.

Starts what the e2e run starts (tests/test_e2e.py: the chart's cpu preset for a tiny model the
run makes, real vLLM 0.13 CPU engines and NIXL, the PD proxy in vLLM's CPU image's Python) and a
plain engine for the greedy reference of every prompt. Then, for each drill, a few clients send
streamed greedy completions through the proxy for a bounded time (WARM_S seconds, then until
answers are right again or MAX_OUTAGE_S after the fault, then AFTER_RECOVERY_S; a client starts a
request at most every PACE_S seconds, a failed one at most once a second, so the load lasts as long
as the drill by time on a fast machine and a slow one alike), a fault is injected, and the harness does
what Kthena's recovery does for a dead pod, at once: it starts the process again from the same
rendered script (the real controller's timing is not part of these figures: see
docs/failure-modes.md). Throughout, each engine's rendered livenessProbe is played as the
kubelet plays it (Liveness): an engine whose /health fails failureThreshold times in a row is
restarted. Each request is classed ok, failed, truncated or wrong against the
reference (harness.drill_judgement); each drill's counts and its recovery time are printed, written to
out/drills/summary.json, and held against the thresholds docs/failure-modes.md documents: a
drill worse than documented makes the exit code 1.

Drills: prefill killed (SIGKILL), decode killed mid-stream (SIGKILL), the proxy killed
(SIGKILL), prefill restarted (SIGTERM, as a rollout stops it). Then prefill and decode killed with
MooncakeConnector moving the KV cache (Mooncake's transfer engine over TCP, a model whose KV head
count is its block size: tests/test_e2e_mooncake.py), named mooncake-<drill>.

Then the drills behind Kthena's router (run_kthena_drills): the local cluster, the same preset
with router.type kthena, the engine pods Kthena v1.0.0's controller creates run by the process
kubelet (which plays their probes, restarts and deletions), Kthena v1.0.0's router carrying the
load. Drills: prefill's and decode's engine killed (SIGKILL; the kubelet restarts the container),
a rollout (a start-script change applied as helm upgrade sends it) of one serving group and of
two. Binds loopback only; every process it started is stopped on the way out.


Over 400 lines: the driver of `make drills`: the load, the faults behind the PD proxy and behind
Kthena's router on real engines; the judgement is in drill_judgement. A cut waits for a run on
real engines to check it by (about 16 min, both cores)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import json
import os
import shutil
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "scripts")]

from harness import drill_judgement  # noqa: E402
from support.localpods import AUTH, ENGINE_NICE, wait_ready  # noqa: E402
from support.pdcheck import (  # noqa: E402
    MAX_TOKENS,
    MOONCAKE_KV_HEADS,
    PROMPTS,
    READY_TIMEOUT,
    completions,
    engine,
    local_run,
    mooncake_values,
    pd_setup,
    proxy_container,
    render,
    start_plain_engine,
)

OUT = REPO / "out" / "drills"
DOC = REPO / "docs" / "failure-modes.md"
CLIENTS = 3
WARM_S = 5.0
# Long enough for the rendered liveness probe to restart a dead engine (5 x 30 s) and its load.
MAX_OUTAGE_S = 240.0
AFTER_RECOVERY_S = 5.0
# A rollout replaces one group after the other, each in drainSeconds plus its engines' start.
ROLLOUT_MAX_S = 600.0
# The load ends with its drill, by time: a client starts a request at most every PACE_S seconds,
# so its count bound (MAX_REQUESTS) is one it cannot reach within the longest drill, however fast
# the machine answers. A count that a fast machine spent first once ended the two-group rollout's
# load at 268 s, before the rollout settled, and the drill was judged "no right answer after the
# fault" with 3,000 of 3,000 answers right (issue #37). A 2-layer model answers in about 0.25 s.
PACE_S = 0.2
LOAD_MAX_S = WARM_S + ROLLOUT_MAX_S + MAX_OUTAGE_S + AFTER_RECOVERY_S + 60.0
MAX_REQUESTS = int(LOAD_MAX_S / PACE_S) + 1
# How long a restarted router may route nothing before the drill applies the documented
# workaround (an annotation on the engine pods; docs/troubleshooting.md), and that annotation.
ROUTER_STUCK_S = 20.0
ROUTER_RESTARTS = 4
RESYNC_ANNOTATION = "mooncake-pd.io/router-resync"
PROXY = ("127.0.0.1", 8080)
PROXY_DRILLS = ("prefill-killed", "decode-killed", "proxy-killed", "prefill-restarted")
# The same behind the proxy with MooncakeConnector moving the KV cache (Mooncake's transfer engine
# over TCP; tests/test_e2e_mooncake.py's setup): its engines killed, each drill's name prefixed.
MOONCAKE_PREFIX = "mooncake-"
MOONCAKE_DRILLS = (f"{MOONCAKE_PREFIX}prefill-killed", f"{MOONCAKE_PREFIX}decode-killed")
# The drills behind Kthena's router (run_kthena_drills), after the proxy's: each with the values
# of its deployment over kthenarun.VALUES (one deployment per distinct set, in this order).
KTHENA_DRILLS: dict[str, dict[str, Any]] = {
    "kthena-router-restarted": {},
    "kthena-prefill-killed": {},
    "kthena-decode-killed": {},
    "kthena-rollout": {},
    # Two serving groups: Kthena's rolling update replaces one at a time, the other serves.
    "kthena-rollout-two-groups": {"servingGroups": 2},
}


def stream(prompt: int, target: tuple[str, int] = PROXY, timeout: float = 60) -> tuple[str | None, bool, str]:
    """One streamed greedy completion through the router at `target`: (text, complete, error)."""
    body = {"model": "tiny", "prompt": PROMPTS[prompt], "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    text, done = None, False
    try:
        connection = http.client.HTTPConnection(*target, timeout=timeout)
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json", **AUTH})
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

    def __init__(self, clock: Callable[[], float], target: tuple[str, int] = PROXY):
        self.clock, self.target = clock, target
        self.requests: list[drill_judgement.Request] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(CLIENTS)]

    def _client(self, index: int) -> None:
        began = time.monotonic()
        for n in range(MAX_REQUESTS):
            if self.stop.is_set() or time.monotonic() - began > LOAD_MAX_S:
                return
            prompt = (index * 3 + n) % len(PROMPTS)
            sent = time.monotonic()
            start = self.clock()
            text, complete, error = stream(prompt, self.target)
            with self.lock:
                self.requests.append(drill_judgement.Request(start, self.clock(), prompt, text, complete, error))
            # A refused request answers at once: one try a second per client; else the pace.
            self.stop.wait(max(0.0, (PACE_S if complete else 1.0) - (time.monotonic() - sent)))

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
            return any(r.start >= fault_at and drill_judgement.classify(r, reference) == "ok" for r in self.requests)


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


def run_drills(
    run, only: set[str] | None, names: tuple[str, ...] = PROXY_DRILLS, prefix: str = "", mooncake: bool = False
) -> dict[str, Any]:
    """The drills `names` behind the proxy (each a PROXY_DRILLS name after `prefix`); mooncake:
    with MooncakeConnector and a model it runs (pdcheck.mooncake_values), else NixlConnector."""
    if only and not only & set(names):
        return {"summaries": [], "reference": None, "liveness": {}}
    processes = run.processes
    setup = pd_setup(run, mooncake_values(), MOONCAKE_KV_HEADS) if mooncake else pd_setup(run)
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
        assert container.probe_url, f"{name} has no readiness probe"
        procs[name] = processes.run(container, f"{name}-{starts[name]}", 10 if name == "proxy" else ENGINE_NICE)
        return wait_ready(procs[name], container.probe_url, READY_TIMEOUT)

    for name in ("prefill", "decode", "proxy"):
        start(name)
    # One request through the pair before the clock runs: the connector's handshake is not a drill.
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

    for name, act in ((f"{prefix}{n}", a) for n, a in drills.items()):
        if name not in names or (only and name not in only):
            continue
        summary = drive(name, act, clock, reference, PROXY)
        summaries.append(summary)
        restarted = {k: len(v.restarts) for k, v in kubelets.items() if v.restarts}
        liveness[name] = restarted
        for kubelet in kubelets.values():
            kubelet.restarts.clear()
        print(json.dumps({**summary.as_dict(), "liveness_restarts": restarted}), flush=True)
    for kubelet in kubelets.values():
        kubelet.stop.set()
    processes.close()  # the Kthena drills start engines of their own
    return {"summaries": summaries, "reference": reference, "liveness": liveness}


def drive(
    name: str,
    act: Callable[[], Callable[[], bool] | None],
    clock: Callable[[], float],
    reference: list[str],
    target: tuple[str, int],
    loads: list[Load] | None = None,
) -> drill_judgement.Summary:
    """One drill: WARM_S of load, the fault (`act`), then the load until a request sent after the
    fault (or after the fault has settled, where `act` returns a predicate saying so: a rollout)
    is answered right, at most MAX_OUTAGE_S (a rollout: ROLLOUT_MAX_S), then AFTER_RECOVERY_S."""
    with Load(clock, target) as load:
        if loads is not None:
            loads.append(load)  # a fault that replaces the router moves the load's target
        time.sleep(WARM_S)
        fault_at = clock()
        settled = act()
        deadline = fault_at + (MAX_OUTAGE_S if settled is None else ROLLOUT_MAX_S)
        since = fault_at
        while settled is not None and clock() < deadline and not settled():
            time.sleep(0.5)
        if settled is not None:
            since = clock()
        while clock() < deadline and not load.recovered_since(since, reference):
            time.sleep(0.5)
        time.sleep(AFTER_RECOVERY_S)
    return drill_judgement.summarize(name, load.requests, reference, fault_at, None if settled is None else since)


def run_kthena_drills(run, only: set[str] | None, reference: list[str] | None) -> dict[str, Any]:
    """The drills behind Kthena's router on the local cluster: the pods Kthena v1.0.0's controller
    created run as processes on the process kubelet's nodes (tests/support/kube/kubelet.py), which
    plays their probes, restarts and deletions (preStop, SIGTERM, the grace period) as kubelet
    does; nothing here restarts an engine itself. One deployment per set of values (KTHENA_DRILLS)."""
    from support.kube import build
    from support.kube.cluster import Cluster
    from support.pdcheck import PdSetup

    names = [n for n in KTHENA_DRILLS if not only or n in only]
    if not names:
        return {"summaries": [], "kubelet": []}
    build.build_all(log=lambda _: None)
    setup = pd_setup(run, kthena_values({}))
    if reference is None:
        plain, plain_url = start_plain_engine(run, setup)
        reference, _ = completions(plain_url, concurrent=False)
        run.processes.stop(plain)
    cluster = Cluster(run.base / "cluster")
    cluster.up()
    summaries: list[drill_judgement.Summary] = []
    events: list[Any] = []
    origin = time.monotonic()

    def clock() -> float:
        return time.monotonic() - origin

    try:
        for extra in unique(KTHENA_DRILLS[n] for n in names):
            values = kthena_values(extra)
            deployed = PdSetup(
                render(run.base / "models", values), setup.roles, setup.network, setup.work, setup.models
            )
            chosen = [n for n in names if KTHENA_DRILLS[n] == extra]
            summaries += kthena_drills(run, cluster, deployed, values, chosen, reference, clock, events)
    finally:
        cluster.down()
        # The control plane's and the router's logs (its access log: each request's status and
        # the router's reason) beside the engines'.
        shutil.copytree(cluster.folder / "logs", OUT / "logs" / "cluster", dirs_exist_ok=True)
    return {"summaries": summaries, "kubelet": events}


def kthena_values(extra: dict[str, Any]) -> dict[str, Any]:
    from support.kthenarun import VALUES

    return {**VALUES, **extra}


def unique(items: Any) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def kthena_drills(run, cluster, setup, values, names, reference, clock, events) -> list[drill_judgement.Summary]:
    """`names` on one deployment of `setup` (rendered with `values`)."""
    from support.kthenarun import (
        PORT,
        address,
        annotate,
        engine_pods,
        kthena_deployment,
        ready,
        role_of,
        routes,
        wait_ready_pods,
    )

    summaries = []
    with kthena_deployment(run, cluster, setup) as deployment:
        api, kubelet = deployment.api, deployment.kubelet
        target = address(deployment.router)
        count = len(deployment.pods)
        cluster = deployment.cluster
        for prompt in range(count):
            stream(prompt, target)  # the NIXL handshakes are not a drill
        rollouts = [0]

        def crash(role: str) -> Callable[[], None]:
            def act() -> None:
                pod = next(n for n, p in sorted(engine_pods(api).items()) if role_of(p) == role)
                kubelet.event(f"drill: SIGKILL {pod}")
                kill(kubelet.process(pod))

            return act

        def rollout() -> Callable[[], bool]:
            """A script change of both roles (an env var in their start scripts), applied as helm
            upgrade sends it; Kthena's rolling update replaces the serving groups."""
            old = {p["metadata"]["uid"] for p in engine_pods(api).values()}
            rollouts[0] += 1
            env = {"OMP_NUM_THREADS": "1", "DRILL_ROLLOUT": str(rollouts[0])}
            deployment.apply(render(run.base / "models", {**values, "engine.env": env}))
            kubelet.event(f"drill: rollout {rollouts[0]} applied")

            def settled() -> bool:
                """The old pods gone (not only terminating), as many new ones, all Ready."""
                if any(p["metadata"]["uid"] in old for p in api.list("v1", "Pod", "default")):
                    return False
                pods = engine_pods(api)
                return len(pods) == count and all(ready(p) for p in pods.values())

            return settled

        def router_restarted() -> Callable[[], bool]:
            """ROUTER_RESTARTS times: SIGKILL of the router, started again (as its Deployment
            starts a new pod) beside pods that stay Ready. Kthena v1.0.0's router may then pair
            none of them (its ModelServer sync skips pods its pod handler stored first:
            docs/troubleshooting.md, "no decode pod found"); when it routes nothing for
            ROUTER_STUCK_S, the documented workaround is applied (an annotation on each engine
            pod, whose update event pairs it) and the time until it routes again is recorded."""
            nonlocal target
            for restart in range(ROUTER_RESTARTS):
                kubelet.event(f"drill: SIGKILL the router ({restart + 1} of {ROUTER_RESTARTS})")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(cluster.pids["kthena-router"], signal.SIGKILL)
                cluster.stop_router()
                router = cluster.start_router([(pod_ip, PORT) for pod_ip in kubelet.addresses()])
                target = address(router)
                loads[-1].target = target
                if until_routes(router, ROUTER_STUCK_S) is not None:
                    starts.append({"stuck": False})
                    continue
                kubelet.event(f"drill: the router routes nothing after {ROUTER_STUCK_S:g} s; annotating the pods")
                annotate(api, list(engine_pods(api).values()), RESYNC_ANNOTATION, str(len(starts)))
                starts.append({"stuck": True, "routes_after_annotation_s": until_routes(router, ROUTER_STUCK_S)})
            return lambda: True

        def until_routes(router: str, seconds: float) -> float | None:
            """Seconds until the router answers a completion, None if not within `seconds`."""
            begun = time.monotonic()
            while time.monotonic() - begun < seconds:
                if routes(router):
                    return round(time.monotonic() - begun, 1)
                time.sleep(0.5)
            return None

        starts: list[dict[str, Any]] = []
        loads: list[Load] = []
        acts: dict[str, Callable[[], Any]] = {
            "kthena-router-restarted": router_restarted,
            "kthena-prefill-killed": crash("prefill"),
            "kthena-decode-killed": crash("decode"),
            "kthena-rollout": rollout,
            "kthena-rollout-two-groups": rollout,
        }
        try:
            for name in names:
                wait_ready_pods(api, count, READY_TIMEOUT)
                summary = drive(name, acts[name], clock, reference, target, loads)
                if name == "kthena-router-restarted":
                    stuck = sum(1 for start in starts if start["stuck"])
                    notes: dict[str, object] = {"router_starts": starts[:], "stuck_starts": f"{stuck} of {len(starts)}"}
                    summary = dataclasses.replace(summary, notes=notes)
                summaries.append(summary)
                print(json.dumps(summary.as_dict()), flush=True)
        finally:
            events += [(at, f"[{', '.join(names)}] {text}") for at, text in kubelet.events]
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="run this drill only (repeatable)")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    limits = drill_judgement.thresholds(DOC)

    def summary(run) -> dict[str, Any]:
        return {
            "drills": [
                {**s.as_dict(), "liveness_restarts": result.get("liveness", {}).get(s.drill, {})}
                for s in result.get("summaries", [])
            ],
            "load": {"clients": CLIENTS, "max_tokens": MAX_TOKENS, "warm_s": WARM_S, "max_outage_s": MAX_OUTAGE_S},
            "wall_s": round(run.wall, 1),
            "kubelet_events": result.get("kubelet", []),
        }

    only = set(args.only) if args.only else None
    every = [*PROXY_DRILLS, *MOONCAKE_DRILLS, *KTHENA_DRILLS]
    unknown = (only or set()) - set(every)
    if unknown:
        parser.error(f"no drill {', '.join(sorted(unknown))}: the drills are {', '.join(every)}")
    with local_run(OUT, "mooncake-pd-drills-", summary) as run:
        result.update(run_drills(run, only))
        mooncake = run_drills(run, only, MOONCAKE_DRILLS, MOONCAKE_PREFIX, mooncake=True)
        result["summaries"] = result["summaries"] + mooncake["summaries"]
        result["liveness"] = {**result["liveness"], **mooncake["liveness"]}
        # The Kthena drills make the NIXL runs' model again: its reference is the proxy drills'.
        kthena = run_kthena_drills(run, only, result["reference"])
        result["summaries"] = result["summaries"] + kthena["summaries"]
        result["kubelet"] = kthena["kubelet"]
    problems = [p for s in result["summaries"] for p in drill_judgement.worse_than_documented(s, limits.get(s.drill))]
    for problem in problems:
        print(f"worse than documented: {problem}")
    print(f"wrote {OUT / 'summary.json'}")
    worse = {p.split(":", 1)[0] for p in problems}
    print(f"drills: {len(result['summaries']) - len(worse)} passed, {len(worse)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
