"""Benchmark results: find the result of a release's benchmark Job (`vllm bench serve`, the
chart's `benchmark.enabled`), and report or compare runs. The result JSON is what vLLM 0.13.0's
`vllm bench serve --save-result` writes (vllm/benchmarks/serve.py: the benchmark() result, plus
the run's settings main() adds); the Job prints it on one line after MARKER."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mooncake_pd.errors import FAILED, MooncakePdError

MARKER = "mooncake-pd-benchmark-result: "
COMPONENT = "benchmark"


class BenchError(MooncakePdError):
    """No result to report: no Job, a missing or unreadable result."""


class JobFailed(BenchError):
    """The benchmark Job ran and failed."""

    exit_code = FAILED


@dataclass(frozen=True)
class Metric:
    """One row of the report: its name (the Grafana dashboard's name for the same quantity),
    the result key, whether more is better, and whether it counts things (printed as an integer:
    "0 failed requests", never "0.00")."""

    name: str
    key: str
    higher_is_better: bool
    count: bool = False


# Latencies: mean, p50 (vLLM's median), p90 and p99, as --percentile-metrics ttft,tpot,itl,e2el
# --metric-percentiles 50,90,99 make vLLM write them.
LATENCIES = {
    "ttft": "Time to first token",
    "tpot": "Time per output token",
    "itl": "Inter-token latency",
    "e2el": "End-to-end latency",
}
METRICS = (
    Metric("Successful requests", "completed", True, count=True),
    Metric("Failed requests", "failed", False, count=True),
    Metric("Benchmark duration (s)", "duration", False),
    Metric("Request throughput (req/s)", "request_throughput", True),
    Metric("Output token throughput (tok/s)", "output_throughput", True),
    Metric("Total token throughput (tok/s)", "total_token_throughput", True),
    *(
        Metric(f"{name} {stat} (ms)", f"{prefix}_{short}_ms", False)
        for short, name in LATENCIES.items()
        for stat, prefix in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99"))
    ),
)


def parse_log(lines: Iterable[str]) -> dict[str, Any]:
    """The result JSON the Job printed after MARKER (the last one, if several)."""
    found = None
    for line in lines:
        if MARKER in line:
            found = line.split(MARKER, 1)[1].strip()
    if found is None:
        raise BenchError(f"the log has no line with {MARKER.strip()!r}: the benchmark did not finish")
    try:
        result = json.loads(found)
    except json.JSONDecodeError as e:
        raise BenchError(f"the result line is not JSON: {e}") from None
    return normalise(result)


def normalise(result: dict[str, Any]) -> dict[str, Any]:
    """A result with `failed` present: older vLLM results have only the per-request errors."""
    out = dict(result)
    if "failed" not in out and isinstance(out.get("errors"), list):
        out["failed"] = sum(1 for e in out["errors"] if e)
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _format(value: float | None, count: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    if count:
        return f"{value:,.0f}"
    return f"{value:,.0f}" if float(value).is_integer() and abs(value) >= 1 else f"{value:,.2f}"


def rows(results: list[dict[str, Any]]) -> list[tuple[Metric, list[float | None]]]:
    """Each metric any result has, with its value in each result (None where missing)."""
    found = []
    for metric in METRICS:
        values = [_number(r.get(metric.key)) for r in results]
        if any(v is not None for v in values):
            found.append((metric, values))
    return found


def change(metric: Metric, before: float | None, after: float | None) -> str:
    """`after` against `before`: the difference and the relative change, marked better/worse."""
    if before is None or after is None:
        return ""
    diff = after - before
    if diff == 0:
        return "="
    percent = f" ({diff / before:+.1%})" if before else ""
    better = (diff > 0) == metric.higher_is_better
    number = f"{diff:+,.0f}" if metric.count else f"{diff:+,.2f}"
    return f"{number}{percent} {'better' if better else 'worse'}"


def table(results: list[tuple[str, dict[str, Any]]]) -> str:
    """A text table: one column per run; with two runs, the change from the first to the second."""
    labels = [label for label, _ in results]
    data = rows([r for _, r in results])
    header = ["metric", *labels] + (["change"] if len(results) == 2 else [])
    body = []
    for metric, values in data:
        line = [metric.name, *(_format(v, metric.count) for v in values)]
        if len(results) == 2:
            line.append(change(metric, values[0], values[1]))
        body.append(line)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def render(row: list[str]) -> str:
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
        return "  ".join(cells).rstrip()

    return "\n".join([render(header), render(["-" * w for w in widths]), *(render(r) for r in body)])


def workload_line(result: dict[str, Any]) -> str:
    """What was run, from the settings vLLM records in the result."""
    keys = ("backend", "model_id", "num_prompts", "request_rate", "max_concurrency", "burstiness")
    return ", ".join(f"{k} {result[k]}" for k in keys if result.get(k) is not None)


def workload_of(result: dict[str, Any]) -> Any:
    """What a run measured: the chart's workload when it was saved from a release, else the
    settings vLLM records (workload_line)."""
    return (result.get("mooncake_pd") or {}).get("workload") or workload_line(result)


def workload_warnings(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One warning per run whose workload differs from the last run's (the one reported): a
    comparison across workloads compares the workloads, not the deployments."""
    label, last = runs[-1]
    wanted = workload_of(last)
    return [
        f"warning: {other} ran another workload than {label} ({json.dumps(workload_of(o), sort_keys=True)} vs "
        f"{json.dumps(wanted, sort_keys=True)}); their figures are not comparable"
        for other, o in runs[:-1]
        if workload_of(o) != wanted
    ]


def saved(result: dict[str, Any], *, release: str, namespace: str, job: str, workload: Any) -> dict[str, Any]:
    """The result as `bench --json` writes it: vLLM's keys plus where it came from."""
    return {**result, "mooncake_pd": {"release": release, "namespace": namespace, "job": job, "workload": workload}}


def label_of(result: dict[str, Any], fallback: str) -> str:
    meta = result.get("mooncake_pd") or {}
    return meta.get("release") or result.get("label") or fallback


def load(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise BenchError(f"{path}: cannot read a benchmark result ({e})") from None
    if not isinstance(data, dict) or "completed" not in data:
        raise BenchError(f"{path}: not a benchmark result (no 'completed')")
    return normalise(data)


# Cluster side ---------------------------------------------------------------------------------
# The Kubernetes API clients and Jobs are typed Any: the client's models declare every field
# Optional, and these functions read objects the API server filled in (the tests pass stand-ins).


def _created(obj: Any) -> str:
    return obj.metadata.creation_timestamp.isoformat() if obj.metadata.creation_timestamp else ""


def find_job(batch: Any, release: str, namespace: str) -> Any:
    """The release's newest benchmark Job."""
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component={COMPONENT}"
    jobs = batch.list_namespaced_job(namespace, label_selector=selector).items
    if not jobs:
        raise BenchError(
            f"release {release} in {namespace} has no benchmark Job: "
            f"`helm upgrade {release} <chart> -n {namespace} --reuse-values --set benchmark.enabled=true`"
        )
    return max(jobs, key=_created)


def job_state(job: Any) -> str:
    """running, succeeded or failed."""
    status = job.status
    if status.succeeded:
        return "succeeded"
    if status.failed or any(c.type == "Failed" and c.status == "True" for c in status.conditions or []):
        return "failed"
    return "running"


def restart(batch: Any, job: Any, namespace: str) -> Any:
    """A new run of the Job: the same spec under a new name (a Job runs once)."""
    spec = job.spec
    # The API server's own selector and labels of the old run must not be copied.
    spec.selector = None
    labels = {k: v for k, v in (spec.template.metadata.labels or {}).items() if "controller-uid" not in k}
    labels = {k: v for k, v in labels.items() if k not in ("job-name", "batch.kubernetes.io/job-name")}
    spec.template.metadata.labels = labels
    name = f"{job.metadata.name[:50]}-r{int(time.time()) % 100000}"
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": job.metadata.labels,
        "annotations": job.metadata.annotations,
    }
    return batch.create_namespaced_job(
        namespace, {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}
    )


def wait(
    batch: Any, job: Any, namespace: str, timeout: float, progress: Callable[[str], None], poll: float = 10.0
) -> Any:
    """The Job once it has finished, or BenchError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        current = batch.read_namespaced_job(job.metadata.name, namespace)
        state = job_state(current)
        if state != "running":
            return current
        if time.monotonic() > deadline:
            raise BenchError(f"Job {job.metadata.name} still running after {timeout:g} s (--timeout)")
        progress(f"Job {job.metadata.name} is running")
        time.sleep(poll)


def job_log(core: Any, job: Any, namespace: str) -> list[str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job.metadata.name}").items
    if not pods:
        raise BenchError(f"Job {job.metadata.name} has no pod (deleted, or not scheduled yet)")
    pod = max(pods, key=_created)
    return core.read_namespaced_pod_log(pod.metadata.name, namespace, container="bench").splitlines()
