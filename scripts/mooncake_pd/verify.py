"""Verify a live deployment the way the guide does by hand: every pod ready, a chat request
through the router answered, and proof that the KV cache moved from prefill to decode.

The proof follows the connector (the ModelServing's mooncake-pd/kv-connector annotation):
- MooncakeConnectorV1 (vLLM-Ascend): the guide's log lines, which name the request: prefill's
  "Delaying free of N blocks for request R" and decode's "KV cache transfer for request R took X
  ms" (vllm_ascend/distributed/mooncake_connector.py ~1062, ~562).
- NixlConnector and upstream MooncakeConnector: no INFO line names a request (NIXL's per-request
  lines are DEBUG, nixl_connector.py ~725, ~1939), so decode's /metrics are read before and after
  verify's own request: vllm:external_prefix_cache_hits_total must rise (prompt tokens decode did
  not compute, v1/metrics/loggers.py ~520), and on NIXL vllm:nixl_xfer_time_seconds_count must
  rise (one per transfer, nixl_connector.py ~2433) while vllm:nixl_num_failed_transfers_total does
  not. These names were read off real vLLM 0.13 engines by the e2e run (tests/test_e2e.py).

Then the KV canary (chart/files/kv_canary.py, which the helm-test pod and the CronJob run too),
per prefill/decode pair of entry pods, through port-forwards: a request sent through prefill to
decode by verify itself, passing when decode's counters show that its KV cache came over. The
chat request above goes where the router sends it; the canary proves every pair the router may
form, autoscaled ones included (verify lists the pods, where no render can).

The decision (`assess`) is a pure function of what was collected (`Snapshot`), so it is tested
on recorded objects and logs; `collect` does the Kubernetes I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from mooncake_pd import chartfiles
from mooncake_pd.engines import KTHENA as LABEL
from mooncake_pd.errors import MooncakePdError

KTHENA_GROUP, KTHENA_VERSION, MODELSERVINGS = "workload.serving.volcano.sh", "v1alpha1", "modelservings"

# The guide's markers (vLLM-Ascend's mooncake_connector.py and vLLM's loggers.py).
DELAYING_FREE = re.compile(r"Delaying free of (?P<blocks>\d+) blocks for request (?P<request>\S+)")
KV_TRANSFER = re.compile(r"KV cache transfer for request (?P<request>\S+) took (?P<ms>\d+(?:\.\d+)?) ms")
GENERATION = re.compile(r"Avg generation throughput: (?P<rate>\d+(?:\.\d+)?) tokens/s")
LOG_CONNECTOR = "MooncakeConnectorV1"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
NIXL_TRANSFERS = "vllm:nixl_xfer_time_seconds_count"
NIXL_FAILED = "vllm:nixl_num_failed_transfers_total"
METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(?P<value>\S+)")


class VerifyError(MooncakePdError):
    """No cluster, no release or no Kthena CRD: nothing to verify (exit 2)."""


@dataclass(frozen=True)
class Markers:
    delaying_free: dict[str, int] = field(default_factory=dict)  # request -> blocks
    transfers: dict[str, list[float]] = field(default_factory=dict)  # request -> ms, one per worker
    generation_rates: list[float] = field(default_factory=list)


def parse_markers(lines: Iterable[str]) -> Markers:
    """The guide's markers in log lines: prefill's "Delaying free", decode's "KV cache transfer
    ... took X ms" (one per DP/TP worker) and the generation throughput."""
    markers = Markers()
    for line in lines:
        if m := DELAYING_FREE.search(line):
            markers.delaying_free[m["request"]] = markers.delaying_free.get(m["request"], 0) + int(m["blocks"])
        if m := KV_TRANSFER.search(line):
            markers.transfers.setdefault(m["request"], []).append(float(m["ms"]))
        if m := GENERATION.search(line):
            markers.generation_rates.append(float(m["rate"]))
    return markers


def same_request(logged: str, request_id: str) -> bool:
    """vLLM logs the API request id, sometimes with a suffix of its own."""
    return logged == request_id or logged.startswith(request_id + "-") or logged.startswith(request_id + "_")


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]


