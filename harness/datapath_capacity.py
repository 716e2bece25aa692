"""The data path's capacity (issue 41 item 5): what the PD proxy and Kthena's router add to a PD
request, at 1, 10, 100 and 1,000 concurrent streams, and the request rate at which each, on one
core, adds more than 10 ms to the 99th percentile of the time to first token.

What runs (harness/streamload.py; judgement in harness/capacity.py):
- stand-in engines that answer at once (streamload `standin`): prefill answers the
  `do_remote_decode` half with one token and vLLM's kv_transfer_params, decode streams the
  request's tokens one every TPOT seconds; one asyncio process (uvloop in the e2e venv);
- the PD proxy as the chart renders it (chart/templates/proxy.yaml: the vendored vLLM-Ascend
  v0.13.0 script with the rendered flags, its image's Python: the e2e venv with the vLLM-Ascend
  overlay, localpods.prepare), pinned to one core (taskset -c COMPONENT_CPU);
- Kthena v1.0.0's router on the local cluster (Cluster.start_router, pinned the same way): the
  chart's release with router.type kthena is applied, KWOK runs its engine pods (Running and Ready
  at addresses of 10.0.0.0/16), and the router finds them from its ModelServer;
- the load generator (streamload `load`) and the stand-ins on the other core (HARNESS_CPU).

No relay of ours is in the measured path: the load generator, the stand-ins and the proxy run
inside the router's network namespace (nsenter), where the pod addresses are local routes, so the
load reaches the router at its own port and the router the stand-ins at the pods' addresses, as
on a cluster; only the router's API-server connection goes through the cluster's relay. With
`--only proxy` no cluster starts and the same runs in a network namespace of its own (only its
loopback), so the chart's ports are free whatever else the machine runs.

Per concurrency (closed loop: N streams, each sending its next request when the last ended), the
baseline is the proxy's own two requests sent straight to the stand-ins (streamload `--mode pd`),
then the same load through the proxy and through the router; added = through - baseline, at P50
and P99. The saturation search offers open-loop Poisson rates (doubling, then geometric midpoints)
to the component and to the baseline at the same rate, until the added P99 passes 10 ms. The
harness's own cost (CPU seconds per request of the load generator and of the stand-ins, and how
busy their core was) is measured in every run and reported; a figure taken while the harness core
was busier than capacity.HARNESS_BUSY is marked.

Output: out/scale/datapath.json, out/scale/datapath.png; held against the bounds table of
docs/scale-datapath.md (exit 1 where one breaks; --no-check skips). `--quick`: shorter windows,
no midpoints (about 3 minutes with the cluster). Every process runs under `nice -n 19` (the lead
re-runs the published figures on a quiet machine) and is stopped by PID on the way out.


Over 400 lines: the driver of `make scale-datapath`: the PD proxy and Kthena's router each placed
in its namespace, loaded step by step and measured, then the report; the judgement is in capacity.
A cut waits for a run to check it by."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "scripts")]

from harness import capacity  # noqa: E402
from harness.procstat import cpu_seconds, status_kib  # noqa: E402
from mooncake_pd import helm, manifests, paths  # noqa: E402
from support.localpods import E2E_VENV, Network, Processes, prepare, traversable_by_others  # noqa: E402
from support.proxyargs import parse_proxy_args  # noqa: E402

STREAMLOAD = REPO / "harness" / "streamload.py"
OUT = REPO / "out" / "scale"
DOC = REPO / "docs" / "scale-datapath.md"
CONCURRENCY = (1, 10, 100, 1000)
# The request: its tokens, one every TPOT seconds after the first (20 tokens/s a stream: a large
# model's decode under load); the load generator's prompt is 180 characters.
TOKENS = 32
TPOT = 0.05
COMPONENT_CPU = "1"
HARNESS_CPU = "0"
NICE = 19
# The saturation search: the first offered rate, the highest (what one harness core offers with
# room: measured, see docs/scale-datapath.md), and the midpoints tried after the first step past.
START_RPS = 5.0
CEILING_RPS = 1280.0
REFINEMENTS = 1
# A component behind with less than this share of its core was starved by the machine's other work.
STARVED = 0.8
# A step's window holds this many requests at least (up to MAX_STEP_WINDOW seconds).
STEP_SAMPLES = 100
MAX_STEP_WINDOW = 10.0
# Bounded waits: the proxy imports vLLM (torch) before it listens; the router routes once its
# store has the pods (kthenarun.ROUTE_TIMEOUT's basis); KWOK's pods Ready (kthenarun's).
PROXY_READY_S = 180.0
ROUTE_S = 120.0
PODS_READY_S = 180.0
# Inside the namespace: the proxy's port (8080, its default, is the router's there), and the one
# port of both roles behind the router (the chart requires one; the ModelServer's workloadPort).
PROXY_PORT = 8090
KTHENA_PORT = 7100
# A request through a saturated component may queue for seconds; one that takes longer than this
# counts as failed (the whole request, 32 tokens at 50 ms, takes 1.6 s when nothing queues);
# --quick waits 10 s.
REQUEST_TIMEOUT_S = 30.0
# Closed-loop streams start spread over one request's length, so N streams are not in lock-step.
SPREAD_S = TOKENS * TPOT
# The model the requests name where no router routes by it (the chart's model.servedName).
MODEL = "ds_r1"


@dataclass(frozen=True)
class Timing:
    warmup: float
    window: float
    step_window: float
    refinements: int
    factor: float  # the saturation search's step between rates
    step_samples: int = STEP_SAMPLES
    max_step_window: float = MAX_STEP_WINDOW
    request_timeout: float = REQUEST_TIMEOUT_S
    settle: float = 30.0  # the longest wait for a component to go idle after a load


FULL = Timing(warmup=1.0, window=6.0, step_window=5.0, refinements=REFINEMENTS, factor=2.0)
QUICK = Timing(
    warmup=0.5,
    window=2.0,
    step_window=2.0,
    refinements=0,
    factor=4.0,
    step_samples=30,
    max_step_window=4.0,
    request_timeout=10.0,
    settle=10.0,
)
# Closed-loop windows per concurrency: a stream is 1.6 s long, so 1 stream needs the longest
# window for a few requests; 1,000 fill a short one.
WINDOWS = {1: 8.0, 10: 6.0, 100: 5.0, 1000: 5.0}
QUICK_WINDOWS = {1: 4.0, 10: 3.0, 100: 2.0, 1000: 2.0}


def memory_of(pid: int) -> dict[str, float]:
    """RSS now and at its peak, MiB (nan where /proc does not say)."""

    def mib(key: str) -> float:
        kib = status_kib(pid, key)
        return math.nan if kib is None else round(kib / 1024, 1)

    return {"rss_mib": mib("VmRSS"), "peak_rss_mib": mib("VmHWM")}


def harness_python() -> str:
    python = E2E_VENV / "bin" / "python3"
    return str(python) if python.exists() else sys.executable


@dataclass
class Place:
    """Where the harness and the proxy run: a network namespace, the router's (its process `pid`)
    or one of our own (own_namespace), so the chart's ports (7100, 8080, ...) are free there."""

    pid: int

    def prefix(self, user: tuple[int, int] | None = None) -> list[str]:
        argv = ["nsenter", "-t", str(self.pid), "--net", "--mount"]
        if os.geteuid() != 0:
            argv += ["--user", "--preserve-credentials"]
        elif user:
            argv += ["--setuid", str(user[0]), "--setgid", str(user[1])]
        return argv


