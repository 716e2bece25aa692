"""The transfer engine of the Mooncake release each vLLM-Ascend image ships moves KV-shaped blocks
between two processes, and it listens only on ports inside the range the chart plans for it.

The Mooncake release per engine version is profiles.yaml engines.<version>.mooncake. v0.13.0's
and v0.18.0's images build a Mooncake tag: vllm-ascend Dockerfile* MOONCAKE_TAG is v0.3.7.post2
and v0.3.9. v0.23.0's image installs mooncake-transfer-engine-npu==0.3.11.post1. For each
version, two processes (tests/e2e/mooncake_te_peer.py) each run PyPI's
mooncake-transfer-engine-non-cuda wheel of that release (requirements-mooncake.txt,
scripts/install-mooncake.sh). They use the P2P handshake and advertise two loopback addresses as
the pod IPs: 127.0.0.2 for prefill, 127.0.0.3 for decode. Each registers a two-layer bf16 KV cache
in host memory. Decode pulls three of prefill's blocks with batch_transfer_sync_read, which is what
vLLM-Ascend's MooncakeConnectorV1 does. Prefill pushes two blocks into decode with
batch_transfer_sync_write, which is what upstream vLLM's MooncakeConnector does. The blocks move
between different block ids. The test proves:
  - every block arrives byte for byte in the right place, K and V and both layers, and no other
    block changes. A write can still be landing in the target's memory after
    batch_transfer_sync_write returns (wait_for_blocks says why); it must land within 5 s;
  - each process listens on exactly two TCP ports, its RPC (handshake) port and its TCP
    transport's data port. Both are on every address and inside the chart's "Mooncake's RPC"
    range (engines.<version>.connectors.MooncakeConnectorV1.randomPorts). The reported RPC port
    and the ports in the log agree with what the process holds;
  - the engine picked its TCP transport ("TcpTransport: listen on port N").
The chart sets no MC_* variable, so the engines run with Mooncake's defaults, and the test removes
any MC_* variable it inherits. MC_TRANSFER_TIMEOUT is the exception: it only bounds a transfer.

What it cannot prove: the images' build. They build Mooncake with -DUSE_ASCEND_DIRECT=ON (or
install the -npu wheel), which installs the "ascend" transport instead of TCP
(transfer_engine_impl.cpp v0.3.11.post1 ~205-212). That transport moves NPU memory through CANN's
ADXL engine (ascend_direct_transport.h) and listens at 20000 + per-device ports (the chart's
"Mooncake's listener" range). It needs an NPU, and so does RDMA; neither exists here. So the
Ascend data path, its listener ports and HCCL stay unproven. What the test shares with the images
is the RPC/handshake port: its code and range are the same in every build
(findAvailableTcpPort, include/config.h rpc_min_port/rpc_max_port).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import ipaddress
import json
import os
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mooncake_pd import paths, profiles

PEER = paths.REPO / "tests" / "e2e" / "mooncake_te_peer.py"
MOONCAKE = paths.TOOLS_DIR / "mooncake"
# The Python scripts/install-mooncake.sh checks each wheel with (the wheels are cp311).
PYTHON = Path(os.environ.get("E2E_PYTHON", "/usr/bin/python3.11"))
PREFILL_HOST, DECODE_HOST = "127.0.0.2", "127.0.0.3"
# (decode block, prefill block): decode pulls these, as vLLM-Ascend's decode does.
READ_PAIRS = [(0, 5), (1, 6), (4, 2)]
# (prefill block, decode block): prefill pushes these, as upstream vLLM's prefill does. Decode's
# blocks 2, 5 and 7 receive nothing and must stay zero.
WRITE_PAIRS = [(7, 3), (0, 6)]
READY_SECONDS = 30.0
COMMAND_SECONDS = 20.0
# How long a completed write may take to reach the target's memory (wait_for_blocks), in time and
# in digests asked.
WRITE_LANDS_SECONDS = 5.0
WRITE_LANDS_POLLS = 200
# A peer's own deadline, so that it exits even if this test dies without stopping it.
PEER_DEADLINE_SECONDS = 90.0
# Mooncake's log lines (glog, on stderr): transfer_engine.cpp v0.3.7.post2 ~146-148 and
# transfer_engine_impl.cpp v0.3.9 ~173 and v0.3.11.post1 ~183 log the RPC line;
# tcp_transport.cpp v0.3.7.post2 ~299, v0.3.9 ~362 and v0.3.11.post1 ~553 log the TCP line.
RPC_LOG = re.compile(r"Transfer Engine RPC using P2P handshake, listening on (\S+):(\d+)")
TCP_LOG = re.compile(r"TcpTransport: listen on port (\d+)")
LISTEN = "0A"  # the state column of /proc/net/tcp for TCP_LISTEN


def mooncake_releases() -> dict[str, str]:
    """Engine version -> the Mooncake release its vLLM-Ascend image ships (null: no such image)."""
    return {v: e["mooncake"] for v, e in profiles.load()["engines"].items() if e.get("mooncake")}


def rpc_range(version: str) -> tuple[int, int]:
    """The chart's "Mooncake's RPC" range for this engine version, inclusive."""
    ports = profiles.load()["engines"][version]["connectors"]["MooncakeConnectorV1"]["randomPorts"]
    rows = [r for r in ports if r["owner"] == "Mooncake's RPC"]
    assert len(rows) == 1, f"engines.{version}.connectors.MooncakeConnectorV1.randomPorts: {ports}"
    row = rows[0]
    # The engine's range does not depend on the node (no per-device part, no environment that
    # moves it), so neither may the chart's.
    assert (row["perDevice"], row["baseEnv"]) == (0, ""), row
    return int(row["start"]), int(row["start"]) + int(row["size"])


