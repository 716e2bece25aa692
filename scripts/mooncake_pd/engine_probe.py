"""Read one vLLM version's own argument parsers and KVTransferConfig, and print them as JSON.

Runs inside a scratch environment that imports that vLLM (`mooncake-pd engines generate`
starts it with the vLLM of the version first on sys.path), so it imports nothing but the
standard library and vLLM itself; the JSON it prints is what chart/files/engines/<version>/
holds. `python engine_probe.py` prints {"vllm": ..., "serve": [...], "benchServe": [...],
"kvTransferConfig": {...}}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any


def kind(action: argparse.Action) -> str:
    """bool: takes no value; list: one or more values; value: exactly one."""
    if action.nargs == 0:
        return "bool"
    if action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1):
        return "list"
    return "value"


def plain(value: Any) -> Any:
    """A default as JSON can hold it (the parser's own objects as their text)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return str(value)


def choices(action: argparse.Action) -> list[str] | None:
    """The values the parser allows, as text (the chart compares the values a user writes, which
    reach vLLM as text); a set's in sorted order, which its iteration does not keep between runs."""
    if not action.choices:
        return None
    found = [str(c) for c in action.choices]
    return sorted(found) if isinstance(action.choices, (set, frozenset)) else found


def flags(parser: argparse.ArgumentParser, defaults: bool) -> list[dict[str, Any]]:
    """Every option of a parser, in the parser's order."""
    found = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        row: dict[str, Any] = {
            "options": list(action.option_strings),
            "dest": action.dest,
            "kind": kind(action),
            "choices": choices(action),
        }
        if defaults:
            row["default"] = plain(action.default)
        found.append(row)
    return found


def serve_parser() -> argparse.ArgumentParser:
    """`vllm serve`'s parser as the vllm command builds it (ServeSubcommand.subparser_init)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    subparsers = FlexibleArgumentParser(prog="vllm").add_subparsers()
    return ServeSubcommand().subparser_init(subparsers)


def bench_serve_parser() -> argparse.ArgumentParser:
    """`vllm bench serve`'s options (vllm.benchmarks.serve.add_cli_args, datasets included)."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    return parser


def kv_transfer_config() -> dict[str, Any]:
    """KVTransferConfig's fields with their defaults, and whether it refuses other keys."""
    from vllm.config import KVTransferConfig

    fields = {}
    for field in dataclasses.fields(KVTransferConfig):
        if field.default is not dataclasses.MISSING:
            default = plain(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = "(platform's)" if field.name == "kv_buffer_device" else plain(field.default_factory())
        else:
            default = None
        fields[field.name] = {"default": default}
    config = getattr(KVTransferConfig, "__pydantic_config__", {}) or {}
    return {"fields": fields, "extra": str(config.get("extra") or "ignore")}


def pin_cpu_platform() -> None:
    """vLLM picks its platform when first asked; on this machine (no GPU, the CUDA wheel) it finds
    none and refuses to build configs. The parsers and KVTransferConfig are the same on every
    platform but for a few platform defaults, so the CPU platform stands in."""
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()


def main() -> int:
    import vllm

    pin_cpu_platform()

    bench = flags(bench_serve_parser(), defaults=True)
    # A default made afresh on each start (a request-id prefix with a random part) is not data.
    again = {row["dest"]: row["default"] for row in flags(bench_serve_parser(), defaults=True)}
    for row in bench:
        if again[row["dest"]] != row["default"]:
            row["default"] = "(differs on every start)"
    result = {
        "vllm": vllm.__version__,
        "serve": flags(serve_parser(), defaults=False),
        "benchServe": bench,
        "kvTransferConfig": kv_transfer_config(),
    }
    json.dump(result, sys.stdout, indent=1, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