@dataclass
class Harness:
    place: Place
    processes: Processes
    prefill: tuple[str, int]
    decode: tuple[str, int]
    model: str
    timing: Timing
    # Every address the stand-ins answer at (prefill's and decode's, at each port the proxy's and
    # the router's renders give them).
    listen: set[tuple[str, int]] = field(default_factory=set)
    standin_pid: int = 0

    def start_standins(self, work: Path) -> None:
        listen = sorted({self.prefill, self.decode} | self.listen)
        argv = [
            *self.place.prefix(), "taskset", "-c", HARNESS_CPU, harness_python(), str(STREAMLOAD), "standin",
            *[word for address, port in listen for word in ("--listen", f"{address}:{port}")],
            "--tpot", str(TPOT),
        ]  # fmt: skip
        proc = self.processes.start("standin", argv, {"PATH": "/usr/bin:/bin"}, work, nice=NICE)
        self.standin_pid = proc.popen.pid
        wait_log(proc.log, "standin: ready", 30.0, proc.popen)

    def load(
        self,
        mode: str,
        url: str = "",
        concurrency: int = 0,
        rate: float = 0.0,
        window: float = 0.0,
        tokens: int = TOKENS,
    ) -> dict[str, Any]:
        """One load in the place, on the harness core; its figures, with the stand-ins' CPU."""
        window = window or self.timing.window
        warmup = max(self.timing.warmup, SPREAD_S + 0.5) if concurrency >= 100 else self.timing.warmup
        argv = [
            *self.place.prefix(), "taskset", "-c", HARNESS_CPU, harness_python(), str(STREAMLOAD), "load",
            "--mode", mode, "--tokens", str(tokens), "--tpot-hint", str(TPOT), "--model", self.model,
            "--duration", str(window), "--warmup", str(warmup), "--drain", "10",
            "--request-timeout", str(self.timing.request_timeout),
        ]  # fmt: skip
        (ph, pp), (dh, dp) = self.prefill, self.decode
        argv += (
            ["--url", url] if mode == "direct" else ["--prefill", f"http://{ph}:{pp}", "--decode", f"http://{dh}:{dp}"]
        )
        argv += ["--concurrency", str(concurrency)] if concurrency else ["--rate", str(rate)]
        standin0 = cpu_seconds(self.standin_pid)
        done = subprocess.run(
            ["nice", "-n", str(NICE), *argv],
            capture_output=True,
            text=True,
            timeout=warmup + window + self.timing.request_timeout + 30,
            check=False,
        )
        standin = cpu_seconds(self.standin_pid) - standin0
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout)
        result["standin_cpu_s"] = round(standin, 4)
        return result


