"""Stand-in PD engines that answer at once, and a load generator, for measuring what the PD proxy
and Kthena's router add to a PD request (harness/datapath_capacity.py, issue 41 item 5).

Why not openai_standin.py: it is a ThreadingHTTPServer (a thread per connection, every byte
under the GIL) that writes a whole stream in one write, so it has no token rate and 1,000 open
streams would be 1,000 threads. Here one asyncio event loop (uvloop where the Python has it: the
e2e venv, as vLLM's own server and the proxy use) serves every connection with raw protocols.

`python streamload.py standin --listen ADDR:PORT [...] --tpot S`: each listen address answers as a
vLLM engine behind NixlConnector/MooncakeConnector answers, chosen by the request as vLLM does:
a request with `kv_transfer_params.do_remote_decode` (the proxy's and the router's prefill half)
gets one token, non-streamed, and `kv_transfer_params` for decode (the fields vLLM's NIXL
connector returns); any other streams `max_tokens` tokens, the first at once and then one every
`--tpot` seconds (SSE `data:` chunks, a usage chunk when `stream_options.include_usage`, then
`data: [DONE]`), as vLLM's OpenAI server writes them. GET /health, /v1/models and /metrics (the
gauges Kthena's router scrapes: running streams, 0 waiting, 0 KV usage) answer too.

`python streamload.py load --mode pd|direct ...`: requests of a fixed prompt and `--tokens`,
either `--concurrency N` closed-loop streams (each sends its next request when its last one
ended) or `--rate R` open-loop Poisson arrivals (seeded), for `--duration` seconds after
`--warmup`. `direct`: one streamed request to `--url` (the proxy or the router). `pd`: what the
proxy does, straight to the stand-ins: the prefill half to `--prefill` (non-streamed,
max_tokens 1, do_remote_decode), then the stream to `--decode` with prefill's kv_transfer_params.
TTFT: from writing the request (the prefill half's, in `pd`) to the first token's bytes. Prints
one JSON object: per request (of the window) its TTFT and duration, failures with a sample, the
open-loop lag behind the schedule, and the generator's own CPU seconds.

Standard library (and uvloop where installed); HTTP/1.1 keep-alive, chunked or Content-Length.


Over 400 lines: one program that datapath_capacity runs by path, in a network namespace and with a
Python of its own: the stand-in engines (`standin`) and the load generator (`load`) share its HTTP
framing and use the standard library alone."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import random
import resource
import sys
import time
from collections.abc import Callable
from typing import Any, cast

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4
MODEL = "standin"
# What vLLM's NIXL connector returns to the prefill half (vllm 0.13 nixl_connector.py
# request_finished): decode needs these to pull the KV blocks.
PREFILL_ANSWER = {
    "do_remote_prefill": True,
    "do_remote_decode": False,
    "remote_block_ids": [0, 1, 2],
    "remote_engine_id": "standin",
    "remote_host": "127.0.0.1",
    "remote_port": 5600,
    "tp_size": 1,
}
PROMPT_TOKENS = 48
BACKLOG = 4096
MARK = b'"choices":[{'


def use_uvloop() -> str:
    """uvloop's event loop where this Python has it; the loop's name."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def more_files() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- HTTP/1.1 parsing shared by both ends ------------------------------------------------------
def head_of(data: bytes) -> tuple[str, dict[str, str]]:
    """The first line and the headers (lower-case names) of a request or response head."""
    lines = data.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers


class ChunkedBody:
    """An incremental reader of a chunked body: feed() bytes, it calls on_data(payload) for each
    payload piece and says when the last chunk and its trailer are in; the bytes after it are
    `rest`."""

    def __init__(self, on_data: Callable[[bytes], None]) -> None:
        self.on_data = on_data
        self.buffer = b""
        # Bytes of the current chunk still to come; -1: a size line is next; -2: the last CRLF.
        self.left = -1
        self.done = False
        self.rest = b""

    def feed(self, data: bytes) -> bool:
        self.buffer += data
        while not self.done:
            if self.left == -2:  # after the last chunk: its CRLF (no trailers here)
                end = self.buffer.find(b"\r\n")
                if end < 0:
                    return False
                self.rest = self.buffer[end + 2 :]
                self.done = True
                return True
            if self.left < 0:
                end = self.buffer.find(b"\r\n")
                if end < 0:
                    return False
                size = int(self.buffer[:end].split(b";")[0], 16)
                self.buffer = self.buffer[end + 2 :]
                self.left = -2 if size == 0 else size
            else:
                if len(self.buffer) < self.left + 2:
                    if len(self.buffer) > self.left:
                        return False
                    if self.buffer:
                        self.on_data(self.buffer)
                        self.left -= len(self.buffer)
                        self.buffer = b""
                    return False
                if self.left:
                    self.on_data(self.buffer[: self.left])
                self.buffer = self.buffer[self.left + 2 :]
                self.left = -1
        return True


