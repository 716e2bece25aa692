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

import http.client
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mooncake_pd import chartfiles, kubeconfig, profiles
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


def network_policies(core: Any, namespace: str) -> list[dict[str, Any]]:
    """The namespace's NetworkPolicies as manifests ([] where the caller may not list them: the
    advisories then judge the release as unprotected, which the warning says)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api_client = getattr(core, "api_client", None)
    if api_client is None:  # a CoreV1Api stand-in without a connection (the e2e's LocalCore)
        return []
    networking = client.NetworkingV1Api(api_client)
    try:
        items = networking.list_namespaced_network_policy(namespace).items
    except ApiException:
        return []
    return [{"kind": "NetworkPolicy", **api_client.sanitize_for_serialization(p)} for p in items]


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


def load_clients(context: str | None = None) -> tuple[Any, Any]:
    """CoreV1Api and CustomObjectsApi from the kubeconfig (or in-cluster); VerifyError without one."""
    from kubernetes import client

    kubeconfig.load(context, VerifyError)
    return client.CoreV1Api(), client.CustomObjectsApi()


def find_modelserving(custom: Any, release: str, namespace: str) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException

    try:
        items = custom.list_namespaced_custom_object(
            KTHENA_GROUP,
            KTHENA_VERSION,
            namespace,
            MODELSERVINGS,
            label_selector=f"app.kubernetes.io/instance={release}",
        )["items"]
    except ApiException as e:
        if e.status == 404:
            raise VerifyError("no Kthena CRD: modelservings.workload.serving.volcano.sh is not installed") from None
        raise VerifyError(f"cannot list ModelServings in {namespace}: {e.reason}") from None
    except Exception as e:  # connection refused, DNS, TLS: the cluster is not reachable
        raise VerifyError(f"no cluster: {e.__class__.__name__}: {e}") from None
    if not items:
        raise VerifyError(f"no release: no ModelServing of release {release!r} in namespace {namespace!r}")
    return items[0]


def _forwarded_request(
    core: Any, namespace: str, pod: str, port: int, path: str, body: bytes, timeout: float, headers: dict[str, str]
) -> Response:
    from kubernetes.stream import portforward

    forward = portforward(core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
    connection = http.client.HTTPConnection("localhost", port, timeout=timeout)
    connection.sock = forward.socket(port)
    connection.sock.settimeout(timeout)
    return _post(connection, path, body, headers)


def _forwarded_get(core: Any, namespace: str, pod: str, port: int, path: str, timeout: float) -> str:
    from kubernetes.stream import portforward

    forward = portforward(core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
    connection = http.client.HTTPConnection("localhost", port, timeout=timeout)
    connection.sock = forward.socket(port)
    connection.sock.settimeout(timeout)
    connection.request("GET", path)
    return connection.getresponse().read().decode(errors="replace")


def decode_entry_pods(modelserving: dict[str, Any], pods: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(pod name, serving port) of every decode entry pod: where decode's /metrics are."""
    return entry_pods(modelserving, pods, -1)


def entry_pods(modelserving: dict[str, Any], pods: list[dict[str, Any]], role_index: int) -> list[tuple[str, int]]:
    """(pod name, serving port) of a role's entry pods (the chart renders prefill first, decode
    last), in name order."""
    role = modelserving["spec"]["template"]["roles"][role_index]
    container = role["entryTemplate"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in container.get("ports", []) if p.get("name") == "server")
    return sorted(
        (p["metadata"]["name"], port)
        for p in pods
        if _labels(p).get(f"{LABEL}/role") == role["name"] and _labels(p).get(f"{LABEL}/entry") == "true"
    )


# The canary's HTTP: post(url, body, timeout, headers) -> (status, JSON body), get(url, timeout)
# -> text, both raising kv_canary.Unreachable when nothing answers. Its URLs are http://<pod>:<port>.
CanaryIO = tuple[
    Callable[[str, dict[str, Any], float, dict[str, str]], tuple[int, dict[str, Any]]], Callable[[str, float], str]
]


