"""What verify and bench ask of a live release: the Kubernetes clients, the ModelServing and its
entry pods, the chat request and the canary through port-forwards, and collect(), which gathers
the Snapshot verify.assess judges."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from mooncake_pd import chartfiles, kubeconfig, profiles
from mooncake_pd.engines import KTHENA as LABEL
from mooncake_pd.verify import (
    KTHENA_GROUP,
    KTHENA_VERSION,
    LOG_CONNECTOR,
    MODELSERVINGS,
    Response,
    Snapshot,
    VerifyError,
    _labels,
    advisory_warnings,
    assess,
    connector_of,
    host_network_warning,
)


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