# -- the stand-in engines -----------------------------------------------------------------------
def sse(payload: dict[str, Any]) -> bytes:
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class Engine:
    """What every listen address shares: the token interval and the counts /metrics reports."""

    def __init__(self, tpot: float) -> None:
        self.tpot = tpot
        self.streams = 0
        self.requests = 0
        self.prefills = 0
        self.remote_prefills = 0


class EngineProtocol(asyncio.Protocol):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.timers: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in self.timers:
            timer.cancel()
        if self.busy:
            self.engine.streams -= 1
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.busy:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            first, headers = head_of(self.buffer[:end])
            length = int(headers.get("content-length") or 0)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, path = first.split(" ")[:2]
            self.answer(method, path, body)

    def send(self, status: str, body: bytes, content_type: str = "application/json") -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), content_type.encode(), len(body), body)
        )

    def answer(self, method: str, path: str, body: bytes) -> None:
        engine = self.engine
        if method == "GET":
            if path in ("/health", "/healthcheck"):
                self.send("200 OK", b"{}")
            elif path == "/v1/models":
                self.send("200 OK", json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())
            elif path == "/metrics":
                labels = f'{{engine="0",model_name="{MODEL}"}}'
                gauges = {"num_requests_running": engine.streams, "num_requests_waiting": 0, "kv_cache_usage_perc": 0}
                text = "".join(
                    f"# TYPE vllm:{name} gauge\nvllm:{name}{labels} {float(value)}\n" for name, value in gauges.items()
                )
                self.send("200 OK", text.encode(), "text/plain; version=0.0.4")
            else:
                self.send("404 Not Found", b'{"error":"not found"}')
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self.send("404 Not Found", b'{"error":"not found"}')
            return
        engine.requests += 1
        request = json.loads(body or b"{}")
        chat = path == "/v1/chat/completions"
        params = request.get("kv_transfer_params") or {}
        rid = f"cmpl-{engine.requests}"
        if params.get("do_remote_decode"):
            engine.prefills += 1
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": "w0"}
            else:
                choice["text"] = "w0"
            answer = {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "model": MODEL,
                "choices": [choice],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": 1, "total_tokens": PROMPT_TOKENS + 1},
                "kv_transfer_params": PREFILL_ANSWER,
            }
            self.send("200 OK", json.dumps(answer, separators=(",", ":")).encode())
            return
        if params.get("do_remote_prefill"):
            engine.remote_prefills += 1
        tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        if not request.get("stream"):
            text = " ".join(f"w{i}" for i in range(tokens))
            whole: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            whole.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            answer = {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "model": MODEL,
                "choices": [whole],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": tokens},
            }
            self.send("200 OK", json.dumps(answer, separators=(",", ":")).encode())
            return
        usage = bool((request.get("stream_options") or {}).get("include_usage"))
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        self.busy = True
        engine.streams += 1
        kind = "chat.completion.chunk" if chat else "text_completion"
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.timers = []
        # Each token's event from one template (json.dumps of every chunk would double the
        # stand-in's cost per token): the piece is plain ASCII, so no escaping is needed.
        field = '"delta":{"content":"%s"}' if chat else '"text":"%s"'
        head = f'{{"id":"{rid}","object":"{kind}","model":"{MODEL}","choices":[{{"index":0,'
        template = head + field + ',"finish_reason":%s}]}'

        write = self.transport.write

        def token(i: int) -> None:
            if self.transport is None:
                return
            last = i == tokens - 1
            piece = f"w{i}" if i == 0 else f" w{i}"
            data = b"data: %s\n\n" % (template % (piece, '"length"' if last else "null")).encode()
            out = b"%x\r\n%s\r\n" % (len(data), data)
            if last:
                if usage:
                    counts = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": tokens}
                    out += sse({"id": rid, "object": kind, "model": MODEL, "choices": [], "usage": counts})
                done = b"data: [DONE]\n\n"
                out += b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
            write(out)
            if last:
                self.busy = False
                engine.streams -= 1
                self.timers = []
                if self.buffer:
                    self.data_received(b"")
            else:
                # One timer a stream at a time: the heap stays as small as the open streams.
                self.timers = [loop.call_at(start + (i + 1) * engine.tpot, token, i + 1)]

        token(0)


