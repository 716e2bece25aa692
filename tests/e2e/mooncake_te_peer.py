"""One side of the transfer-engine test (tests/test_mooncake_transfer_engine.py). It is a process
holding a small KV cache in host memory and registering it with Mooncake's transfer engine: the
non-CUDA wheel, which has the TCP transport, with the P2P handshake. It moves blocks to and from
another such process when told.

It needs the standard library and the `mooncake` package of one release on PYTHONPATH
(.tools/mooncake/<version>), with LD_LIBRARY_PATH=.tools/mooncake/lib for libibverbs:
`python mooncake_te_peer.py --host 127.0.0.2 --fill pattern|zeros [--deadline 60]`.

Protocol: one JSON object a line. The peer first sends {"ready": true, "rpc_port", "session",
"layers": [address per layer], "layer_bytes", "pid"} (or {"ready": false, "error"}). Then it
answers each command read from stdin with one line:
  {"op": "read"|"write", "session": "host:port", "remote": [address per layer],
   "pairs": [[local block, remote block], ...]}
      -> {"ok": true, "entries": n, "bytes": n} or {"ok": false, "ret": rc}
  {"op": "digest"} -> {"blocks": [layer][k/v][block] sha256 hex}
  {"op": "exit"} or end of stdin -> it exits 0.
The engine logs (glog) to stderr, and whatever it writes to stdout goes to stderr too: fd 1 is
pointed at stderr before mooncake is imported, and the protocol writes to a private copy of the
original stdout. When its deadline passes it exits 3, so a peer left behind cannot linger.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import select
import sys
import time
from typing import Any, TextIO

# The cache's shape, small but laid out like a real KV cache. Each layer is one buffer of shape
# (2, BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM) in bf16: K then V, then blocks, as in vLLM's
# (2, num_blocks, block_size, num_kv_heads, head_size). The connectors register one buffer per
# cache tensor and move whole blocks addressed by block id, so a block is BLOCK_BYTES contiguous
# bytes at the offset (kv x BLOCKS + block) x BLOCK_BYTES in its layer.
LAYERS = 2
BLOCKS = 8
BLOCK_SIZE = 16
KV_HEADS = 4
HEAD_DIM = 64
DTYPE_BYTES = 2
BLOCK_BYTES = BLOCK_SIZE * KV_HEADS * HEAD_DIM * DTYPE_BYTES
LAYER_BYTES = 2 * BLOCKS * BLOCK_BYTES
# Mooncake's metadata for peers that find each other by host:port alone (no etcd, no HTTP server).
P2P_HANDSHAKE = "P2PHANDSHAKE"


def block_offset(kv: int, block: int) -> int:
    return (kv * BLOCKS + block) * BLOCK_BYTES


def pattern_block(layer: int, kv: int, block: int) -> bytes:
    """The contents of one block on the `pattern` side. Each (layer, k/v, block) gets different
    bytes, so a block written to the wrong place, or K confused with V, shows in the digests."""
    seed = hashlib.sha256(f"mooncake-pd kv {layer}/{kv}/{block}".encode()).digest()
    return seed * (BLOCK_BYTES // len(seed))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def block_digests(addresses: list[int]) -> list[list[list[str]]]:
    return [
        [[digest(ctypes.string_at(address + block_offset(kv, b), BLOCK_BYTES)) for b in range(BLOCKS)] for kv in (0, 1)]
        for address in addresses
    ]


class Lines:
    """Lines from a file descriptor, each read waiting no longer than a deadline. It uses select
    on the raw descriptor with its own buffer, because a buffered file can hold a line that select
    does not see."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.closed = False

    def next(self, deadline: float) -> str | None:
        """The next line; "" at end of input, None once the deadline passes."""
        while b"\n" not in self.buffer and not self.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                chunk = os.read(self.fd, 65536)
                self.closed = not chunk
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def transfer(engine: Any, layers: list[int], command: dict[str, Any]) -> dict[str, Any]:
    """Moves each listed block of K and of V of every layer, as one batch.
    read: from the remote peer into this one. This is vLLM-Ascend's direction: decode pulls
    prefill's blocks with batch_transfer_sync_read (vllm-ascend v0.13.0
    distributed/mooncake_connector.py ~552; v0.18.0 ~545 and v0.23.0 ~962 in
    distributed/kv_transfer/kv_p2p/mooncake_connector.py).
    write: from this peer into the remote one. This is upstream vLLM's direction: prefill
    pushes to decode with batch_transfer_sync_write (vllm kv_connector/v1 mooncake_connector.py)."""
    local: list[int] = []
    remote: list[int] = []
    for layer, remote_layer in zip(layers, command["remote"], strict=True):
        for kv in (0, 1):
            for local_block, remote_block in command["pairs"]:
                local.append(layer + block_offset(kv, local_block))
                remote.append(remote_layer + block_offset(kv, remote_block))
    lengths = [BLOCK_BYTES] * len(local)
    # Mooncake transfer_engine_py.cpp (v0.3.7.post2 to v0.3.11.post1): batch_transfer_sync_read and
    # batch_transfer_sync_write(target_hostname, local buffers, peer addresses, lengths) -> int, 0 when
    # every entry completed.
    if command["op"] == "read":
        ret = engine.batch_transfer_sync_read(command["session"], local, remote, lengths)
    else:
        ret = engine.batch_transfer_sync_write(command["session"], local, remote, lengths)
    if ret != 0:
        return {"ok": False, "ret": str(ret)}
    return {"ok": True, "entries": len(local), "bytes": sum(lengths)}