@dataclass(frozen=True)
class Snapshot:
    """What collect() gathered: the ModelServing, its pods, the answer and the logs after it."""

    modelserving: dict[str, Any]
    pods: list[dict[str, Any]]
    response: Response | None
    logs: dict[str, list[str]]  # pod name -> lines since the request
    error: str | None = None  # why there is no response
    # decode entry pod -> its /metrics text (before, after) the request; read for connectors whose
    # logs name no request (NIXL, upstream Mooncake)
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The KV canary's result per pair (kv_canary.PairResult as a dict); None: it did not run.
    canary: list[dict[str, Any]] | None = None
    # Known advisories the release's layout leaves reachable (mooncake_pd.advisories): warnings,
    # never a failed check (the guide's own deployment is one of them).
    advisories: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    checks: list[Check]
    transfers_ms: dict[str, list[float]]
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "checks": [asdict(c) for c in self.checks],
                "transfers_ms": self.transfers_ms,
                "warnings": self.warnings,
            },
            indent=2,
        )


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def expected_pods(modelserving: dict[str, Any]) -> dict[tuple[str, str], int]:
    """(serving group, role) -> pods Kthena creates for it."""
    name = modelserving["metadata"]["name"]
    spec = modelserving["spec"]
    return {
        (f"{name}-{g}", role["name"]): role.get("replicas", 1) * (role.get("workerReplicas", 0) + 1)
        for g in range(spec.get("replicas", 1))
        for role in spec["template"]["roles"]
    }


PREFLIGHT = "mooncake-pd preflight:"


def preflight_refusal(pod: dict[str, Any]) -> str | None:
    """The preflight's refusal in a pod's termination message (current or last state), if any:
    the reason the engine never started."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for state in ("state", "lastState"):
            message = (((status.get(state) or {}).get("terminated") or {}).get("message") or "").strip()
            if message.startswith(PREFLIGHT):
                return message.splitlines()[0]
    return None


def readiness_checks(snapshot: Snapshot) -> list[Check]:
    checks = []
    for (group, role), expected in expected_pods(snapshot.modelserving).items():
        pods = [
            p
            for p in snapshot.pods
            if _labels(p).get(f"{LABEL}/group-name") == group and _labels(p).get(f"{LABEL}/role") == role
        ]
        ready = [p for p in pods if _ready(p)]
        not_ready = sorted(p["metadata"]["name"] for p in pods if not _ready(p))
        detail = f"{len(ready)}/{expected} ready" + (f"; not ready: {', '.join(not_ready)}" if not_ready else "")
        if len(pods) < expected:
            detail += f"; {expected - len(pods)} missing"
        for pod in sorted((p for p in pods if not _ready(p)), key=lambda p: p["metadata"]["name"]):
            refusal = preflight_refusal(pod)
            if refusal:
                detail += f"; {pod['metadata']['name']}: {refusal}"
        checks.append(Check(f"{role} pods of {group}", len(ready) == expected, detail))
    return checks


def _completion(body: dict[str, Any]) -> str:
    choices = body.get("choices") or [{}]
    message = choices[0].get("message") or {}
    return message.get("content") or choices[0].get("text") or ""


def metric_total(text: str, name: str) -> float:
    """The sum of a metric's samples (every label set) in Prometheus text; 0 when absent."""
    total = 0.0
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if m and m["name"] == name:
            total += float(m["value"])
    return total


def connector_of(modelserving: dict[str, Any]) -> str:
    """The release's KV connector: the chart's annotation (releases before it: the guide's)."""
    annotations = modelserving["metadata"].get("annotations") or {}
    return annotations.get("mooncake-pd/kv-connector", LOG_CONNECTOR)


def metric_checks(snapshot: Snapshot, connector: str, decode_role: str) -> list[Check]:
    """KV transfer judged on decode's /metrics before and after verify's request."""
    if not snapshot.metrics:
        return [Check("decode received the KV cache", False, f"no /metrics read from the {decode_role} pods")]

    def delta(name: str) -> float:
        return sum(
            metric_total(after, name) - metric_total(before, name) for before, after in snapshot.metrics.values()
        )

    prompt = ((snapshot.response.body.get("usage") or {}).get("prompt_tokens") if snapshot.response else None) or 0
    hits = delta(EXTERNAL_HITS)
    checks = [
        Check(
            "decode received the KV cache",
            hits > 0,
            f"{EXTERNAL_HITS} rose by {hits:g} (the request had {prompt} prompt tokens): decode loaded them"
            if hits > 0
            else f"{EXTERNAL_HITS} did not rise in {decode_role}: decode computed the prompt itself",
        )
    ]
    if connector == "NixlConnector":
        transfers, failed = delta(NIXL_TRANSFERS), delta(NIXL_FAILED)
        checks.append(
            Check(
                "NIXL transfers without failure",
                transfers > 0 and failed == 0,
                f"{NIXL_TRANSFERS} +{transfers:g}, {NIXL_FAILED} +{failed:g}",
            )
        )
    return checks


def canary_checks(snapshot: Snapshot) -> list[Check]:
    """One check per prefill/decode pair the canary probed (none when it did not run)."""
    if snapshot.canary is None:
        return []
    if not snapshot.canary:
        return [Check("KV canary", False, "no prefill/decode pair of entry pods to probe")]
    line = chartfiles.program("kv_canary").PairResult
    return [
        Check(f"KV canary {r['prefill']} -> {r['decode']}", r["ok"], line(**r).line().split(": ", 2)[2])
        for r in snapshot.canary
    ]