def own_namespace(processes: Processes, work: Path) -> Place:
    """A network namespace with only its loopback, held by a sleeping process (stopped with the
    others): where the proxy is measured without the cluster."""
    mapping = [] if os.geteuid() == 0 else ["--map-root-user"]
    argv = ["unshare", *mapping, "--net", "--mount", "sh", "-c", "ip link set lo up && echo up && exec sleep 86400"]
    proc = processes.start("namespace", argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, work, nice=NICE)
    wait_log(proc.log, "up", 10.0, proc.popen)
    return Place(proc.popen.pid)


def wait_log(log: Path, text: str, timeout: float, popen: subprocess.Popen[bytes]) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if log.exists() and text in log.read_text(errors="replace"):
            return time.monotonic() - start
        if popen.poll() is not None:
            raise RuntimeError(f"{log.name}: exited {popen.returncode} before '{text}':\n{tail(log)}")
        time.sleep(0.2)
    raise RuntimeError(f"{log.name}: no '{text}' within {timeout:g} s:\n{tail(log)}")


def tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


# -- the components ----------------------------------------------------------------------------
def render(values: dict[str, Any]) -> list[manifests.Manifest]:
    """The chart's defaults (the guide's A3 1P1D) with `values` (dotted keys) on top."""
    return manifests.parse(helm.template(paths.helm_binary(), (), values))


@dataclass
class Component:
    name: str
    url: str
    pid: int


def proxy_render() -> tuple[list[manifests.Manifest], dict[str, Any], dict[str, Any]]:
    """The chart's defaults with router.type proxy and the proxy on PROXY_PORT: (objects, the
    Deployment's pod spec, its container)."""
    objects = render({"proxy.port": PROXY_PORT})
    spec = manifests.one(objects, "Deployment", f"{paths.RELEASE}-proxy")["spec"]["template"]["spec"]
    return objects, spec, spec["containers"][0]