def serve(args: argparse.Namespace, reply: TextIO, deadline: float) -> int:
    def send(message: dict[str, Any]) -> None:
        reply.write(json.dumps(message) + "\n")
        reply.flush()

    from mooncake.engine import TransferEngine  # type: ignore[import-not-found]

    engine = TransferEngine()
    # The binding's initialize(local_hostname, metadata_server, protocol, device_name). With the P2P
    # handshake the engine advertises local_hostname (the pod IP) and picks its RPC port itself
    # (transfer_engine.cpp v0.3.7.post2 ~96-119; transfer_engine_impl.cpp later). The protocol is
    # ignored up to v0.3.9 ((void)(protocol)). Without an RDMA device the engine installs TCP.
    ret = engine.initialize(args.host, P2P_HANDSHAKE, "tcp", "")
    if ret != 0:
        send({"ready": False, "error": f"initialize returned {ret}"})
        return 2
    # Host memory like the CPU KV cache. Keep references to the buffers so they live as long as
    # the engine.
    buffers = [ctypes.create_string_buffer(LAYER_BYTES) for _ in range(LAYERS)]
    layers = [ctypes.addressof(buffer) for buffer in buffers]
    if args.fill == "pattern":
        for layer, address in enumerate(layers):
            for kv in (0, 1):
                for block in range(BLOCKS):
                    data = pattern_block(layer, kv, block)
                    ctypes.memmove(address + block_offset(kv, block), data, BLOCK_BYTES)
    for address in layers:
        ret = engine.register_memory(address, LAYER_BYTES)
        if ret != 0:
            send({"ready": False, "error": f"register_memory returned {ret}"})
            return 2
    port = engine.get_rpc_port()
    send(
        {
            "ready": True,
            "rpc_port": port,
            "session": f"{args.host}:{port}",
            "layers": layers,
            "layer_bytes": LAYER_BYTES,
            "pid": os.getpid(),
        }
    )
    lines = Lines(sys.stdin.fileno())
    while True:
        line = lines.next(deadline)
        if line is None:
            print(f"mooncake_te_peer: deadline of {args.deadline} s passed, exiting", file=sys.stderr)
            return 3
        if line == "" and lines.closed:
            return 0
        if not line.strip():
            continue
        command = json.loads(line)
        if command["op"] == "exit":
            return 0
        if command["op"] == "digest":
            send({"blocks": block_digests(layers)})
        elif command["op"] in ("read", "write"):
            send(transfer(engine, layers, command))
        else:
            send({"ok": False, "error": f"unknown op {command['op']!r}"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="the address this engine advertises (the pod IP)")
    parser.add_argument("--fill", choices=("pattern", "zeros"), required=True)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds before it exits on its own")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.deadline
    # Only protocol lines go to the original stdout; the engine's output goes to stderr.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        return serve(args, reply, deadline)
    finally:
        reply.close()


if __name__ == "__main__":
    sys.exit(main())
