"""`mooncake-pd verify`: marker parsing on the guide's log lines and variants, the decision on
recorded Kubernetes objects, and the exit codes without a cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from conftest import Rendered
from mooncake_pd import chartfiles, paths, release_io, verify
from test_kv_canary import FakeEngines

REQUEST = "chatcmpl-53cf0580-0e68-4623-80aa-1cf0fd923034"
# The guide's own log lines (seed: "View the log output").
GUIDE_PREFILL = [
    "(EngineCore_DP0 pid=142) INFO 04-17 11:38:17 [mooncake_connector.py:1062] Delaying free of 1 blocks for request "
    f"{REQUEST}",
    '(APIServer pid=7) INFO:     192.168.0.25:52240 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid=7) INFO 04-17 11:38:24 [loggers.py:248] Engine 000: Avg prompt throughput: 1.1 tokens/s, Avg "
    "generation throughput: 0.1 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache "
    "hit rate: 0.0%, External prefix cache hit rate: 0.0%",
]
GUIDE_DECODE = [
    '(APIServer pid=8) INFO:     192.168.1.191:46710 - "GET /metrics HTTP/1.1" 200 OK',
    "I0417 11:38:17.681255  1302 ascend_direct_transport.cpp:605] Transfer to:192.168.0.25:20294, cost: 5289 us",
    f"(Worker_DP0_TP0 pid=304) INFO 04-17 11:38:17 [mooncake_connector.py:561] KV cache transfer for request {REQUEST} "
    "took 5.85 ms (1 groups, 1 blocks). local_ip 192.168.0.25 local_device_id 0 remote_session_id 192.168.0.25:15910",
    "I0417 11:38:17.700887  1272 ascend_direct_transport.cpp:605] Transfer to:192.168.0.25:21685, cost: 26734 us",
    f"(Worker_DP0_TP1 pid=307) INFO 04-17 11:38:17 [mooncake_connector.py:561] KV cache transfer for request {REQUEST} "
    "took 27.27 ms (1 groups, 1 blocks). local_ip 192.168.0.25 local_device_id 1 remote_session_id 192.168.0.25:16045",
    '(APIServer pid=8) INFO:     192.168.0.25:47876 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid=8) INFO 04-17 11:38:25 [loggers.py:248] Engine 000: Avg prompt throughput: 1.1 tokens/s, Avg "
    "generation throughput: 10.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache "
    "hit rate: 0.0%, External prefix cache hit rate: 100.0%",
]


def test_guide_lines_parse():
    prefill, decode = verify.parse_markers(GUIDE_PREFILL), verify.parse_markers(GUIDE_DECODE)
    assert prefill.delaying_free == {REQUEST: 1}
    assert decode.transfers == {REQUEST: [5.85, 27.27]}
    assert decode.generation_rates == [10.0]
    assert prefill.generation_rates == [0.1]


def test_several_workers_and_requests():
    lines = []
    for dp in range(4):
        for tp in range(2):
            for n, request in enumerate(["chatcmpl-a", "cmpl-b-0", "chatcmpl-c"]):
                lines.append(
                    f"(Worker_DP{dp}_TP{tp} pid={100 + dp}) INFO 11-29 10:00:0{n} [mooncake_connector.py:561] "
                    f"KV cache transfer for request {request} took {dp * 10 + tp + n}.5 ms (2 groups, 7 blocks)."
                )
        lines.append(
            f"(EngineCore_DP{dp} pid=9) INFO [mooncake_connector.py:1062] Delaying free of 3 blocks for "
            f"request chatcmpl-a"
        )
    markers = verify.parse_markers(lines)
    assert set(markers.transfers) == {"chatcmpl-a", "cmpl-b-0", "chatcmpl-c"}
    assert len(markers.transfers["chatcmpl-a"]) == 8
    assert markers.transfers["cmpl-b-0"][:2] == [1.5, 2.5]
    assert markers.delaying_free == {"chatcmpl-a": 12}


@pytest.mark.parametrize(
    ("logged", "matches"),
    [(REQUEST, True), (REQUEST + "-0a1b2c", True), ("chatcmpl-53cf", False), ("chatcmpl-other", False)],
)
def test_request_ids_match_with_vllm_suffixes(logged: str, matches: bool):
    assert verify.same_request(logged, REQUEST) is matches


def pod(name: str, group: str, role: str, replica: int, ready: bool = True) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {
                f"{verify.LABEL}/name": "deepseek-pd",
                f"{verify.LABEL}/group-name": group,
                f"{verify.LABEL}/role": role,
                f"{verify.LABEL}/role-id": f"{role}-{replica}",
                f"{verify.LABEL}/entry": "true",
            },
        },
        "spec": {"containers": [{"name": role}]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


PODS = [
    pod("deepseek-pd-0-prefill-0-0", "deepseek-pd-0", "prefill", 0),
    pod("deepseek-pd-0-decode-0-0", "deepseek-pd-0", "decode", 0),
]
ANSWER = verify.Response(200, {"id": REQUEST, "choices": [{"message": {"content": "Okay, so I just received ..."}}]})
LOGS = {"deepseek-pd-0-prefill-0-0": GUIDE_PREFILL, "deepseek-pd-0-decode-0-0": GUIDE_DECODE}


@pytest.fixture(scope="module")
def modelserving(request) -> dict:

    from mooncake_pd import helm, manifests

    text = helm.template(paths.helm_binary())
    return manifests.one(manifests.parse(text), "ModelServing")


def test_all_checks_pass_on_the_guides_run(modelserving):
    report = verify.assess(verify.Snapshot(modelserving, PODS, ANSWER, LOGS))
    assert report.ok, report.to_json()
    assert report.transfers_ms == {REQUEST: [5.85, 27.27]}
    assert [c.name for c in report.checks] == [
        "prefill pods of deepseek-pd-0",
        "decode pods of deepseek-pd-0",
        "test request",
        "prefill kept the KV cache for decode",
        "decode received the KV cache",
        "decode generated tokens",
    ]
    assert '"ok": true' in report.to_json()


def without(lines: list[str], text: str) -> list[str]:
    return [line for line in lines if text not in line]


@pytest.mark.parametrize(
    ("pods", "answer", "logs", "failed", "message"),
    [
        (
            PODS,
            ANSWER,
            {**LOGS, "deepseek-pd-0-prefill-0-0": without(GUIDE_PREFILL, "Delaying free")},
            "prefill kept the KV cache for decode",
            "no 'Delaying free of N blocks for request " + REQUEST,
        ),
        (
            PODS,
            ANSWER,
            {**LOGS, "deepseek-pd-0-decode-0-0": without(GUIDE_DECODE, "KV cache transfer")},
            "decode received the KV cache",
            "no 'KV cache transfer for request " + REQUEST + " took X ms'",
        ),
        (
            PODS,
            ANSWER,
            {
                **LOGS,
                "deepseek-pd-0-decode-0-0": [
                    line.replace("generation throughput: 10.0", "generation throughput: 0.0") for line in GUIDE_DECODE
                ],
            },
            "decode generated tokens",
            "no 'Avg generation throughput' above 0",
        ),
        (
            [PODS[0], pod("deepseek-pd-0-decode-0-0", "deepseek-pd-0", "decode", 0, ready=False)],
            ANSWER,
            LOGS,
            "decode pods of deepseek-pd-0",
            "0/1 ready; not ready: deepseek-pd-0-decode-0-0",
        ),
        (PODS[:1], ANSWER, LOGS, "decode pods of deepseek-pd-0", "1 missing"),
        (PODS, verify.Response(500, {"error": "boom"}), LOGS, "test request", "HTTP 500"),
        (
            PODS,
            verify.Response(200, {"id": "chatcmpl-other", "choices": [{"message": {"content": "hi"}}]}),
            LOGS,
            "decode received the KV cache",
            "no 'KV cache transfer for request chatcmpl-other",
        ),
    ],
    ids=[
        "no-delaying-free",
        "no-kv-transfer",
        "zero-throughput",
        "pod-not-ready",
        "pod-missing",
        "http-500",
        "markers-of-another-request",
    ],
)
def test_a_missing_marker_fails_naming_it(modelserving, pods, answer, logs, failed, message):
    report = verify.assess(verify.Snapshot(modelserving, pods, answer, logs))
    assert not report.ok
    failing = {c.name: c.detail for c in report.checks if not c.ok}
    assert failed in failing, failing
    assert message in failing[failed]


def test_no_response_is_a_failed_check(modelserving):
    report = verify.assess(verify.Snapshot(modelserving, PODS, None, LOGS, error="ConnectionRefusedError: refused"))
    failing = {c.name: c.detail for c in report.checks if not c.ok}
    assert failing["test request"] == "ConnectionRefusedError: refused"


class FakeCustom:
    def __init__(self, result):
        self.result = result

    def list_namespaced_custom_object(self, *args, **kwargs):
        if isinstance(self.result, Exception):
            raise self.result
        return {"items": self.result}


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (ApiException(status=404, reason="Not Found"), "no Kthena CRD"),
        ([], "no release: no ModelServing of release"),
        (ConnectionRefusedError("refused"), "no cluster: ConnectionRefusedError"),
    ],
    ids=["no-crd", "no-release", "no-cluster"],
)
def test_nothing_to_verify_raises(result, message):
    with pytest.raises(verify.VerifyError, match=message):
        release_io.find_modelserving(FakeCustom(result), "deepseek-pd", "default")


def test_served_name_comes_from_the_chart_annotation(modelserving):
    assert release_io.served_name(modelserving) == "ds_r1"


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_cli_exits_2_without_a_cluster(tmp_path: Path, json_flag):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "missing")
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "mooncake_pd", "verify", "--release", "deepseek-pd", *json_flag],
        capture_output=True,
        text=True,
        env=env,
        cwd=paths.REPO,
    )
    assert proc.returncode == 2
    assert "no cluster" in proc.stderr
    if json_flag:
        assert '"ok": false' in proc.stdout


def kubeconfig() -> Path | None:
    path = Path(os.environ.get("KUBECONFIG", Path.home() / ".kube" / "config"))
    return path if path.is_file() else None


@pytest.mark.live
@pytest.mark.skipif(
    kubeconfig() is None or not os.environ.get("MOONCAKE_PD_RELEASE"),
    reason="live cluster test: set KUBECONFIG and MOONCAKE_PD_RELEASE (and MOONCAKE_PD_NAMESPACE)",
)
def test_live_release_verifies():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mooncake_pd",
            "verify",
            "--release",
            os.environ["MOONCAKE_PD_RELEASE"],
            "--namespace",
            os.environ.get("MOONCAKE_PD_NAMESPACE", "default"),
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=paths.REPO,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendered_labels_are_what_verify_selects(defaults: Rendered):
    """verify finds the ModelServing by the release label and pods by Kthena's name label."""
    ms = defaults.modelserving
    assert ms["metadata"]["labels"]["app.kubernetes.io/instance"] == "deepseek-pd"
    assert verify.expected_pods(ms) == {("deepseek-pd-0", "prefill"): 1, ("deepseek-pd-0", "decode"): 1}