def transfer_metrics(connector: str) -> dict[str, str] | None:
    """The connector's transfer counters (profiles.yaml engines.<version>.connectors)."""
    for engine in profiles.load()["engines"].values():
        if connector in engine["connectors"]:
            found: dict[str, str] | None = engine["connectors"][connector]["transferMetrics"]
            return found
    return None


def canary_config(modelserving: dict[str, Any], pods: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """kv_canary's CANARY_CONFIG for every prefill x decode pair of entry pods found."""

    def instances(role_index: int) -> list[dict[str, str]]:
        return [
            {"name": name, "url": f"http://{name}:{port}"} for name, port in entry_pods(modelserving, pods, role_index)
        ]

    return {
        "model": model,
        "prompt": "Hello, how are you?",
        "maxTokens": 8,
        "prefill": instances(0),
        "decode": instances(-1),
        "transferMetrics": transfer_metrics(connector_of(modelserving)),
    }


def port_forward_io(core: Any, namespace: str) -> CanaryIO:
    """The canary's HTTP through port-forwards to the pods its URLs name."""
    from urllib.parse import urlsplit

    unreachable = chartfiles.program("kv_canary").Unreachable

    def target(url: str) -> tuple[str, int, str]:
        parts = urlsplit(url)
        return parts.hostname or "", parts.port or 80, parts.path

    def post(url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        pod, port, path = target(url)
        try:
            answer = _forwarded_request(core, namespace, pod, port, path, json.dumps(body).encode(), timeout, headers)
        except Exception as e:  # the API server, the port-forward or the pod: nothing answered
            raise unreachable(f"{url}: {e.__class__.__name__}: {e}") from e
        return answer.status, answer.body

    def get(url: str, timeout: float) -> str:
        pod, port, path = target(url)
        try:
            return _forwarded_get(core, namespace, pod, port, path, timeout)
        except Exception as e:
            raise unreachable(f"{url}: {e.__class__.__name__}: {e}") from e

    return post, get


def _post(
    connection: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str] | None = None
) -> Response:
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    answer = connection.getresponse()
    raw = answer.read()
    try:
        payload = json.loads(raw or b"{}")
    except json.JSONDecodeError:
        payload = {"raw": raw[:500].decode(errors="replace")}
    return Response(answer.status, payload)


def auth_headers(api_key: str) -> dict[str, str]:
    """The engines' key (engine.apiKeySecret) as a bearer token; none without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def send_request(
    core: Any, modelserving: dict[str, Any], url: str | None, model: str, timeout: float, api_key: str = ""
) -> Response:
    """The guide's chat request, to --url or through a port-forward to the router's Service. The
    key goes with it: Kthena's router forwards the client's headers to the engines (the proxy
    sends its own)."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hello, how are you?"}], "max_tokens": 100}
    ).encode()
    if url:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"--url {url!r} names no host (give it as http://HOST[:PORT])")
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        return _post(connection, (parts.path.rstrip("/") or "") + "/v1/chat/completions", body, auth_headers(api_key))
    namespace = modelserving["metadata"]["namespace"]
    service = f"{modelserving['metadata']['name']}-proxy"
    endpoints = core.read_namespaced_endpoints(service, namespace)
    for subset in endpoints.subsets or []:
        for address in subset.addresses or []:
            if address.target_ref and address.target_ref.kind == "Pod":
                port = subset.ports[0].port
                return _forwarded_request(
                    core,
                    namespace,
                    address.target_ref.name,
                    port,
                    "/v1/chat/completions",
                    body,
                    timeout,
                    auth_headers(api_key),
                )
    raise RuntimeError(f"Service {service} has no ready pod to forward to (use --url for the Kthena router)")