def start_proxy(harness: Harness, processes: Processes, work: Path) -> tuple[Component, dict[str, Any]]:
    """The proxy's container as rendered, its Services' names resolved to the stand-ins'
    addresses (the ports as rendered), on the component core in the place."""
    objects, spec, rendered = proxy_render()
    wanted = parse_proxy_args(rendered.get("args", []))
    network = Network()
    for (host, port), (address, _) in zip(
        [*wanted.prefillers, *wanted.decoders], [harness.prefill, harness.decode], strict=True
    ):
        network.add(host, port, port)
        network.add_address(host, address)
    container = prepare(objects, spec, rendered, work / "proxy", network)
    # The container's user where it can reach the image's Python (a .tools that links into a
    # folder only its owner enters cannot be: then this user; it changes nothing measured).
    python = Path(container.env["PATH"].split(":")[0])
    user = container.user if traversable_by_others(python.resolve()) else None
    argv = [*harness.place.prefix(user), "taskset", "-c", COMPONENT_CPU, *container.argv]
    proc = processes.start("proxy", argv, container.env, container.cwd, None, nice=NICE)
    ready_s = wait_log(proc.log, "Uvicorn running on", PROXY_READY_S, proc.popen)
    described = {
        "command": [*rendered.get("command", []), *rendered.get("args", [])],
        "ran": container.argv,
        "image": rendered["image"],
        "resources": rendered.get("resources"),
        "user": user or "this process's (the image's Python is not reachable by the container's user here)",
        "ready_s": round(ready_s, 1),
    }
    return Component("proxy", f"http://127.0.0.1:{PROXY_PORT}", proc.popen.pid), described


@contextlib.contextmanager
def router_cluster(work: Path) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """The local cluster with the chart's release behind Kthena's router (router.type kthena),
    its engine pods Ready on KWOK's nodes, the router pinned to the component core: (cluster,
    objects, what was measured of the start). Stopped on the way out."""
    from support.kthenarun import HOOK_KINDS, OWNED_KINDS, engine_count, role_of, wait_ready_pods
    from support.kube.cluster import Cluster, apply_all

    cluster = Cluster(work / "cluster")
    timings: dict[str, Any] = {}
    clock = time.monotonic()
    cluster.up()
    timings["cluster_up_s"] = round(time.monotonic() - clock, 1)
    api = cluster.client()
    objects = render({"router.type": "kthena", "decode.port": KTHENA_PORT})
    try:
        clock = time.monotonic()
        # The router before the release, as kthenarun does (a router started beside Ready pods
        # may leave them out of its pairs: docs/troubleshooting.md).
        cluster.start_router([], cpus=COMPONENT_CPU)
        timings["router_started_s"] = round(time.monotonic() - clock, 1)
        apply_all(api, [o for o in objects if o["kind"] not in HOOK_KINDS])
        pods = wait_ready_pods(api, engine_count(objects), PODS_READY_S)
        timings["pods_ready_s"] = round(time.monotonic() - clock, 1)
        addresses = {role_of(p): p["status"]["podIP"] for p in pods.values()}
        timings["pods"] = addresses
        timings["model"] = manifests.one(objects, "ModelRoute")["spec"]["modelName"]
        timings["port"] = int(manifests.one(objects, "ModelServer")["spec"]["workloadPort"]["port"])
        yield cluster, objects, timings
    finally:
        with contextlib.suppress(Exception):
            for obj in reversed(objects):
                if obj["kind"] in OWNED_KINDS:
                    api.delete(obj)
        cluster.down()


def wait_routing(harness: Harness, url: str) -> float:
    start = time.monotonic()
    last: dict[str, Any] = {}
    while time.monotonic() - start < ROUTE_S:
        last = harness.load("direct", url, concurrency=1, window=0.5)
        if last["completed_all"] and not last["failed_all"]:
            return time.monotonic() - start
        time.sleep(1)
    raise RuntimeError(f"the router did not route within {ROUTE_S:g} s: {last.get('failures')}")


# -- the measurements --------------------------------------------------------------------------
def figures_of(result: dict[str, Any]) -> capacity.Latency:
    return capacity.Latency.of(result["ttft_ms"], result["failed"], result["duration_s"], result["offered"])


def harness_cost(result: dict[str, Any]) -> dict[str, float]:
    """The harness's CPU per request and how busy its core was, over the whole load."""
    done = result["completed_all"] + result["failed_all"]
    busy = capacity.busy_share(result["cpu_s"] + result["standin_cpu_s"], result["wall_s"])
    return {
        "loadgen_cpu_ms_per_request": round(capacity.cpu_ms_per_request(result["cpu_s"], done), 3),
        "standin_cpu_ms_per_request": round(capacity.cpu_ms_per_request(result["standin_cpu_s"], done), 3),
        "harness_core_busy": round(busy, 3),
        "harness_bound": bool(busy > capacity.HARNESS_BUSY),
    }


