"""The proxy reaches every prefill and decode instance through per-replica Services that
select exactly the entry pods Kthena creates; the helm test sends the guide's request."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from conftest import Rendered, Renderer, assert_valid
from mooncake_pd import paths
from mooncake_pd.engines import PodIdentity
from support.kthena_pods import selects
from support.proxyargs import parse_proxy_args


def proxy_endpoints(rendered: Rendered) -> dict[str, list[tuple[str, int]]]:
    args = rendered.one("Deployment", "deepseek-pd-proxy")["spec"]["template"]["spec"]["containers"][0]["args"]
    proxy = parse_proxy_args(args)
    return {"prefill": proxy.prefillers, "decode": proxy.decoders}


# One serving group: with the proxy the chart refuses more (validate/_router.tpl).
SCALE = {"prefill": {"replicas": 3}, "decode": {"replicas": 2}}


@pytest.mark.parametrize("overrides", [None, SCALE], ids=["1P1D", "3P2D"])
def test_proxy_reaches_every_entry_pod_once(render: Renderer, overrides):
    rendered = render(overrides=overrides)
    spec = rendered.modelserving["spec"]
    services = {s["metadata"]["name"]: s for s in rendered.find("Service")}
    endpoints = proxy_endpoints(rendered)
    for role in spec["template"]["roles"]:
        pods = [
            PodIdentity("deepseek-pd", g, role["name"], r)
            for g in range(spec["replicas"])
            for r in range(role["replicas"])
        ]
        port = role["entryTemplate"]["spec"]["containers"][0]["ports"][0]["containerPort"]
        listed = endpoints[role["name"]]
        assert len(listed) == len(pods)
        covered = []
        for host, listed_port in listed:
            name, namespace, suffix = host.split(".")
            assert (namespace, suffix) == ("default", "svc")
            service = services[name]
            assert listed_port == port and str(port) == str(service["spec"]["ports"][0]["targetPort"])
            matched = [p for p in pods if selects(service, p, rendered.modelserving)]
            assert len(matched) == 1, f"{name} selects {matched}"
            covered.append(matched[0])
        assert sorted(covered, key=lambda p: (p.group, p.replica)) == pods
        # Workers (index > 0) are never selected: requests go to the entry pod.
        worker = PodIdentity("deepseek-pd", 0, role["name"], 0, 1)
        assert not any(selects(services[h.split(".")[0]], worker, rendered.modelserving) for h, _ in listed)


def test_scaled_values_validate(render: Renderer, crds):
    assert_valid(render(overrides=SCALE), crds)


def test_proxy_deployment(defaults: Rendered):
    deployment = defaults.one("Deployment", "deepseek-pd-proxy")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "quay.io/ascend/vllm-ascend:v0.13.0-a3"
    # The image's script behind the chart's guard (chart/files/proxy_guard.py).
    assert container["command"] == [
        "python3",
        "/workspace/proxy_guard.py",
        "/vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py",
    ]
    guard = {"name": "scripts", "mountPath": "/workspace/proxy_guard.py", "subPath": "proxy_guard.py", "readOnly": True}
    assert guard in container["volumeMounts"]
    assert defaults.one("ConfigMap")["data"]["proxy_guard.py"] == (paths.CHART / "files" / "proxy_guard.py").read_text()
    assert container["args"][:4] == ["--host", "0.0.0.0", "--port", "8080"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthcheck"
    selector = deployment["spec"]["selector"]["matchLabels"]
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    assert selector["app.kubernetes.io/component"] == "proxy"
    service = defaults.one("Service", "deepseek-pd-proxy")
    assert service["spec"]["selector"] == selector
    assert service["spec"]["ports"][0]["port"] == 8080


@pytest.mark.parametrize("who", ["proxy", "test"])
def test_proxy_and_test_pods_are_locked_down(defaults: Rendered, who: str):
    if who == "proxy":
        pod = defaults.one("Deployment", "deepseek-pd-proxy")["spec"]["template"]["spec"]
    else:
        pod = defaults.one("Pod", "deepseek-pd-test")["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert set(container["resources"]) == {"requests", "limits"}


def test_helm_test_sends_the_guides_request(defaults: Rendered):
    pod = defaults.one("Pod", "deepseek-pd-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["CHAT_URL"] == "http://deepseek-pd-proxy.default.svc:8080/v1/chat/completions"
    assert json.loads(env["CHAT_REQUEST"]) == {
        "model": "ds_r1",
        "messages": [{"role": "user", "content": "Hello, how are you?"}],
        "max_tokens": 100,
    }


def test_router_none_renders_no_proxy_and_no_test(render: Renderer):
    rendered = render(overrides={"router": {"type": "none"}})
    assert rendered.find("Deployment") == []
    assert rendered.find("Pod") == []
    assert {s["metadata"]["name"] for s in rendered.find("Service")} == {
        "deepseek-pd-0-prefill-0",
        "deepseek-pd-0-decode-0",
    }


class _Backend(BaseHTTPRequestHandler):
    """A stand-in for the router: answers with the status and body the test sets."""

    status = 200
    body: ClassVar[dict] = {}
    received: ClassVar[list] = []

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        type(self).received.append((self.path, json.loads(self.rfile.read(length))))
        payload = json.dumps(type(self).body).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    ("status", "content", "passes"),
    [(200, "I am fine, thank you.", True), (200, "", False), (500, "boom", False)],
    ids=["completion", "empty-completion", "http-500"],
)
def test_helm_test_script_judges_the_answer(
    defaults: Rendered, tmp_path: Path, status: int, content: str, passes: bool
):
    """Runs the test pod's own program (chart/files/chat_check.py, as the scripts ConfigMap
    mounts it) against a local stand-in router."""
    container = defaults.one("Pod", "deepseek-pd-test")["spec"]["containers"][0]
    assert container["command"] == ["python3", "/workspace/chat_check.py"]
    assert {
        "name": "scripts",
        "mountPath": "/workspace/chat_check.py",
        "subPath": "chat_check.py",
        "readOnly": True,
    } in (container["volumeMounts"])
    program = tmp_path / "chat_check.py"
    program.write_text(defaults.one("ConfigMap", "deepseek-pd-scripts")["data"]["chat_check.py"])
    env = {e["name"]: e["value"] for e in container["env"]}
    _Backend.status = status
    _Backend.body = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    _Backend.received = []
    server = HTTPServer(("127.0.0.1", 0), _Backend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env["CHAT_URL"] = f"http://127.0.0.1:{server.server_port}/v1/chat/completions"
        proc = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
    assert (proc.returncode == 0) is passes, proc.stdout + proc.stderr
    assert _Backend.received == [("/v1/chat/completions", json.loads(env["CHAT_REQUEST"]))]


def test_a_zero_proxy_setting_reaches_the_proxy_and_null_leaves_the_scripts_default(render: Renderer):
    """0 is a value: the retry delay 0 (no back-off) reaches --retry-delay; null writes no flag."""
    args = render(overrides={"proxy": {"retryDelay": 0, "maxRetries": 1}}).one("Deployment")["spec"]["template"]
    argv = args["spec"]["containers"][0]["args"]
    assert argv[argv.index("--retry-delay") + 1] == "0" and argv[argv.index("--max-retries") + 1] == "1"
    default = render().one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--retry-delay" not in default and "--max-retries" not in default
