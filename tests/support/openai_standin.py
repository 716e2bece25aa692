"""A stand-in for a vLLM engine or router: an OpenAI-compatible HTTP server on 127.0.0.1, for
running the chart's client containers (PD proxy, helm test, benchmark Job) where no engine can run.

It answers what those clients ask of vLLM: GET /health, /healthcheck, /v1/models and /metrics;
POST /v1/completions and /v1/chat/completions, streamed (SSE `data:` chunks, a usage chunk when
`stream_options.include_usage`, then `data: [DONE]`, as vLLM's OpenAI server does) or not. A
request carrying `kv_transfer_params.do_remote_decode` is answered as a prefill engine answers
NixlConnector/Mooncake requests: one token and `kv_transfer_params` for decode; one carrying
prefill's answer (`do_remote_prefill`) as decode counts a loaded KV cache on /metrics: its prompt
tokens as vllm:external_prefix_cache_hits_total and one NIXL transfer (the KV canary reads them).
Every request is appended to --record as one JSON line, so a test can see what the client sent.
With --no-kv-answer a prefill request is answered without kv_transfer_params, as an engine with no
KV connector answers (what a proxy then sends decode is the test's question).

Standard library only. Usage: python openai_standin.py --port N --model NAME [--record FILE]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROMPT_TOKENS = 8
PREFILL_ANSWER = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [0],
    "remote_engine_id": "standin",
    "remote_host": "127.0.0.1",
    "remote_port": 1,
    "tp_size": 1,
}


def completion(request: dict[str, Any], chat: bool, model: str, kv_answer: bool = True) -> dict[str, Any]:
    tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
    params = request.get("kv_transfer_params") or {}
    prefill = bool(params.get("do_remote_decode"))
    if prefill:
        tokens = 1
    text = " ".join(f"w{i}" for i in range(tokens))
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        "id": f"standin-{time.monotonic_ns()}",
        "object": "chat.completion" if chat else "text_completion",
        "model": model,
        "choices": [choice],
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": tokens, "total_tokens": PROMPT_TOKENS + tokens},
        "kv_transfer_params": PREFILL_ANSWER if prefill and kv_answer else None,
    }


def stream_chunks(request: dict[str, Any], chat: bool, model: str) -> list[dict[str, Any]]:
    whole = completion(request, chat, model)
    words = (whole["choices"][0].get("text") or whole["choices"][0]["message"]["content"]).split(" ")
    chunks = []
    for i, word in enumerate(words):
        piece = word if i == 0 else " " + word
        choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
        chunks.append({"id": whole["id"], "model": model, "choices": [choice]})
    if (request.get("stream_options") or {}).get("include_usage"):
        chunks.append({"id": whole["id"], "model": model, "choices": [], "usage": whole["usage"]})
    return chunks


def metrics_text(counters: dict[str, float]) -> bytes:
    lines = ["vllm:num_requests_running 0"] + [f'{name}{{engine="0"}} {value}' for name, value in counters.items()]
    return ("\n".join(lines) + "\n").encode()


def handler_class(model: str, record: Path | None, kv_answer: bool = True):
    lock = threading.Lock()
    # What decode's /metrics count of loaded KV caches (vLLM's names; NIXL's transfer counter).
    counters = {
        "vllm:external_prefix_cache_hits_total": 0.0,
        "vllm:nixl_xfer_time_seconds_count": 0.0,
        "vllm:nixl_num_failed_transfers_total": 0.0,
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet: the test reads --record
            pass

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path in ("/health", "/healthcheck"):
                self._send(200, b"{}")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode())
            elif self.path == "/metrics":
                with lock:
                    body = metrics_text(counters)
                self._send(200, body, "text/plain")
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            if record:
                with lock, record.open("a") as out:
                    out.write(json.dumps({"path": self.path, "body": request}) + "\n")
            chat = self.path == "/v1/chat/completions"
            if (request.get("kv_transfer_params") or {}).get("do_remote_prefill"):
                with lock:
                    counters["vllm:external_prefix_cache_hits_total"] += PROMPT_TOKENS
                    counters["vllm:nixl_xfer_time_seconds_count"] += 1
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._send(404, b'{"error": "not found"}')
            elif request.get("stream"):
                body = (
                    b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in stream_chunks(request, chat, model))
                    + b"data: [DONE]\n\n"
                )
                self._send(200, body, "text/event-stream")
            else:
                self._send(200, json.dumps(completion(request, chat, model, kv_answer)).encode())

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--model", default="standin", help="model name in /v1/models and answers")
    parser.add_argument("--record", type=Path, help="append each POST as a JSON line here")
    parser.add_argument(
        "--no-kv-answer", action="store_true", help="answer prefill requests without kv_transfer_params"
    )
    args = parser.parse_args()
    server = ThreadingHTTPServer(
        ("127.0.0.1", args.port), handler_class(args.model, args.record, kv_answer=not args.no_kv_answer)
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