def peer_module() -> ModuleType:
    """The peer's layout and pattern functions. Importing it needs no mooncake, which the peer
    only imports when it runs."""
    spec = importlib.util.spec_from_file_location("mooncake_te_peer", PEER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Peer:
    name: str
    proc: subprocess.Popen[str]
    log: Path
    lines: queue.Queue[str | None] = field(default_factory=queue.Queue)

    def receive(self, seconds: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            pytest.fail(f"{self.name}: no answer within {seconds} s\n{self.log_tail()}")
        if line is None:
            # Its stdout closed; the exit status follows shortly.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
            pytest.fail(f"{self.name}: exited ({self.proc.returncode}) without answering\n{self.log_tail()}")
        return json.loads(line)

    def ask(self, command: dict[str, Any], seconds: float = COMMAND_SECONDS) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.receive(seconds)

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def start_peer(name: str, host: str, fill: str, release: str, logs: Path) -> Peer:
    # No MC_* from the caller's environment: the engine must use its own defaults, as in the
    # chart's pods. MC_TRANSFER_TIMEOUT only bounds a stuck transfer; the minimum is 5 s
    # (transfer_engine_py.cpp TransferEnginePy()).
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_")}
    env |= {
        "PYTHONPATH": str(MOONCAKE / release),
        "LD_LIBRARY_PATH": str(MOONCAKE / "lib"),
        "MC_TRANSFER_TIMEOUT": "5",
        "PYTHONUNBUFFERED": "1",
    }
    log = logs / f"{name}.log"
    cmd = [str(PYTHON), str(PEER), "--host", host, "--fill", fill, "--deadline", str(PEER_DEADLINE_SECONDS)]
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=logs
        )
    peer = Peer(name, proc, log)
    threading.Thread(target=pump, args=(proc, peer.lines), daemon=True).start()
    return peer


def pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """The peer's protocol lines go into a queue, so that every wait on them has a timeout. None
    means its stdout closed."""
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def stop(peers: list[Peer]) -> None:
    """Closes every peer's stdin, which asks it to exit, and waits for them together: each
    engine's teardown takes about a second. A peer still running after 5 s is killed, by its
    PID through Popen."""
    for peer in peers:
        assert peer.proc.stdin is not None
        # A peer that is gone makes the close fail if a line it never read is left to flush.
        with contextlib.suppress(OSError):
            peer.proc.stdin.close()
    deadline = time.monotonic() + 5
    for peer in peers:
        try:
            peer.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            peer.proc.kill()
            peer.proc.wait(timeout=5)


def listening(pid: int) -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """The (address, port) of each TCP socket in LISTEN that the process holds. These are the
    rows of /proc/<pid>/net/tcp and tcp6 whose inode is one of the sockets in /proc/<pid>/fd."""
    inodes: set[str] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed while we list
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            columns = row.split()
            local, state, inode = columns[1], columns[3], columns[9]
            if state == LISTEN and inode in inodes:
                address, port = local.split(":")
                found.append((kernel_address(address), int(port, 16)))
    return found


def kernel_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} prints it: hex of 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def logged_ports(peer: Peer, host: str) -> tuple[int, int]:
    """The RPC port and the TCP transport's port from the peer's log. Each line appears once, and
    the RPC line names the advertised host."""
    text = peer.log.read_text(errors="replace")
    rpc = RPC_LOG.findall(text)
    tcp = TCP_LOG.findall(text)
    assert len(rpc) == 1, f"{peer.name}: expected one 'RPC using P2P handshake' line\n{peer.log_tail()}"
    # One TcpTransport line: the engine chose its TCP transport (no RDMA device, no NPU).
    assert len(tcp) == 1, f"{peer.name}: expected one 'TcpTransport: listen on port' line\n{peer.log_tail()}"
    assert rpc[0][0] == host, f"{peer.name} advertises {rpc[0][0]}, not its pod IP {host}"
    return int(rpc[0][1]), int(tcp[0])


