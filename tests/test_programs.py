"""The programs pods run from the scripts ConfigMap (chart/files/*.py) as modules: what each
prints, refuses and leaves behind. (The download program runs against a stand-in hub in
tests/test_accelerators.py; conformance runs the programs in the images' Python with their
rendered env and user; the e2e runs kv_transfer_config.py in real engine starts.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mooncake_pd import chartfiles, paths

FILES = paths.CHART / "files"


def test_kv_transfer_config_sets_engine_id_as_data():
    config = '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cpu"}'
    engine_id = "deepseek-pd-0_prefill-0_start1'\"$x"
    proc = subprocess.run(
        [sys.executable, str(FILES / "kv_transfer_config.py"), config],
        env={**os.environ, "MOONCAKE_ENGINE_ID": engine_id},
        capture_output=True,
        text=True,
        check=True,
    )
    # What the start script's one-liner printed before: json.dumps with its default separators.
    expected = json.loads(config) | {"engine_id": engine_id}
    assert proc.stdout == json.dumps(expected) + "\n"


def test_kv_transfer_config_refuses_a_missing_config():
    proc = subprocess.run([sys.executable, str(FILES / "kv_transfer_config.py")], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage:" in proc.stderr


def test_bench_result_prints_the_compact_json_after_the_marker(tmp_path: Path):
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"completed": 200, "mean_ttft_ms": 51.5}, indent=2))
    proc = subprocess.run(
        [sys.executable, str(FILES / "bench_result.py"), str(result)], capture_output=True, text=True, check=True
    )
    assert proc.stdout == 'mooncake-pd-benchmark-result: {"completed":200,"mean_ttft_ms":51.5}\n'


def test_chat_check_retries_a_router_that_is_not_reachable(monkeypatch: pytest.MonkeyPatch):
    """Answers and HTTP errors: tests/test_routing.py runs the rendered program against a router."""
    check = chartfiles.program("chat_check")
    monkeypatch.setattr(check, "ATTEMPTS", 2)
    monkeypatch.setattr(check, "RETRY_SECONDS", 0)
    request = {"model": "ds_r1", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
    env = {"CHAT_URL": "http://127.0.0.1:9/v1/chat/completions", "CHAT_REQUEST": json.dumps(request)}
    assert check.main(env) == ("FAIL: http://127.0.0.1:9/v1/chat/completions not reachable")
