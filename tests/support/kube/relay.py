"""A byte relay between TCP on loopback and Unix sockets: `python relay.py LISTEN=TARGET ...`,
each endpoint `tcp:127.x.y.z:PORT` (a loopback address) or `unix:PATH`.

Why: Kthena's controller-manager and router listen on every interface (":8443"); the tests bind
loopback only, so those binaries run in a network namespace of their own (only its loopback) and
reach, and are reached from, the host's loopback through Unix sockets in the cluster folder, which
no network namespace separates. One relay runs inside the namespace, one outside. The Kthena
router reaches the engine pods of the process kubelet (kubelet.py) at their own loopback
addresses (127.0.10.1, ...) the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys


def _parse(endpoint: str) -> tuple[str, str, int]:
    kind, _, rest = endpoint.partition(":")
    if kind == "unix":
        return kind, rest, 0
    host, _, port = rest.rpartition(":")
    if kind != "tcp" or not host.startswith("127."):
        raise SystemExit(f"relay: {endpoint}: use tcp:127.x.y.z:PORT (loopback only) or unix:PATH")
    return kind, host, int(port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _open(target: tuple[str, str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    kind, where, port = target
    if kind == "unix":
        return await asyncio.open_unix_connection(where)
    return await asyncio.open_connection(where, port)


async def _serve(listen: tuple[str, str, int], target: tuple[str, str, int]) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(_open(target), timeout=10)
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    kind, where, port = listen
    if kind == "unix":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(where)
        return await asyncio.start_unix_server(handle, where)
    return await asyncio.start_server(handle, where, port)


async def main(pairs: list[str]) -> None:
    servers = []
    for pair in pairs:
        listen, _, target = pair.partition("=")
        servers.append(await _serve(_parse(listen), _parse(target)))
    print("relay: ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1:]))