class FakePod:
    def __init__(self, data: dict):
        self.data = data

    def to_dict(self) -> dict:
        return self.data


class FakeCore:
    """The two CoreV1Api calls collect() makes, answered from recorded objects and logs."""

    def __init__(self, pods: list[dict], logs: dict[str, list[str]]):
        self.pods, self.logs, self.log_calls = pods, logs, []

    def list_namespaced_pod(self, namespace, label_selector):
        assert label_selector == f"{verify.LABEL}/name=deepseek-pd"
        return type("PodList", (), {"items": [FakePod(p) for p in self.pods]})()

    def read_namespaced_pod_log(self, name, namespace, container, since_seconds):
        self.log_calls.append((name, container, since_seconds))
        return "\n".join(self.logs[name])


def test_collect_with_url_end_to_end(modelserving):
    """collect() against recorded API answers and a local stand-in router (--url)."""
    import json as jsonlib
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen = []

    class Router(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append((self.path, jsonlib.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            body = jsonlib.dumps(ANSWER.body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Router)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api_pods = [
        {**p, "spec": {"containers": [{"name": p["spec"]["containers"][0]["name"], "image": "x"}]}} for p in PODS
    ]
    core = FakeCore(api_pods, LOGS)
    progress: list[str] = []
    engines = FakeEngines()
    try:
        snapshot = release_io.collect(
            core,
            FakeCustom([modelserving]),
            "deepseek-pd",
            "default",
            url=f"http://127.0.0.1:{server.server_port}",
            model=None,
            log_wait=0,
            timeout=10,
            progress=progress.append,
            canary_io=(engines.post, engines.get),
            list_policies=lambda namespace: [],
        )
    finally:
        server.shutdown()
    assert seen == [
        (
            "/v1/chat/completions",
            {"model": "ds_r1", "max_tokens": 100, "messages": [{"role": "user", "content": "Hello, how are you?"}]},
        )
    ]
    report = verify.assess(snapshot)
    assert report.ok, report.to_json()
    assert {c[1] for c in core.log_calls} == {"prefill", "decode"}
    # The canary's pair: prefill's entry pod, then decode's, each at its serving port.
    assert [url for url, _ in engines.posts] == [
        "http://deepseek-pd-0-prefill-0-0:7100/v1/completions",
        "http://deepseek-pd-0-decode-0-0:7101/v1/completions",
        "http://deepseek-pd-0-prefill-0-0:7100/v1/completions",
    ]
    canary = [c for c in report.checks if c.name.startswith("KV canary")]
    assert [c.name for c in canary] == ["KV canary deepseek-pd-0-prefill-0-0 -> deepseek-pd-0-decode-0-0"]
    assert canary[0].detail == "vllm:external_prefix_cache_hits_total +10 for 10 prompt tokens"
    assert any("HTTP 200 for request " + REQUEST in line for line in progress)
    # The guide's layout (v0.13.0's Mooncake on the host network, no NetworkPolicy): a warning of
    # the known advisory, not a failed check.
    assert [w.split(" applies")[0].split(":")[0] for w in report.warnings] == ["host network", "engine.version"]
    assert (
        "CVE-2026-103764" in report.warnings[1]
        and "prefill and decode pods run on the node's network" in (report.warnings[0])
    )


def test_the_advisories_judge_the_live_releases_network_policies(modelserving):
    """verify reads the namespace's NetworkPolicies: one that selects the engines closes the
    'every pod reaches them' reason, never the host network's."""
    policy = {
        "kind": "NetworkPolicy",
        "spec": {"podSelector": {"matchExpressions": [{"key": "app.kubernetes.io/component", "values": ["prefill"]}]}},
    }
    bare, fenced = verify.advisory_warnings(modelserving, []), verify.advisory_warnings(modelserving, [policy])
    assert "networkPolicy.enabled is false" in bare[0] and "networkPolicy.enabled is false" not in fenced[0]
    assert "engine.hostNetwork" in fenced[0]


def test_the_canary_fails_verify_when_the_kv_cache_does_not_move(modelserving):
    engines = FakeEngines(loaded=0)
    config = release_io.canary_config(modelserving, PODS, "ds_r1")
    results = chartfiles.program("kv_canary").run(config, engines.post, engines.get)
    snapshot = verify.Snapshot(modelserving, PODS, ANSWER, LOGS, canary=[dataclasses.asdict(r) for r in results])
    report = verify.assess(snapshot)
    assert not report.ok
    (failed,) = [c for c in report.checks if not c.ok]
    assert failed.name.startswith("KV canary") and "it computed the prompt itself" in failed.detail
    # No pair to probe is a failure too, not a pass.
    empty = verify.assess(verify.Snapshot(modelserving, PODS, ANSWER, LOGS, canary=[]))
    assert [c.detail for c in empty.checks if not c.ok] == ["no prefill/decode pair of entry pods to probe"]


def test_a_core_client_without_a_connection_reads_no_policies():
    """collect()'s default reader of NetworkPolicies on a CoreV1Api stand-in (the e2e's LocalCore
    has no api_client): none read, so the advisories judge the release as unprotected."""
    assert release_io.network_policies(object(), "default") == []


def test_verify_says_when_the_engines_are_on_the_host_network(modelserving):
    """The guide's layout is on the host network: verify says no NetworkPolicy applies there; off
    it (the cpu profile's layout), nothing is said."""
    assert "no NetworkPolicy applies" in verify.host_network_warning(modelserving)[0]
    off = json.loads(json.dumps(modelserving))
    for role in off["spec"]["template"]["roles"]:
        role["entryTemplate"]["spec"]["hostNetwork"] = False
    assert verify.host_network_warning(off) == []
