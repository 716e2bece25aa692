"""mooncake-pd proxy_guard: runs vLLM-Ascend's PD proxy (load_balance_proxy_server_example.py, the
script given) so that a client reaches what a user needs and nothing that steers the proxy, as
vLLM's security guide asks of a PD deployment (vllm docs/usage/security.md at v0.13.0 and
v0.34.0: allowlist the endpoints a reverse proxy serves; do not let clients set
kv_transfer_params).

- Served: POST /v1/completions and /v1/chat/completions, GET /healthcheck (the probes) and GET
  /metrics (where a proxy image serves one). Every other method and path is answered 404 before
  the script sees it; above all POST /instances/add and /instances/remove, with which any client
  re-routes every user's prompts, and the engines' key the proxy sends with them, to a host of
  its choosing (vllm-ascend examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py,
  v0.13.0 ~882-889, v0.18.0 ~902-907, v0.23.0 ~1187-1195), and v0.23.0's POST
  /reset_prefix_cache (~1158), which empties every engine's prefix cache.
- A client's `kv_transfer_params` is dropped from the request body. The script overwrites it in
  what it sends prefill, but sends decode the client's own when prefill answers none (v0.13.0
  ~654-656, v0.18.0 ~678-680, v0.23.0 ~925-927): it names the host and blocks decode reads the KV
  cache from.

The script is loaded as a module (its `__main__` block does not run), with the arguments given
after it, and served by uvicorn in this process. One worker only: v0.23.0's --workers > 1 starts
processes that import the script again, unguarded, so it is refused (run more proxy replicas).

Usage: python3 proxy_guard.py SCRIPT [the script's arguments]
Python 3.9+; imports what the script imports (fastapi, httpx, uvicorn).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from types import ModuleType
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

SERVED = frozenset(
    {
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/healthcheck"),
        ("GET", "/metrics"),
    }
)
CLIENT_KEYS_DROPPED = ("kv_transfer_params",)
REFUSAL = json.dumps(
    {"error": "not served: this proxy serves POST /v1/completions and /v1/chat/completions only"}
).encode()


def served(method: str, path: str) -> bool:
    """Whether a client's request reaches the proxy script (an allowlist: a path spelled another
    way, with a trailing slash or doubled, is refused rather than normalised)."""
    return (method, path) in SERVED


def without_client_keys(body: bytes) -> bytes:
    """The request body without the keys a client may not set; unchanged where it has none or is
    not a JSON object (the script then answers its own error)."""
    try:
        request = json.loads(body)
    except ValueError:
        return body
    if not isinstance(request, dict) or not any(key in request for key in CLIENT_KEYS_DROPPED):
        return body
    for key in CLIENT_KEYS_DROPPED:
        request.pop(key, None)
    return json.dumps(request).encode()


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The whole request body, and whether the client went away before sending it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


async def _refuse(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(REFUSAL)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": REFUSAL})


def guard(app: App) -> App:
    """`app` (an ASGI application) behind the allowlist, with client-set keys dropped."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the script's startup and shutdown
            await app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        if not served(method, path):
            await _refuse(send)
            return
        if method != "POST":
            await app(scope, receive, send)
            return
        body, gone = await _read_body(receive)
        if gone:
            return
        body = without_client_keys(body)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = dict(scope, headers=[*headers, (b"content-length", str(len(body)).encode())])
        replayed = False

        async def replay() -> Message:
            # The body once; then the client's own messages, so that the script still sees a
            # disconnect (it cancels the engines' requests on one).
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return guarded


def load(script: str, args: list[str]) -> ModuleType:
    """The proxy script as a module, its argument parser reading `args`."""
    path = Path(script)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"proxy_guard: {script}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.argv = [str(path), *args]
    spec.loader.exec_module(module)
    for name in ("app", "parse_args"):
        if not hasattr(module, name):
            raise SystemExit(
                f"proxy_guard: {script} has no `{name}`: proxy.script must be vLLM-Ascend's "
                "load_balance_proxy_server_example.py"
            )
    return module


def main(argv: list[str]) -> int | str:
    if not argv or argv[0].startswith("-"):
        return "usage: proxy_guard.py SCRIPT [the script's arguments]"
    module = load(argv[0], argv[1:])
    options = module.parse_args()
    if int(getattr(options, "workers", 1) or 1) > 1:
        return (
            "proxy_guard: --workers > 1 would serve the script unguarded in its worker processes; "
            "run more proxy replicas"
        )
    # The script's __main__ sets its global_args and (v0.23.0) its logging; its handlers read both.
    setattr(module, "global_args", options)  # noqa: B010 (a module attribute the script declares only in __main__)
    if hasattr(module, "setup_logging") and hasattr(options, "log_level"):
        module.setup_logging(options.log_level)
    import uvicorn

    uvicorn.run(guard(module.app), host=options.host, port=options.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