def expected_blocks(mod: ModuleType, incoming: list[tuple[int, int]], fill: str) -> list[list[list[str]]]:
    """Each block's sha256 after the transfers. Incoming (local block, prefill block) pairs hold
    prefill's pattern; every other block keeps its fill."""
    zero = mod.digest(bytes(mod.BLOCK_BYTES))
    blocks = [
        [
            [mod.digest(mod.pattern_block(layer, kv, b)) if fill == "pattern" else zero for b in range(mod.BLOCKS)]
            for kv in (0, 1)
        ]
        for layer in range(mod.LAYERS)
    ]
    for layer in range(mod.LAYERS):
        for kv in (0, 1):
            for local, source in incoming:
                blocks[layer][kv][local] = mod.digest(mod.pattern_block(layer, kv, source))
    return blocks


def wait_for_blocks(peer: Peer, expected: list[list[list[str]]]) -> str:
    """Waits until the peer's blocks are the expected ones, and returns how long that took.
    A write that batch_transfer_sync_write reports complete can still be in flight: the TCP
    transport marks a WRITE COMPLETED once its last chunk is in the initiator's socket, and the
    target sends no acknowledgement (tcp_transport.cpp ClientSession::writeBody at v0.3.11.post1,
    Session::writeBody at v0.3.7.post2 and v0.3.9). So the target's memory is checked until it
    matches, for at most WRITE_LANDS_SECONDS. A read is complete when it returns, because the
    initiator has received the bytes itself."""
    started = time.monotonic()
    for attempt in range(1, WRITE_LANDS_POLLS + 1):
        blocks = peer.ask({"op": "digest"})["blocks"]
        if blocks == expected:
            return f"{attempt} digest(s), {time.monotonic() - started:.3f} s"
        if time.monotonic() - started > WRITE_LANDS_SECONDS:
            break
        time.sleep(0.02)
    assert blocks == expected, f"{peer.name}'s blocks, {time.monotonic() - started:.1f} s after the transfers"
    return "never"


def check_ports(peer: Peer, ready: dict[str, Any], host: str, low: int, high: int) -> dict[str, Any]:
    rpc, tcp = logged_ports(peer, host)
    assert ready["rpc_port"] == rpc, f"{peer.name}: get_rpc_port() {ready['rpc_port']}, log {rpc}"
    held = listening(peer.proc.pid)
    ports = sorted(port for _, port in held)
    # The process listens on the engine's two ports and nothing else, so no port escapes the plan.
    assert ports == sorted({rpc, tcp}) and rpc != tcp, f"{peer.name}: listens on {held}, log: rpc {rpc}, tcp {tcp}"
    outside = [port for port in ports if not low <= port <= high]
    assert not outside, f"{peer.name}: ports {outside} outside the chart's Mooncake's RPC range {low}-{high}"
    # The engine binds every address, not the advertised one, so on the host network its ports
    # are taken on all of the node's addresses.
    assert all(address.is_unspecified for address, _ in held), f"{peer.name}: {held}"
    return {"rpc": rpc, "tcp": tcp, "listening": [f"{a}:{p}" for a, p in held]}


