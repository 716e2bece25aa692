"""The bounded waits of the cluster and e2e tests (tests/support/waits.py), no cluster needed:
a wait that runs out names what it waited for and what it last saw on its first line, and
records its seconds; what a phase of the alert recording holds does not shrink on a slow
machine."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from support import kthenarun, waits
from support.kube.api import ApiError, pod_brief, pods_brief, wait_for
from support.kube.releases import wait_pods
from support.localpods import (
    Container,
    NotReady,
    PortTaken,
    Proc,
    Processes,
    assert_port_free,
    post_json,
    run_to_end,
    wait_ready,
)
from support.series import Recorder


@pytest.fixture(autouse=True)
def waits_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """out/waits.jsonl stays the real runs' own: these waits write to a file of the test's."""
    log = tmp_path / "waits.jsonl"
    monkeypatch.setattr(waits, "WAITS", log)
    return log


@pytest.fixture
def server() -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """A local HTTP server answering each GET and POST with the next (status, body) of its
    script (the last one repeated), a quarter of a second late when the body says `slow`."""
    script: list[tuple[int, str]] = [(200, "ok")]

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            if self.command == "POST":
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, body = script.pop(0) if len(script) > 1 else script[0]
            if "slow" in body:
                time.sleep(0.25)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_wait_for_returns_what_the_probe_found_and_records_the_wait(waits_log: Path):
    answers = iter([None, False, {"ready": True}])
    assert wait_for("the thing", lambda: next(answers), timeout=5, interval=0.01) == {"ready": True}
    (line,) = [json.loads(x) for x in waits_log.read_text().splitlines()]
    assert line["what"] == "the thing" and line["ok"] is True and line["bound"] == 5 and line["seconds"] < 5


def test_a_wait_that_runs_out_names_what_it_saw_and_the_last_error_on_its_first_line(waits_log: Path):
    calls = []

    def probe() -> None:
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise ApiError(404, 'pods "p-0" not found')

    with pytest.raises(TimeoutError) as ran_out:
        wait_for(
            "the pods of ModelServing ns/ms",
            probe,
            timeout=0.3,
            interval=0.05,
            seen=lambda: "p-0 (Pending, unscheduled: Unschedulable)",
            detail=lambda: "its log ends:\n" + "x" * 5000,
        )
    first, rest = str(ran_out.value).split("\n", 1)
    assert first.startswith("the pods of ModelServing ns/ms: not after 0 s (")
    assert "saw: p-0 (Pending, unscheduled: Unschedulable)" in first
    assert 'last error (probe 2): HTTP 404: pods "p-0" not found' in first
    assert rest == "x" * waits.DETAIL_CHARS  # a log's tail: its end kept
    # Probed to the deadline, once more at it, whatever the interval left.
    assert calls[-1] - calls[0] >= 0.25 and len(calls) >= 3
    assert json.loads(waits_log.read_text())["ok"] is False


class _PodLists:
    """A Client whose pod list is each of `answers` in turn, then the last one again."""

    def __init__(self, *answers: list[dict]) -> None:
        self.answers = list(answers)

    def list(self, *_args, **_kwargs) -> list[dict]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _pod(name: str, node: str | None) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}


def test_wait_pods_returns_the_pods_once_every_one_is_bound_not_once_made():
    made = [_pod("ms-0-decode-0-0", "a3-0"), _pod("ms-0-decode-1-0", None)]
    bound = [_pod("ms-0-decode-0-0", "a3-0"), _pod("ms-0-decode-1-0", "a3-1")]
    api = _PodLists(made, made, bound)
    pods = wait_pods(api, "ns", "ms", {"ms-0-decode-0-0", "ms-0-decode-1-0"}, timeout=10)  # type: ignore[arg-type]
    assert [p["spec"]["nodeName"] for p in pods] == ["a3-0", "a3-1"]
    assert api.answers == [bound]


def test_wait_pods_that_runs_out_names_the_pods_not_bound():
    made = [_pod("ms-0-decode-0-0", "a3-0"), _pod("ms-0-decode-1-0", None)]
    with pytest.raises(TimeoutError) as ran_out:
        wait_pods(_PodLists(made), "ns", "ms", {"ms-0-decode-0-0", "ms-0-decode-1-0"}, timeout=0.2)  # type: ignore[arg-type]
    first = str(ran_out.value).split("\n", 1)[0]
    assert first.startswith("the pods of ModelServing ns/ms, bound: not after 0 s (")
    assert "missing [], others [], unbound ['ms-0-decode-1-0']" in first


def test_what_was_seen_is_trimmed_and_a_failing_look_is_said():
    with pytest.raises(TimeoutError) as ran_out:
        wait_for("x", lambda: None, timeout=0.05, interval=0.01, seen=lambda: "y" * 1000)
    assert len(str(ran_out.value)) < waits.SEEN_CHARS + 60

    def broken() -> str:
        raise KeyError("status")

    with pytest.raises(TimeoutError, match=r"saw: \(could not look: 'status'\)"):
        wait_for("x", lambda: None, timeout=0.05, interval=0.01, seen=broken)


def test_an_error_other_than_the_apis_or_the_networks_is_not_waited_out():
    """A component that died (ClusterError) ends the wait at once."""

    def probe() -> None:
        raise RuntimeError("kwok exited during start-up")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="kwok exited"):
        wait_for("nodes", probe, timeout=30)
    assert time.monotonic() - started < 5


def test_pod_brief_says_phase_readiness_scheduling_and_restarts():
    pending = {
        "metadata": {"name": "p-0"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                            "message": "0/12 nodes are available: 4 Insufficient memory."}],
        },
    }  # fmt: skip
    running = {
        "metadata": {"name": "d-0", "deletionTimestamp": "2026-12-04T00:00:00Z"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "engine", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ],
        },
    }
    assert (
        pod_brief(pending)
        == "p-0 (Pending, unscheduled: Unschedulable 0/12 nodes are available: 4 Insufficient memory.)"
    )
    assert pod_brief(running) == "d-0 (Running, not Ready, terminating, 2 restarts, engine waiting: CrashLoopBackOff)"
    assert pods_brief([running, pending]).startswith("d-0 (Running") and pods_brief([]) == "no pods"
    assert pod_brief({"metadata": {"name": "new"}}) == "new (no phase)"


def _sleeper(tmp_path: Path, seconds: float) -> tuple[Processes, Proc]:
    processes = Processes(tmp_path / "logs", grace=1)
    argv = [sys.executable, "-c", f"import time; print('loading', flush=True); time.sleep({seconds})"]
    return processes, processes.start("engine", argv, {"PATH": "/usr/bin:/bin"}, tmp_path)


def test_wait_ready_names_the_last_answer_and_the_log(tmp_path: Path, server, waits_log: Path):
    base, script = server
    script[:] = [(503, "engine loading")]
    processes, proc = _sleeper(tmp_path, 30)
    try:
        with pytest.raises(NotReady) as ran_out:
            wait_ready(proc, f"{base}/health", 1.5)
    finally:
        processes.close()
    first, log = str(ran_out.value).split("\n", 1)
    assert f"engine: {base}/health not ready after 2 s (" in first and "last: HTTP 503 engine loading" in first
    assert "loading" in log
    assert json.loads(waits_log.read_text())["ok"] is False


def test_wait_ready_says_when_nothing_listens_and_when_the_process_exits(tmp_path: Path):
    processes, proc = _sleeper(tmp_path, 0)
    try:
        with pytest.raises(NotReady, match=r"exited 0 before http://127\.0\.0\.1:9/health answered"):
            wait_ready(proc, "http://127.0.0.1:9/health", 30)
        processes, proc = _sleeper(tmp_path, 30)
        with pytest.raises(NotReady, match=r"last: URLError: .*refused"):
            wait_ready(proc, "http://127.0.0.1:9/health", 1.2)
    finally:
        processes.close()


def test_wait_ready_returns_its_seconds(tmp_path: Path, server):
    base, script = server
    script[:] = [(503, "loading"), (200, "ok")]
    processes, proc = _sleeper(tmp_path, 30)
    try:
        assert 0.9 < wait_ready(proc, f"{base}/health", 30) < 10
    finally:
        processes.close()


def test_a_container_that_does_not_end_says_so(tmp_path: Path):
    processes = Processes(tmp_path / "logs", grace=1)
    argv = [sys.executable, "-c", "import time; print('working', flush=True); time.sleep(30)"]
    code, output = run_to_end(processes, Container("job", argv, {"PATH": "/usr/bin:/bin"}, tmp_path, None), 1)
    processes.close()
    assert code == -1 and output.endswith("(job: no end after 1 s; stopped)") and "working" in output


def test_the_router_check_keeps_what_the_router_answered(server):
    base, script = server
    script[:] = [(400, '{"error": "no decode pod found"}'), (200, '{"choices": [{"text": "hi"}]}')]
    answers: list[str] = []
    assert not kthenarun.routes(base, answers)
    assert answers == ['HTTP 400: {"error": "no decode pod found"}']
    assert kthenarun.routes(base, answers) and len(answers) == 1
    assert not kthenarun.routes("http://127.0.0.1:9", answers) and "refused" in answers[-1]


def test_an_answer_that_is_not_json_says_what_came_back(server):
    """A proxy whose upstream died can answer 200 with an empty body: the failure names the URL,
    the status and the body, not a bare JSONDecodeError."""
    base, script = server
    script[:] = [(200, ""), (200, "<html>bad gateway</html>"), (200, '{"ok": 1}')]
    with pytest.raises(
        AssertionError, match=r"/v1/completions: HTTP 200, not JSON \(Expecting value\); the body, 0 bytes: b''"
    ):
        post_json(f"{base}/v1/completions", {})
    with pytest.raises(AssertionError, match=r"24 bytes: b'<html>bad gateway</html>'"):
        post_json(f"{base}/v1/completions", {})
    assert post_json(f"{base}/v1/completions", {}) == {"ok": 1}


def test_a_server_is_not_started_where_another_already_answers(server, tmp_path: Path):
    """A process left by another run on the port would answer the new one's readiness probe."""
    base, _ = server
    with pytest.raises(PortTaken, match=r"proxy: 127\.0\.0\.1:\d+ is already taken before it starts"):
        assert_port_free("proxy", f"{base}/health")
    processes = Processes(tmp_path / "logs", grace=1)
    container = Container(
        "proxy", [sys.executable, "-c", "pass"], {"PATH": "/usr/bin:/bin"}, tmp_path, None, f"{base}/health"
    )
    try:
        with pytest.raises(PortTaken):
            processes.run(container)
        assert processes.running == []
    finally:
        processes.close()
    assert_port_free("proxy", "http://127.0.0.1:9/health")  # nothing listens there


def test_a_phase_settles_in_samples_not_in_seconds(server):
    """A phase's settle holds as many samples as its seconds would at the recorder's pace, also
    where each scrape takes longer than the pace (a busy engine): a slower machine records the
    same number of samples, later."""
    base, script = server
    script[:] = [(200, "slow")]
    recorder = Recorder({"decode": ("d-0", f"{base}/metrics")}, frozenset(), interval=0.05, timeout=5).start()
    try:
        with recorder.phase("after", settle=0.2) as phase:
            assert phase.samples == 0
        assert recorder.phases["after"][1] - recorder.phases["after"][0] >= 4  # 0.2 s at 0.05 s a sample
    finally:
        recorder.close()
    assert all(s["targets"]["decode"]["seconds"] >= 0.25 for s in recorder.samples)


def test_a_closed_recorder_does_not_hold_a_settle():
    recorder = Recorder({}, frozenset(), interval=0.05)
    started = time.monotonic()
    assert recorder.settle(0.1) == 0
    assert time.monotonic() - started < 1
