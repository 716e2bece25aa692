"""The chart's PD proxy serves users, not orders. vLLM-Ascend's proxy of each version
(chart/files/vendor/*/load_balance_proxy_server_example.py, unchanged), run as the chart runs it,
behind chart/files/proxy_guard.py in that version's image's Python, with stand-in engines on
loopback (tests/support/openai_standin.py):

- every instance change a client sends (/instances/add, /instances/remove), v0.23.0's
  /reset_prefix_cache and the framework's own pages (/docs, /openapi.json) are answered 404, and
  the prompts that follow reach the rendered prefill and decode only;
- a client's kv_transfer_params never reaches decode, even where prefill answers none (the
  script then sends decode the client's own, which names the host decode reads KV from).

The control runs the same script without the guard, as the chart did before: the same requests
re-route the next prompts to a host the chart never rendered and carry the client's
kv_transfer_params to decode (the attack of /work/shared/facts.md "Security of the PD path",
reproduced per version), so each judgement above can fail.

v0.13.0 runs in the gate (its image's Python is the gate's e2e venv); v0.18.0 and v0.23.0 need
their overlays, installed for `make test-all` only (marker `full`)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import chartfiles, paths
from support.kube.cluster import free_port
from support.localpods import (
    LATER_ASCEND,
    VENDORED_PROXIES,
    Processes,
    http_status,
    image_python,
    post_json,
    wait_ready,
)

TESTS = Path(__file__).resolve().parent
GUARD = paths.CHART / "files" / "proxy_guard.py"
OUT = paths.REPO / "out" / "proxy-guard"
VERSIONS = ("v0.13.0", *LATER_ASCEND)
PROMPTS = 3
# The control polls until the re-routing shows: the script adds an instance after a health check
# of it, at once (v0.13.0 ~317-333) or from a thread that looks every --waiting-retry-interval
# seconds (v0.23.0 ~429-439); 1 s here, so 30 s is thirty looks.
REROUTE_WAIT_S = 30.0
# A client's kv_transfer_params pointing decode at a host of its choosing.
CLIENT_PARAMS = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_engine_id": "intruder",
    "remote_block_ids": [0],
    "remote_host": "127.0.0.1",
    "remote_port": 1,
}


def later(version: str) -> Any:
    return pytest.param(version, marks=pytest.mark.full) if version in LATER_ASCEND else version


@dataclass
class Standins:
    ports: dict[str, int]  # prefill, decode, other (a host the chart never rendered)
    records: dict[str, Path]

    def requests(self, who: str) -> list[dict[str, Any]]:
        path = self.records[who]
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standins]:
    """Three stand-in engines; prefill answers without kv_transfer_params, so that what decode
    receives is what the proxy passed on from the client."""
    base = tmp_path_factory.mktemp("standins")
    processes = Processes(OUT / "logs")
    ports = {who: free_port() for who in ("prefill", "decode", "other")}
    records = {who: base / f"{who}.jsonl" for who in ports}
    try:
        for who, port in ports.items():
            argv = [sys.executable, str(TESTS / "support" / "openai_standin.py"), "--port", str(port)]
            argv += ["--model", "ds_r1", "--record", str(records[who])]
            argv += ["--no-kv-answer"] if who == "prefill" else []
            proc = processes.start(f"standin-{who}", argv, {"PATH": "/usr/bin:/bin"}, base)
            wait_ready(proc, f"http://127.0.0.1:{port}/health", 30)
        yield Standins(ports, records)
    finally:
        processes.close()


def proxy_argv(version: str, standins: Standins, port: int, guarded: bool) -> tuple[list[str], dict[str, str]]:
    """The proxy's command as the chart renders it (python3 proxy_guard.py SCRIPT ARGS), or the
    script alone (the control), in the version's image's Python."""
    image = image_python(f"quay.io/ascend/vllm-ascend:{version}-a3")
    missing = image.missing()
    if missing:
        pytest.fail(f"{version}: its image's Python is not installed here ({missing[0]}): run `make e2e-venv`")
    args = ["--host", "127.0.0.1", "--port", str(port)]
    args += ["--prefiller-hosts", "127.0.0.1", "--prefiller-ports", str(standins.ports["prefill"])]
    args += ["--decoder-hosts", "127.0.0.1", "--decoder-ports", str(standins.ports["decode"])]
    # The control's health check of an added instance, once a second (default 10 s).
    args += [] if guarded else ["--waiting-retry-interval", "1"]
    script = str(VENDORED_PROXIES[version])
    argv = ["python3", *([str(GUARD)] if guarded else []), script, *args]
    env = {**image.env(), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "HOME": "/tmp", "OPENAI_API_KEY": "proxy-key"}
    return argv, env


def orders(standins: Standins) -> list[tuple[str, str, dict[str, Any] | None]]:
    """What a client sends to steer the proxy: the other host in as decode, the rendered decode out."""
    other = f"127.0.0.1:{standins.ports['other']}"
    decode = f"127.0.0.1:{standins.ports['decode']}"
    return [
        ("POST", "/instances/add", {"type": "decode", "instances": [other]}),
        ("POST", "/instances/remove", {"type": "decode", "instances": [decode]}),
    ]


def chat(base: str) -> dict[str, Any]:
    body = {"model": "ds_r1", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
    return post_json(f"{base}/v1/chat/completions", {**body, "kv_transfer_params": CLIENT_PARAMS})


@pytest.fixture
def processes() -> Iterator[Processes]:
    running = Processes(OUT / "logs")
    try:
        yield running
    finally:
        running.close()


def start(processes: Processes, version: str, standins: Standins, guarded: bool) -> str:
    port = free_port()
    argv, env = proxy_argv(version, standins, port, guarded)
    proc = processes.start(f"proxy-{version}-{'guarded' if guarded else 'bare'}", argv, env, OUT)
    wait_ready(proc, f"http://127.0.0.1:{port}/healthcheck", 120)
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("version", [later(v) for v in VERSIONS])
def test_the_guarded_proxy_refuses_client_orders_and_sends_only_to_the_rendered_engines(
    standins: Standins, processes: Processes, version: str
):
    base = start(processes, version, standins, guarded=True)
    refused = [
        *orders(standins),
        ("POST", "/reset_prefix_cache", {}),
        ("GET", "/docs", None),
        ("GET", "/openapi.json", None),
        ("GET", "/instances/add", None),
        ("POST", "/healthcheck", {}),
        ("POST", "/v1/completions/", {"model": "ds_r1", "prompt": "Hi"}),
    ]
    answers = {f"{method} {path}": http_status(base + path, method, body) for method, path, body in refused}
    assert answers == {key: 404 for key in answers}
    assert http_status(base + "/healthcheck") == 200
    seen = {who: len(standins.requests(who)) for who in standins.ports}
    for _ in range(PROMPTS):
        assert chat(base)["choices"][0]["message"]["content"]
    sent = {who: standins.requests(who)[seen[who] :] for who in standins.ports}
    assert len(sent["prefill"]) == len(sent["decode"]) == PROMPTS and sent["other"] == []
    # Prefill gets the proxy's parameters, never the client's; decode gets none (prefill answered
    # none), not the client's.
    assert all(r["body"]["kv_transfer_params"]["do_remote_decode"] is True for r in sent["prefill"])
    assert [r["body"].get("kv_transfer_params") for r in sent["decode"]] == [None] * PROMPTS


@pytest.mark.parametrize("version", [later(v) for v in VERSIONS])
def test_without_the_guard_a_client_reroutes_the_proxy_and_steers_decode(
    standins: Standins, processes: Processes, version: str
):
    """The control: the script alone, as the chart ran it before the guard."""
    base = start(processes, version, standins, guarded=False)
    assert [http_status(base + path, method, body) for method, path, body in orders(standins)] == [200, 200]
    seen = len(standins.requests("other"))
    deadline = time.monotonic() + REROUTE_WAIT_S
    failures = []
    for _ in range(int(REROUTE_WAIT_S)):
        try:
            chat(base)
        except (urllib.error.URLError, OSError, AssertionError) as e:
            # Before the script's health check admits the other host, no decode is left.
            failures.append(f"{type(e).__name__}: {e}")
        if len(standins.requests("other")) > seen or time.monotonic() > deadline:
            break
        time.sleep(1)
    stolen = standins.requests("other")[seen:]
    assert stolen, f"no prompt reached the other host within {REROUTE_WAIT_S:.0f} s; {failures[-3:]}"
    assert stolen[-1]["body"]["kv_transfer_params"] == CLIENT_PARAMS


def test_the_guard_allows_only_the_serving_routes_and_drops_only_client_kv_params():
    """The guard's two rules as functions: an allowlist (a spelling it does not list is refused,
    not normalised), and a body rewritten only where a client set kv_transfer_params."""
    guard = chartfiles.program("proxy_guard")
    assert guard.served("POST", "/v1/chat/completions") and guard.served("GET", "/healthcheck")
    for method, path in [("POST", "/instances/add"), ("GET", "/v1/chat/completions"), ("POST", "//v1/completions")]:
        assert not guard.served(method, path), (method, path)
    body = json.dumps({"model": "m", "prompt": "p", "kv_transfer_params": CLIENT_PARAMS}).encode()
    assert json.loads(guard.without_client_keys(body)) == {"model": "m", "prompt": "p"}
    plain = b'{"model": "m",  "prompt": "p"}'
    assert guard.without_client_keys(plain) is plain and guard.without_client_keys(b"not json") == b"not json"