@pytest.mark.parametrize("version", list(mooncake_releases()))
def test_transfer_engine_moves_kv_blocks_within_the_charts_ports(version: str, tmp_path: Path) -> None:
    release = mooncake_releases()[version]
    if not (MOONCAKE / ".installed").is_file() or not (MOONCAKE / release / "mooncake").is_dir():
        pytest.fail(f"Mooncake {release}'s transfer engine is not in {MOONCAKE}: run scripts/install-mooncake.sh")
    if not PYTHON.is_file():
        pytest.fail(f"{PYTHON} is missing (the wheels are cp311): apt-get install python3.11, or E2E_PYTHON=<path>")
    low, high = rpc_range(version)
    mod = peer_module()
    peers: list[Peer] = []
    started = time.monotonic()
    try:
        prefill = start_peer("prefill", PREFILL_HOST, "pattern", release, tmp_path)
        peers.append(prefill)
        decode = start_peer("decode", DECODE_HOST, "zeros", release, tmp_path)
        peers.append(decode)
        p_ready, d_ready = prefill.receive(READY_SECONDS), decode.receive(READY_SECONDS)
        assert p_ready["ready"], f"prefill: {p_ready}\n{prefill.log_tail()}"
        assert d_ready["ready"], f"decode: {d_ready}\n{decode.log_tail()}"

        read = {"op": "read", "session": p_ready["session"], "remote": p_ready["layers"], "pairs": READ_PAIRS}
        pulled = decode.ask(read)
        assert pulled.get("ok"), f"decode's batch_transfer_sync_read: {pulled}\n{decode.log_tail()}"
        write = {"op": "write", "session": d_ready["session"], "remote": d_ready["layers"], "pairs": WRITE_PAIRS}
        pushed = prefill.ask(write)
        assert pushed.get("ok"), f"prefill's batch_transfer_sync_write: {pushed}\n{prefill.log_tail()}"
        assert pulled["entries"] == mod.LAYERS * 2 * len(READ_PAIRS)
        assert pushed["entries"] == mod.LAYERS * 2 * len(WRITE_PAIRS)

        incoming = READ_PAIRS + [(d, p) for p, d in WRITE_PAIRS]
        landed_after = wait_for_blocks(decode, expected_blocks(mod, incoming, "zeros"))
        # Prefill's blocks are only read from, and they stay unchanged.
        assert prefill.ask({"op": "digest"})["blocks"] == expected_blocks(mod, [], "pattern")

        observed = {
            peer.name: check_ports(peer, ready, host, low, high)
            for peer, ready, host in ((prefill, p_ready, PREFILL_HOST), (decode, d_ready, DECODE_HOST))
        }
        # Shown by `pytest -rP`: the ports each release picked, and how long it took.
        seconds = round(time.monotonic() - started, 2)
        print(json.dumps({"version": version, "mooncake": release, "seconds": seconds, "write landed": landed_after}))
        print(json.dumps(observed))
    finally:
        stop(peers)


def test_expected_blocks_see_a_misplaced_block() -> None:
    """The digests tell blocks apart: a block copied to the wrong block id, or K to V, differs."""
    mod = peer_module()
    right = expected_blocks(mod, [(0, 5)], "zeros")
    assert right != expected_blocks(mod, [(1, 5)], "zeros")
    assert right != expected_blocks(mod, [(0, 4)], "zeros")
    assert mod.pattern_block(0, 0, 5) != mod.pattern_block(0, 1, 5) != mod.pattern_block(1, 0, 5)
    assert hashlib.sha256(bytes(mod.BLOCK_BYTES)).hexdigest() == right[0][0][1]
