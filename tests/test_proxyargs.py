"""support.proxyargs reads the PD proxy's command line as the vendored proxy's own parse_args does,
and refuses what the tests must not let through."""

from __future__ import annotations

import argparse
import ast
import sys
from typing import Any

import pytest

from conftest import Rendered
from support.localpods import VENDORED_PROXY
from support.proxyargs import ProxyArgs, parse_proxy_args

ARGS = [
    "--host",
    "0.0.0.0",
    "--port",
    "8080",
    "--prefiller-hosts",
    "p-0.default.svc",
    "p-1.default.svc",
    "--prefiller-ports",
    "7100",
    "7100",
    "--decoder-hosts",
    "d-0.default.svc",
    "--decoder-ports",
    "7101",
    "--max-retries",
    "5",
    "--retry-delay",
    "0.5",
]


def vendored_parse_args(args: list[str]) -> argparse.Namespace:
    """The proxy's own parse_args, taken from its source (the module itself needs fastapi, httpx
    and vLLM): the same options, types, defaults and checks as the proxy that runs."""
    tree = ast.parse(VENDORED_PROXY.read_text())
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
    namespace: dict[str, Any] = {"argparse": argparse}
    exec(compile(ast.Module([function], type_ignores=[]), str(VENDORED_PROXY), "exec"), namespace)
    saved = sys.argv
    try:
        sys.argv = ["proxy", *args]
        return namespace["parse_args"]()
    finally:
        sys.argv = saved


def test_the_fields_and_the_instances():
    proxy = parse_proxy_args(ARGS)
    assert proxy == ProxyArgs(
        host="0.0.0.0",
        port=8080,
        prefiller_hosts=("p-0.default.svc", "p-1.default.svc"),
        prefiller_ports=(7100, 7100),
        decoder_hosts=("d-0.default.svc",),
        decoder_ports=(7101,),
        max_retries=5,
        retry_delay=0.5,
        max_waiting_retries=3,
        waiting_retry_interval=10,
    )
    assert proxy.prefillers == [("p-0.default.svc", 7100), ("p-1.default.svc", 7100)]
    assert proxy.decoders == [("d-0.default.svc", 7101)]


def assert_read_alike(args: list[str]) -> None:
    theirs = vendored_parse_args(args)
    ours = parse_proxy_args(args)
    for name in ProxyArgs.__dataclass_fields__:
        value = getattr(theirs, name)
        assert getattr(ours, name) == (tuple(value) if isinstance(value, list) else value), name
    assert ours.prefillers == theirs.prefiller_instances and ours.decoders == theirs.decoder_instances


@pytest.mark.parametrize("args", [ARGS, ARGS[:-4]], ids=["retries", "defaults"])
def test_it_reads_what_the_vendored_proxy_reads(args: list[str]):
    assert_read_alike(args)


def test_it_reads_the_rendered_proxy_args_as_the_proxy_does(defaults: Rendered):
    args = defaults.one("Deployment", "deepseek-pd-proxy")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert_read_alike(args)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prefiller-hosts", "p", "--prefiller-ports", "1"], "required: --decoder-hosts, --decoder-ports"),
        ([*ARGS, "--prefiller-ports", "1", "2", "3"], "Number of prefiller hosts must match"),
        ([*ARGS, "--decoder-hosts", "a", "b"], "Number of decoder hosts must match"),
        ([*ARGS, "--decoder-port", "1"], "unrecognized arguments: --decoder-port 1"),
        ([*ARGS, "--port", "http"], "invalid int value: 'http'"),
        ([*ARGS, "extra"], "unrecognized arguments: extra"),
    ],
)
def test_it_refuses(args: list[str], message: str):
    with pytest.raises(ValueError, match=message):
        parse_proxy_args(args)