def collect(
    core: Any,
    custom: Any,
    release: str,
    namespace: str,
    *,
    url: str | None,
    model: str | None,
    log_wait: float,
    timeout: float,
    progress: Callable[[str], None],
    read_metrics: Callable[[str, int], str] | None = None,
    canary_io: CanaryIO | None = None,
    run_canary: bool = True,
    api_key: str = "",
    list_policies: Callable[[str], list[dict[str, Any]]] | None = None,
) -> Snapshot:
    modelserving = find_modelserving(custom, release, namespace)
    name = modelserving["metadata"]["name"]
    progress(f"ModelServing {namespace}/{name}: {modelserving['spec'].get('replicas', 1)} serving group(s)")
    pods = [p.to_dict() for p in core.list_namespaced_pod(namespace, label_selector=f"{LABEL}/name={name}").items]
    pods = [_pod_view(p) for p in pods]
    progress(f"{len(pods)} pod(s); sending the test request")
    model = model or served_name(modelserving)
    read_metrics = read_metrics or (lambda pod, port: _forwarded_get(core, namespace, pod, port, "/metrics", timeout))
    metric_pods = decode_entry_pods(modelserving, pods) if connector_of(modelserving) != LOG_CONNECTOR else []
    before = {pod: read_metrics(pod, port) for pod, port in metric_pods}
    start = time.time()
    response, error = None, None
    try:
        response = send_request(core, modelserving, url, model, timeout, api_key)
        progress(f"HTTP {response.status} for request {response.body.get('id', '?')}")
    except Exception as e:  # report it as a failed check, with the reason
        error = f"{e.__class__.__name__}: {e}"
        progress(f"test request failed: {error}")
    logs: dict[str, list[str]] = {}
    deadline = time.time() + log_wait
    while True:
        since = int(time.time() - start) + 5
        for pod in pods:
            container = pod["spec"]["containers"][0]["name"]
            text = core.read_namespaced_pod_log(
                pod["metadata"]["name"], namespace, container=container, since_seconds=since
            )
            logs[pod["metadata"]["name"]] = text.splitlines()
        metrics = {pod: (before[pod], read_metrics(pod, port)) for pod, port in metric_pods}
        snapshot = Snapshot(modelserving, pods, response, logs, error, metrics)
        if assess(snapshot).ok or time.time() >= deadline or response is None:
            break
        progress("waiting for the KV transfer log lines ...")
        time.sleep(5)
    policies = (list_policies or (lambda ns: network_policies(core, ns)))(namespace)
    warnings = host_network_warning(modelserving) + advisory_warnings(modelserving, policies)
    snapshot = replace(snapshot, advisories=warnings)
    if not run_canary:
        return snapshot
    config = canary_config(modelserving, pods, model)
    progress(f"KV canary: {len(config['prefill'])} x {len(config['decode'])} prefill/decode pair(s)")
    post, get = canary_io or port_forward_io(core, namespace)
    canary = chartfiles.program("kv_canary")
    results = canary.run(config, canary.with_api_key(post, api_key), get)
    return replace(snapshot, canary=[asdict(r) for r in results])


def served_name(modelserving: dict[str, Any]) -> str:
    """The model clients request: the chart's annotation on the ModelServing."""
    annotations = modelserving["metadata"].get("annotations") or {}
    if "mooncake-pd/served-model-name" not in annotations:
        raise VerifyError("the ModelServing has no mooncake-pd/served-model-name annotation: pass --model")
    return annotations["mooncake-pd/served-model-name"]


def _pod_view(pod: dict[str, Any]) -> dict[str, Any]:
    """The client's snake_case pod dict, with the few keys assess() reads in API (camel) form."""
    return {
        "metadata": {"name": pod["metadata"]["name"], "labels": pod["metadata"].get("labels") or {}},
        "spec": {"containers": [{"name": c["name"]} for c in pod["spec"]["containers"]]},
        "status": {
            "conditions": [
                {"type": c["type"], "status": c["status"]} for c in (pod.get("status") or {}).get("conditions") or []
            ],
            "containerStatuses": [
                _container_status(c) for c in (pod.get("status") or {}).get("container_statuses") or []
            ],
        },
    }


def _container_status(status: dict[str, Any]) -> dict[str, Any]:
    """A container status's termination messages, in API (camel) form."""
    view: dict[str, Any] = {"name": status.get("name")}
    for snake, camel in (("state", "state"), ("last_state", "lastState")):
        terminated = (status.get(snake) or {}).get("terminated")
        if terminated:
            view[camel] = {
                "terminated": {"exitCode": terminated.get("exit_code"), "message": terminated.get("message")}
            }
    return view