async def serve(listen: list[tuple[str, int]], tpot: float) -> None:
    engine = Engine(tpot)
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(lambda: EngineProtocol(engine), host, port, backlog=BACKLOG, reuse_address=True)
        for host, port in listen
    ]
    print(f"standin: ready on {listen}, tpot {tpot}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


# -- the load generator -------------------------------------------------------------------------
class Failed(Exception):
    pass


class Response(asyncio.Protocol):
    """One client connection: a request at a time; `ask()` resolves when the whole response is
    in: (status, body or b"" for a stream, tokens streamed, first token's loop time)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[tuple[int, bytes, int, float]] | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.buffer = b""
        self.head_done = False
        self.status = 0
        self.length = -1
        self.chunked: ChunkedBody | None = None
        self.body = b""
        self.keep_body = True
        self.tokens = 0
        self.first = 0.0
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter and not self.waiter.done():
            self.waiter.set_exception(Failed(f"connection closed: {exc or 'by the server'}"))

    def ask(self, request: bytes, keep_body: bool) -> asyncio.Future[tuple[int, bytes, int, float]]:
        assert self.transport is not None
        self._reset()
        self.keep_body = keep_body
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.waiter

    def _payload(self, data: bytes) -> None:
        # `tail` is shorter than MARK, so a mark counted here was not counted before.
        joined = self.tail + data
        found = joined.count(MARK)
        if found:
            if not self.first:
                self.first = time.monotonic()
            self.tokens += found
        self.tail = joined[-(len(MARK) - 1) :]
        if self.keep_body:
            self.body += data

    def data_received(self, data: bytes) -> None:
        if not self.head_done:
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            first, headers = head_of(self.buffer[:end])
            self.status = int(first.split(" ")[1])
            data, self.buffer = self.buffer[end + 4 :], b""
            self.head_done = True
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.chunked = ChunkedBody(self._payload)
            else:
                self.length = int(headers.get("content-length") or 0)
            if headers.get("connection", "").lower() == "close":
                self.closed = True
        if self.chunked is not None:
            if self.chunked.feed(data):
                self._finish()
        else:
            self._payload(data)
            self.length -= len(data)
            if self.length <= 0:
                self._finish()

    def _finish(self) -> None:
        if self.waiter and not self.waiter.done():
            self.waiter.set_result((self.status, self.body, self.tokens, self.first))


class Pool:
    """Keep-alive connections to one host:port."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[Response] = []
        self.opened = 0

    async def request(self, path: str, body: dict[str, Any], keep_body: bool) -> tuple[int, bytes, int, float]:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                break
        else:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(Response, self.host, self.port)
            self.opened += 1
        data = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Accept: */*\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode()
        try:
            answer = await conn.ask(head + data, keep_body)
        except BaseException:
            if conn.transport is not None:
                conn.transport.close()
            raise
        if not conn.closed:
            self.idle.append(conn)
        return answer


def address(text: str) -> tuple[str, int]:
    host, _, port = text.removeprefix("http://").rstrip("/").rpartition(":")
    return host, int(port)


class Load:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode: str = args.mode
        self.pools = {
            name: Pool(*address(url))
            for name, url in (("url", args.url), ("prefill", args.prefill), ("decode", args.decode))
            if url
        }
        self.records: list[tuple[float, float, float, int]] = []  # start, ttft, total, tokens
        self.failures: list[tuple[float, str]] = []
        self.lags: list[float] = []
        self.starts: list[float] = []
        self.active = 0
        self.peak = 0

    def body(self) -> dict[str, Any]:
        return {
            "model": self.args.model,
            "prompt": PROMPT,
            "max_tokens": self.args.tokens,
            "temperature": 0,
            "stream": True,
        }

    async def one(self) -> None:
        start = time.monotonic()
        self.starts.append(start)
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            tokens, first = await asyncio.wait_for(self.exchange(), self.args.request_timeout)
            if tokens != self.args.tokens:
                raise Failed(f"{tokens} of {self.args.tokens} tokens")
            end = time.monotonic()
            self.records.append((start, first - start, end - start, tokens))
        except asyncio.TimeoutError:
            self.failures.append((start, f"no answer within {self.args.request_timeout:g} s"))
        except (Failed, OSError, ValueError) as e:
            self.failures.append((start, f"{type(e).__name__}: {e}"))
        finally:
            self.active -= 1

    async def exchange(self) -> tuple[int, float]:
        """One request (direct) or the proxy's two (pd): the tokens streamed, the first's time."""
        if self.mode == "direct":
            status, _, tokens, first = await self.pools["url"].request("/v1/completions", self.body(), False)
            if status != 200:
                raise Failed(f"HTTP {status}")
            return tokens, first
        ask = {**self.body(), "stream": False, "max_tokens": 1, "min_tokens": 1}
        ask["kv_transfer_params"] = {"do_remote_decode": True, "do_remote_prefill": False}
        status, body, _, _ = await self.pools["prefill"].request("/v1/completions", ask, True)
        if status != 200:
            raise Failed(f"prefill HTTP {status}")
        params = json.loads(body).get("kv_transfer_params")
        if not params:
            raise Failed("prefill answered no kv_transfer_params")
        decode = {**self.body(), "kv_transfer_params": params}
        status, _, tokens, first = await self.pools["decode"].request("/v1/completions", decode, False)
        if status != 200:
            raise Failed(f"decode HTTP {status}")
        return tokens, first

    async def closed_loop(self, until: float) -> None:
        spread = self.args.tokens * self.args.tpot_hint

        async def worker(i: int) -> None:
            await asyncio.sleep(spread * i / self.args.concurrency)
            while time.monotonic() < until:
                await self.one()

        await asyncio.gather(*(worker(i) for i in range(self.args.concurrency)))

    async def open_loop(self, until: float) -> None:
        rng = random.Random(self.args.seed)
        tasks = set()
        due = time.monotonic()
        while True:
            due += rng.expovariate(self.args.rate)
            if due >= until:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.lags.append(time.monotonic() - due)
            task = asyncio.ensure_future(self.one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=self.args.drain)

    async def run(self) -> dict[str, Any]:
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        begin = wall0 + self.args.warmup
        until = begin + self.args.duration
        if self.args.rate:
            await self.open_loop(until)
        else:
            await self.closed_loop(until)
        wall, cpu = time.monotonic() - wall0, cpu_seconds() - cpu0
        window = [r for r in self.records if begin <= r[0] < until]
        failed = [f for f in self.failures if begin <= f[0] < until]
        return {
            "mode": self.mode,
            "concurrency": self.args.concurrency,
            "rate": self.args.rate,
            "tokens": self.args.tokens,
            "duration_s": self.args.duration,
            "warmup_s": self.args.warmup,
            "ttft_ms": [round(r[1] * 1000, 3) for r in window],
            "total_ms": [round(r[2] * 1000, 3) for r in window],
            "failed": len(failed),
            "offered": sum(1 for t in self.starts if begin <= t < until),
            "failures": sorted({f[1] for f in failed})[:5],
            "completed_all": len(self.records),
            "failed_all": len(self.failures),
            "peak_streams": self.peak,
            "lag_ms": sorted(round(x * 1000, 3) for x in self.lags),
            "connections": sum(p.opened for p in self.pools.values()),
            "cpu_s": round(cpu, 4),
            "wall_s": round(wall, 4),
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    standin = sub.add_parser("standin", help="serve stand-in engines")
    standin.add_argument("--listen", action="append", required=True, help="ADDR:PORT (repeat)")
    standin.add_argument("--tpot", type=float, default=0.05, help="seconds between a stream's tokens")
    load = sub.add_parser("load", help="send a load and print its figures as JSON")
    load.add_argument("--mode", choices=("pd", "direct"), required=True)
    load.add_argument("--url", help="direct: the proxy's or router's base URL")
    load.add_argument("--prefill", help="pd: prefill's base URL")
    load.add_argument("--decode", help="pd: decode's base URL")
    load.add_argument("--concurrency", type=int, default=0, help="closed-loop streams")
    load.add_argument("--rate", type=float, default=0.0, help="open-loop requests per second (Poisson)")
    load.add_argument("--tokens", type=int, default=32, help="max_tokens of each request")
    load.add_argument("--model", default=MODEL, help="the model the requests name (the router routes by it)")
    load.add_argument("--tpot-hint", type=float, default=0.05, help="the stand-ins' --tpot: closed-loop start spread")
    load.add_argument("--duration", type=float, default=5.0, help="seconds measured")
    load.add_argument("--warmup", type=float, default=1.0, help="seconds before the window")
    load.add_argument("--drain", type=float, default=30.0, help="open loop: seconds to wait for the last streams")
    load.add_argument("--seed", type=int, default=41)
    load.add_argument("--request-timeout", type=float, default=30.0, help="seconds a request may take")
    args = parser.parse_args(argv)
    more_files()
    loop_name = use_uvloop()
    if args.command == "standin":
        asyncio.run(serve([address(text) for text in args.listen], args.tpot))
        return
    if (args.mode == "direct") != bool(args.url) or (args.mode == "pd") != bool(args.prefill and args.decode):
        parser.error("direct needs --url; pd needs --prefill and --decode")
    if bool(args.concurrency) == bool(args.rate):
        parser.error("give --concurrency or --rate")
    result = asyncio.run(Load(args).run())
    result["loop"] = loop_name
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