def assess(snapshot: Snapshot) -> Report:
    """Every check of the guide, decided on a Snapshot."""
    report = _assess_request(snapshot)
    report.checks += canary_checks(snapshot)
    report.warnings = list(snapshot.advisories)
    return report


def host_network_warning(modelserving: dict[str, Any]) -> list[str]:
    """Where the engines run on the node's network: no NetworkPolicy binds them (docs/security.md,
    "Host network"), whatever the namespace holds."""
    roles = modelserving.get("spec", {}).get("template", {}).get("roles", [])
    on = [r["name"] for r in roles if (r.get("entryTemplate") or {}).get("spec", {}).get("hostNetwork")]
    if not on:
        return []
    return [
        f"host network: the {' and '.join(on)} pods run on the node's network (engine.hostNetwork), where no "
        "NetworkPolicy applies: whoever reaches a node reaches their API, metrics and KV-transfer ports; restrict "
        'them on the hosts (docs/security.md, "Host network")'
    ]


def advisory_warnings(modelserving: dict[str, Any], policies: list[dict[str, Any]]) -> list[str]:
    """The known advisories the live release leaves reachable, judged on its ModelServing and the
    namespace's NetworkPolicies as on a render (mooncake_pd.advisories.problems_from_objects)."""
    from mooncake_pd import advisories
    from mooncake_pd.errors import MooncakePdError

    try:
        return advisories.problems_from_objects([modelserving, *policies])
    except (MooncakePdError, KeyError, IndexError) as e:  # a ModelServing the chart did not write
        return [f"advisories: not judged ({e.__class__.__name__}: {e})"]


def _assess_request(snapshot: Snapshot) -> Report:
    checks = readiness_checks(snapshot)
    response = snapshot.response
    request_id = (response.body.get("id") if response else None) or ""
    if response is None:
        checks.append(Check("test request", False, snapshot.error or "no response"))
    else:
        content = _completion(response.body)
        checks.append(
            Check(
                "test request",
                response.status == 200 and bool(content.strip()),
                f"HTTP {response.status}, request {request_id or '?'}, {len(content)} characters",
            )
        )
    roles = {_labels(p).get(f"{LABEL}/role") for p in snapshot.pods}
    by_role: dict[str | None, Markers] = {}  # None: pods without a role label
    for role in roles:
        lines = [
            line
            for p in snapshot.pods
            if _labels(p).get(f"{LABEL}/role") == role
            for line in snapshot.logs.get(p["metadata"]["name"], [])
        ]
        by_role[role] = parse_markers(lines)
    # The chart renders the prefill role first and the decode role last.
    role_names = [r["name"] for r in snapshot.modelserving["spec"]["template"]["roles"]]
    prefill, decode = (by_role.get(role_names[0], Markers()), by_role.get(role_names[-1], Markers()))
    connector = connector_of(snapshot.modelserving)
    if connector != LOG_CONNECTOR:
        checks += metric_checks(snapshot, connector, role_names[-1])
        checks.append(_generation_check(decode, role_names[-1]))
        return Report(checks, {})
    freed = [b for r, b in prefill.delaying_free.items() if request_id and same_request(r, request_id)]
    checks.append(
        Check(
            "prefill kept the KV cache for decode",
            bool(freed),
            f"'Delaying free of {sum(freed)} blocks for request {request_id}'"
            if freed
            else f"no 'Delaying free of N blocks for request {request_id or '<id>'}' in {role_names[0]} logs",
        )
    )
    transfers = {r: ms for r, ms in decode.transfers.items() if request_id and same_request(r, request_id)}
    took = [ms for values in transfers.values() for ms in values]
    checks.append(
        Check(
            "decode received the KV cache",
            bool(took),
            f"'KV cache transfer for request {request_id} took' {', '.join(f'{ms:g}' for ms in took)} ms"
            if took
            else f"no 'KV cache transfer for request {request_id or '<id>'} took X ms' in {role_names[-1]} logs",
        )
    )
    checks.append(_generation_check(decode, role_names[-1]))
    return Report(checks, {r: ms for r, ms in transfers.items()})


def _generation_check(decode: Markers, role: str) -> Check:
    positive = [r for r in decode.generation_rates if r > 0]
    return Check(
        "decode generated tokens",
        bool(positive),
        f"Avg generation throughput up to {max(positive):g} tokens/s"
        if positive
        else f"no 'Avg generation throughput' above 0 in {role} logs",
    )


# ---- Kubernetes I/O -------------------------------------------------------------------
# The API clients are typed Any: the client's models declare every field Optional, and this code
# reads objects the API server filled in (the tests pass stand-ins).
