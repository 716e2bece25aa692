"""The process kubelet's pure parts (tests/support/kube/kubelet.py): env resolution as kubelet
does it, and the probes' state. Its run against Kthena's real controller is tests/test_e2e_kthena.py."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from support.kube.kubelet import PodError, Probe, container_env, expand, field_value, node_addresses

ROLE_ID = "metadata.labels['modelserving.volcano.sh/role-id']"
POD: dict[str, Any] = {
    "metadata": {
        "name": "deepseek-pd-0-prefill-0-0",
        "namespace": "serving",
        "uid": "u-1",
        "labels": {"modelserving.volcano.sh/role-id": "prefill-0"},
        "annotations": {"note": "a b"},
    },
    "spec": {"nodeName": "process-0"},
    "status": {"podIP": "127.0.10.1", "hostIP": "127.0.10.1", "podIPs": [{"ip": "127.0.10.1"}]},
}


class FakeApi:
    """What container_env asks the API server: a ConfigMap and a Secret."""

    def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> dict[str, Any]:
        assert namespace == "serving"
        if kind == "ConfigMap" and name == "settings":
            return {"data": {"LEVEL": "debug", "PATH_PART": "/x"}}
        if kind == "Secret" and name == "token":
            return {"data": {"HF_TOKEN": "c2VjcmV0"}}  # "secret"
        raise AssertionError(f"unexpected {kind}/{name}")


def test_expand_follows_kubernetes_rules():
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)", env) == "1-two"
    assert expand("$$(A)", env) == "$(A)"  # $$ escapes
    assert expand("$(MISSING) $A", env) == "$(MISSING) $A"  # unknown and shell forms stay


def test_field_refs_read_the_pod_object():
    assert field_value(POD, "metadata.name") == "deepseek-pd-0-prefill-0-0"
    assert field_value(POD, "metadata.labels['modelserving.volcano.sh/role-id']") == "prefill-0"
    assert field_value(POD, "metadata.annotations['note']") == "a b"
    assert field_value(POD, "status.podIP") == "127.0.10.1"
    assert field_value(POD, "status.podIPs") == "127.0.10.1"
    assert field_value(POD, "spec.nodeName") == "process-0"
    with pytest.raises(PodError, match=r"spec\.hostname"):
        field_value(POD, "spec.hostname")


def test_container_env_in_kubelet_order():
    container = {
        "name": "prefill",
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CM_"}],
        "env": [
            {
                "name": "ROLE_ID",
                "valueFrom": {"fieldRef": {"fieldPath": ROLE_ID}},
            },
            {"name": "ID", "value": "$(ROLE_ID)-$(CM_LEVEL)"},
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "token", "key": "HF_TOKEN"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "NONE", "optional": True}}},
        ],
    }
    env = container_env(FakeApi(), POD, container)  # type: ignore[arg-type]
    assert env == {"CM_LEVEL": "debug", "CM_PATH_PART": "/x", "ROLE_ID": "prefill-0", "ID": "prefill-0-debug",
                   "HF_TOKEN": "secret"}  # fmt: skip
    container["env"].append({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "NONE"}}})
    with pytest.raises(PodError, match="has no key NONE"):
        container_env(FakeApi(), POD, container)  # type: ignore[arg-type]


def test_node_addresses_do_not_overlap():
    first, second = node_addresses(0), node_addresses(1)
    assert not set(first) & set(second)
    assert all(a.startswith("127.") for a in first + second)


@pytest.fixture
def health() -> Iterator[tuple[str, list[int]]]:
    """A local /health whose answers the test sets (a list of status codes, the last repeated)."""
    codes = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = codes.pop(0) if len(codes) > 1 else codes[0]
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/health", codes
    finally:
        server.shutdown()
        server.server_close()


def test_probe_waits_its_delay_then_turns_ready_and_fails_after_its_threshold(health):
    url, codes = health
    container = {"name": "decode", "ports": [{"name": "server", "containerPort": int(url.split(":")[2].split("/")[0])}]}
    spec = {"httpGet": {"path": "/health", "port": "server"}, "initialDelaySeconds": 5, "periodSeconds": 2,
            "failureThreshold": 2, "timeoutSeconds": 2}  # fmt: skip
    probe = Probe.of(spec, container, "127.0.0.1")
    assert probe is not None and probe.url == url
    probe.start(100.0)
    assert not probe.due(104.9) and probe.due(105.0)
    assert probe.check(105.0) and probe.ok  # turned ready
    assert probe.next_at == 107.0
    codes[:] = [503]
    assert not probe.check(107.0) and probe.ok  # one failure is below the threshold
    assert probe.check(109.0) and not probe.ok  # the second turns it unready
    with pytest.raises(PodError, match="httpGet"):
        Probe.of({"exec": {"command": ["true"]}}, container, "127.0.0.1")
