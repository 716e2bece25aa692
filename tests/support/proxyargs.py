"""The PD proxy's command line, read as the proxy reads it: the options, types and checks of
`parse_args` in vLLM-Ascend v0.13.0's example proxy (chart/files/vendor/vllm-ascend-v0.13.0/
load_balance_proxy_server_example.py; tests/test_proxyargs.py compares the two). Stricter in two
ways, so that a test sees what the proxy would paper over: the four endpoint lists are required
(the proxy's defaults, localhost:8001 and :8002, would hide a list the chart left out), and an
option must be spelled out (argparse would take an abbreviation)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class ProxyArgs:
    host: str
    port: int
    prefiller_hosts: tuple[str, ...]
    prefiller_ports: tuple[int, ...]
    decoder_hosts: tuple[str, ...]
    decoder_ports: tuple[int, ...]
    max_retries: int
    retry_delay: float
    max_waiting_retries: int
    waiting_retry_interval: float

    @property
    def prefillers(self) -> list[tuple[str, int]]:
        """(host, port) of each prefill instance, in order (the proxy's prefiller_instances)."""
        return list(zip(self.prefiller_hosts, self.prefiller_ports, strict=True))

    @property
    def decoders(self) -> list[tuple[str, int]]:
        """(host, port) of each decode instance, in order (the proxy's decoder_instances)."""
        return list(zip(self.decoder_hosts, self.decoder_ports, strict=True))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ValueError(f"the proxy would refuse its arguments: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="load_balance_proxy_server_example.py", allow_abbrev=False, add_help=False)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--host", type=str, default="localhost")
    parser.add_argument("--prefiller-hosts", type=str, nargs="+", required=True)
    parser.add_argument("--prefiller-ports", type=int, nargs="+", required=True)
    parser.add_argument("--decoder-hosts", type=str, nargs="+", required=True)
    parser.add_argument("--decoder-ports", type=int, nargs="+", required=True)
    parser.add_argument("--max-retries", type=int, default=3)
    parser.add_argument("--retry-delay", type=float, default=0.001)
    parser.add_argument("--max-waiting-retries", type=int, default=3)
    parser.add_argument("--waiting-retry-interval", type=float, default=10)
    return parser


def parse_proxy_args(args: Sequence[str]) -> ProxyArgs:
    """The proxy's arguments (the container's `args`, without its command); ValueError where the
    proxy would stop, or a list is missing, or the host and port lists differ in length."""
    ns = _parser().parse_args(list(args))
    if len(ns.prefiller_hosts) != len(ns.prefiller_ports):
        raise ValueError("Number of prefiller hosts must match number of prefiller ports")
    if len(ns.decoder_hosts) != len(ns.decoder_ports):
        raise ValueError("Number of decoder hosts must match number of decoder ports")
    return ProxyArgs(
        host=ns.host,
        port=ns.port,
        prefiller_hosts=tuple(ns.prefiller_hosts),
        prefiller_ports=tuple(ns.prefiller_ports),
        decoder_hosts=tuple(ns.decoder_hosts),
        decoder_ports=tuple(ns.decoder_ports),
        max_retries=ns.max_retries,
        retry_delay=ns.retry_delay,
        max_waiting_retries=ns.max_waiting_retries,
        waiting_retry_interval=ns.waiting_retry_interval,
    )