def settle(pid: int, timeout: float = 30.0) -> None:
    """Until `pid` is idle (under 5% of a core over half a second), so that a component still
    working off the last load does not share the core with the next."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(0.5)
        if cpu_seconds(pid) - before < 0.025:
            return


def measured_through(harness: Harness, component: Component, **load: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    before = cpu_seconds(component.pid)
    result = harness.load("direct", component.url, **load)
    cpu = cpu_seconds(component.pid) - before
    settle(component.pid, harness.timing.settle)
    done = result["completed_all"] + result["failed_all"]
    extra = {
        "component_cpu_ms_per_request": round(capacity.cpu_ms_per_request(cpu, done), 3),
        "component_core_busy": round(capacity.busy_share(cpu, result["wall_s"]), 3),
    }
    return result, extra


def latency_dict(latency: capacity.Latency) -> dict[str, Any]:
    return capacity.as_dict(latency)


def run_concurrency(harness: Harness, components: list[Component], say: Any, quick: bool) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for n in CONCURRENCY:
        window = (QUICK_WINDOWS if quick else WINDOWS)[n]
        base = harness.load("pd", concurrency=n, window=window)
        baseline = figures_of(base)
        row: dict[str, Any] = {"baseline": {**latency_dict(baseline), **harness_cost(base), "loop": base["loop"]}}
        # A baseline this slow at P99 is the harness queueing: what is added at this level is not
        # the component's alone.
        row["baseline"]["harness_queues"] = bool(baseline.p99 > capacity.HARNESS_P99_MS)
        say(f"c={n:5d} baseline   P50 {baseline.p50:7.2f} P99 {baseline.p99:7.2f} ms, {baseline.rate:6.1f}/s")
        for component in components:
            result, extra = measured_through(harness, component, concurrency=n, window=window)
            through = figures_of(result)
            added = capacity.Added.of(through, baseline)
            row[component.name] = {
                **latency_dict(through),
                "added": capacity.as_dict(added),
                **extra,
                **harness_cost(result),
                "failures": result["failures"],
            }
            say(
                f"c={n:5d} {component.name:10s} P50 {through.p50:7.2f} P99 {through.p99:7.2f} ms, "
                f"added {added.p50:+7.2f}/{added.p99:+7.2f}, {through.rate:6.1f}/s, failed {through.failed}, "
                f"{component.name} core {extra['component_core_busy']:.2f}"
            )
        table[str(n)] = row
    return table


def run_saturation(
    harness: Harness, component: Component, baselines: dict[float, dict[str, Any]], say: Any, timing: Timing
) -> dict[str, Any]:
    """Open-loop steps from START_RPS up by timing.factor until the component falls behind
    (capacity.Step.behind), then midpoints towards where its added P99 passes 10 ms and where it
    falls behind: the two rates."""
    steps: list[capacity.Step] = []
    rows: list[dict[str, Any]] = []
    behind: dict[float, bool] = {}
    harness_limit = None

    def measure(rate: float) -> bool:
        nonlocal harness_limit
        if harness_limit is not None and rate >= harness_limit:
            return False
        # Enough requests in a step's window for its P99 to mean something at a low rate.
        window = max(timing.step_window, min(timing.step_samples / rate, timing.max_step_window))
        if rate not in baselines:
            baselines[rate] = harness.load("pd", rate=rate, window=window)
        base = baselines[rate]
        result, extra = measured_through(harness, component, rate=rate, window=window)
        step = capacity.Step(rate, figures_of(result), figures_of(base))
        if not step.baseline_sound():
            harness_limit = rate
            say(f"{component.name} at {rate:g}/s: the baseline itself fell behind (harness limit); stopping")
            return False
        steps.append(step)
        behind[rate] = bool(step.behind())
        rows.append({
            "rate": rate,
            "window_s": window,
            "through": latency_dict(step.through),
            "baseline": latency_dict(step.baseline),
            "added": capacity.as_dict(step.added),
            "past": step.past(),
            "behind": step.behind(),
            # Behind while it had less than STARVED of its core: the machine's other work, not
            # the component, set this step's figure (a niced run beside other work).
            "starved": bool(step.behind()) and extra["component_core_busy"] < STARVED,
            "lag_p99_ms": round(capacity.percentile(result["lag_ms"], 99), 3),
            **extra,
            **harness_cost(result),
        })  # fmt: skip
        reason = step.past()
        say(
            f"{component.name:6s} {rate:7.1f}/s: added P50 {step.added.p50:+8.2f} P99 {step.added.p99:+8.2f} ms, "
            f"{step.through.requests}/{step.through.offered} done, {component.name} core "
            f"{extra['component_core_busy']:.2f}"
            + (f"  PAST: {reason}" if reason else "")
            + (" (STARVED: the machine's other work held its core)" if rows[-1]["starved"] else "")
        )
        return True

    while (rate := capacity.next_rate(behind, START_RPS, CEILING_RPS, 0, timing.factor)) is not None:
        if not measure(rate):
            break
    judges = (lambda s: s.past(), lambda s: s.behind())
    for _ in range(timing.refinements):
        for judge in judges:
            rate = capacity.midpoint(steps, judge, [s.rate for s in steps])
            # Below the harness's limit only (a midpoint between two measured steps always is).
            if rate is not None and (harness_limit is None or rate < harness_limit):
                measure(rate)
    found = capacity.saturation(steps)
    top = capacity.ceiling(steps)
    return {
        "steps": sorted(rows, key=lambda r: r["rate"]),
        "result": capacity.as_dict(found),
        "ceiling": capacity.as_dict(top),
        "harness_limit_rps": harness_limit,
    }


def flat_figures(report: dict[str, Any]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for n, row in report["concurrency"].items():
        for name, data in row.items():
            if name == "baseline":
                figures[f"baseline-p99-ms-c{n}"] = data["p99"] if data["p99"] is not None else math.nan
                figures[f"harness-busy-c{n}"] = data["harness_core_busy"]
                continue
            figures[f"{name}-added-p50-ms-c{n}"] = _num(data["added"]["p50"])
            figures[f"{name}-added-p99-ms-c{n}"] = _num(data["added"]["p99"])
            figures[f"{name}-failed-c{n}"] = float(data["failed"])
    for name, sat in report["saturation"].items():
        result = sat["result"]
        rate = result["rate"] if result["rate"] is not None else result["at_least"]
        figures[f"{name}-saturation-rps"] = _num(rate) if result["below"] is None else 0.0
        top = sat["ceiling"]
        rate = top["rate"] if top["rate"] is not None else top["at_least"]
        figures[f"{name}-ceiling-rps"] = _num(rate) if top["below"] is None else 0.0
        within = [s for s in sat["steps"] if not s["past"]]
        if within:
            top = max(within, key=lambda s: s["rate"])
            figures[f"{name}-cpu-ms-per-request"] = top["component_cpu_ms_per_request"]
    for name, memory in report.get("memory", {}).items():
        figures[f"{name}-peak-rss-mib"] = _num(memory.get("peak_rss_mib"))
    base10 = report["concurrency"].get("10", {}).get("baseline")
    if base10:
        figures["loadgen-cpu-ms-per-request"] = base10["loadgen_cpu_ms_per_request"]
        figures["standin-cpu-ms-per-request"] = base10["standin_cpu_ms_per_request"]
    return figures


def _num(value: Any) -> float:
    return float(value) if value is not None else math.nan


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    # Log scales; an added figure at or below FLOOR_MS (a baseline percentile as slow as the
    # component's: the noise of two short windows) is drawn at FLOOR_MS.
    floor = 0.1
    levels = [int(n) for n in report["concurrency"]]
    colors = {"proxy": "tab:blue", "router": "tab:orange"}
    for name in report["components"]:
        for pct, style in (("p50", "--"), ("p99", "-")):
            values = [max(_num(report["concurrency"][str(n)][name]["added"][pct]), floor) for n in levels]
            left.plot(levels, values, style, marker="o", color=colors.get(name), label=f"{name} added {pct.upper()}")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("concurrent streams (closed loop)")
    left.set_ylabel("added TTFT (ms)")
    left.set_title("What each adds to TTFT, one core")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    for name, sat in report["saturation"].items():
        steps = sorted(sat["steps"], key=lambda s: s["rate"])
        values = [max(_num(s["added"]["p99"]), floor) for s in steps]
        right.plot([s["rate"] for s in steps], values, marker="o", color=colors.get(name), label=f"{name} added P99")
        rate = sat["result"]["rate"]
        if rate:
            right.axvline(rate, linestyle=":", color=colors.get(name), label=f"{name} crosses 10 ms: {rate:g}/s")
    right.axhline(capacity.SATURATION_MS, color="red", linestyle="--", label=f"{capacity.SATURATION_MS:g} ms")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("offered requests/s (open loop, Poisson)")
    right.set_ylabel("added P99 TTFT (ms)")
    right.set_title("Saturation on one core")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(
        f"{report['date']}, {report['machine']['cpus']} cores, {TOKENS} tokens at {TPOT * 1000:g} ms, "
        f"nice {NICE}" + (" (quick)" if report["quick"] else ""),
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def markdown(report: dict[str, Any]) -> str:
    """The run's tables as Markdown (out/scale/datapath.md), for docs/scale-datapath.md."""
    lines = [
        f"Measured {report['date']} on {report['machine']['cpus']} cores ({report['machine']['cpu_model']}), "
        f"every process at nice {report['nice']}; load average at the start "
        f"{report['machine']['loadavg_at_start']}; {'quick run' if report['quick'] else 'full run'} "
        f"in {report['wall_s']} s.",
        "",
        "| Streams | Baseline P50 / P99 (ms) | "
        + " | ".join(f"{c} added P50 / P99 (ms) | {c} req/s | {c} failed | {c} core" for c in report["components"])
        + " | Harness core |",
        "| --- | --- | " + " | ".join("--- | --- | --- | ---" for _ in report["components"]) + " | --- |",
    ]
    for n, row in report["concurrency"].items():
        base = row["baseline"]
        cells = [f"{n}", f"{fmt(base['p50'], 2)} / {fmt(base['p99'], 2)}"]
        for c in report["components"]:
            d = row[c]
            cells += [
                f"{fmt(d['added']['p50'], 2)} / {fmt(d['added']['p99'], 2)}",
                fmt(d["rate"]),
                str(d["failed"]),
                fmt(d["component_core_busy"], 2),
            ]
        cells.append(fmt(max(row[c]["harness_core_busy"] for c in ["baseline", *report["components"]]), 2))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| Component | Rate (req/s) | Added P50 / P99 (ms) | Done / offered | Core | Past 10 ms because |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c, sat in report["saturation"].items():
        for st in sat["steps"]:
            lines.append(
                f"| {c} | {st['rate']:g} | {fmt(st['added']['p50'], 2)} / {fmt(st['added']['p99'], 2)} | "
                f"{st['through']['requests']} / {st['through']['offered']} | {fmt(st['component_core_busy'], 2)} | "
                f"{st['past'] or '-'}{' (starved)' if st['starved'] else ''} |"
            )
    lines += [
        "",
        "| Component | 10 ms P99 crossing (req/s) | Keeps up to (req/s) | CPU ms a request | Peak RSS (MiB) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c, sat in report["saturation"].items():
        r, top = sat["result"], sat["ceiling"]
        crossing = (
            fmt(r["rate"])
            if r["rate"] is not None
            else (f"< {r['below']:g}" if r["below"] is not None else f">= {fmt(r['at_least'])}")
        )
        keeps = fmt(top["rate"]) if top["rate"] is not None else f">= {fmt(top['at_least'])}"
        fig = report["figures"]
        lines.append(
            f"| {c} | {crossing} | {keeps} | {fmt(fig.get(f'{c}-cpu-ms-per-request'), 2)} | "
            f"{fmt(report['memory'][c]['peak_rss_mib'], 0)} |"
        )
    base10 = report["concurrency"].get("10", {}).get("baseline", {})
    lines += [
        "",
        f"Harness: the load generator {fmt(base10.get('loadgen_cpu_ms_per_request'), 2)} ms and the stand-ins "
        f"{fmt(base10.get('standin_cpu_ms_per_request'), 2)} ms of CPU a request at 10 streams "
        f"({report['concurrency'].get('10', {}).get('baseline', {}).get('loop', '?')} event loop).",
    ]
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter windows, no midpoints (~3 min)")
    parser.add_argument("--only", choices=("proxy", "router", "both"), default="both")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--doc", type=Path, default=DOC, help="the bounds table")
    parser.add_argument("--no-check", action="store_true", help="write the figures, hold them against nothing")
    args = parser.parse_args()
    timing = QUICK if args.quick else FULL
    for tool in ("taskset", "nsenter", "nice"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("two cores are needed: the component on one, the harness on the other")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lines: list[str] = []

    def say(text: str) -> None:
        stamp = f"[{time.monotonic() - started:6.1f}s] {text}"
        lines.append(stamp)
        print(stamp, flush=True)

    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "quick": args.quick,
        "nice": NICE,
        "profile": {"tokens": TOKENS, "tpot_s": TPOT, "component_cpu": COMPONENT_CPU, "harness_cpu": HARNESS_CPU},
    }
    work = Path(tempfile.mkdtemp(prefix="datapath-", dir="/var/tmp"))
    work.chmod(0o755)
    # Fresh logs: the waits read them for a line a process prints when ready.
    shutil.rmtree(args.out / "datapath-logs", ignore_errors=True)
    processes = Processes(args.out / "datapath-logs")
    try:
        with contextlib.ExitStack() as stack:
            components: list[Component] = []
            listen: set[tuple[str, int]] = set()
            if args.only in ("router", "both"):
                cluster, _, timings = stack.enter_context(router_cluster(work))
                report["cluster"] = timings
                place = Place(cluster.pids["kthena-router"])
                addresses = (timings["pods"]["prefill"], timings["pods"]["decode"])
                listen = {(address, timings["port"]) for address in addresses}
                say(f"cluster up, router pinned to CPU {COMPONENT_CPU}, pods at {timings['pods']}")
            else:
                place = own_namespace(processes, work)
                addresses = ("127.0.0.11", "127.0.0.12")
            wanted = parse_proxy_args(proxy_render()[2].get("args", []))
            engines = ((addresses[0], wanted.prefiller_ports[0]), (addresses[1], wanted.decoder_ports[0]))
            model = report.get("cluster", {}).get("model", MODEL)
            harness = Harness(place, processes, engines[0], engines[1], model, timing, listen)
            harness.start_standins(work)
            if args.only in ("proxy", "both"):
                proxy, described = start_proxy(harness, processes, work)
                report["proxy"] = described
                components.append(proxy)
                say(f"proxy ready in {described['ready_s']} s: {' '.join(described['command'][:4])} ...")
            if args.only in ("router", "both"):
                from support.kube.cluster import ROUTER_PORT

                router = Component("router", f"http://127.0.0.1:{ROUTER_PORT}", place.pid)
                report["router_routes_s"] = round(wait_routing(harness, router.url), 1)
                components.append(router)
                say(f"router routes after {report['router_routes_s']} s")
            report["components"] = [c.name for c in components]
            report["concurrency"] = run_concurrency(harness, components, say, args.quick)
            baselines: dict[float, dict[str, Any]] = {}
            report["saturation"] = {c.name: run_saturation(harness, c, baselines, say, timing) for c in components}
            report["memory"] = {c.name: memory_of(c.pid) for c in components}
            report["standin_memory"] = memory_of(harness.standin_pid)
    finally:
        processes.close()
        shutil.rmtree(work, ignore_errors=True)
    report["wall_s"] = round(time.monotonic() - started, 1)
    figures = flat_figures(report)
    report["figures"] = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in figures.items()}
    problems: list[str] = []
    if not args.no_check:
        documented = capacity.bounds(args.doc)
        # The bounds of what this run measured (--only proxy holds none of the router's).
        held = {k: b for k, b in documented.items() if k.split("-")[0] in [*report["components"], "loadgen", "standin"]}
        problems = capacity.breaks(figures, held)
        report["bounds"] = {
            k: {"op": b.op, "value": b.value, "measured": report["figures"].get(k)} for k, b in held.items()
        }
    report["breaks"] = problems
    report["log"] = lines
    (args.out / "datapath.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out / "datapath.png")
    (args.out / "datapath.md").write_text(markdown(report))
    print(f"wrote {args.out / 'datapath.json'} and datapath.png in {report['wall_s']} s")
    for problem in problems:
        print(f"BOUND BROKEN: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
