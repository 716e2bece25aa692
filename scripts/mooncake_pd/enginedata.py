"""What an engine version's own packages say, as the data under chart/files/engines/<version>/:
pure functions over the source files of the vllm and vllm-ascend wheels (read, never imported:
vLLM-Ascend needs an NPU to import) and over what engine_probe.py prints from vLLM's own parsers.

`mooncake-pd engines generate` (commands/engines.py) runs them on the wheels PyPI serves for a
version; tests/test_engine_data.py runs it again and fails where the checked-in data differ.
"""

from __future__ import annotations

import ast
import hashlib
import json
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mooncake_pd.errors import FAILED, MooncakePdError

# The metric families the chart reads or lets autoscaling.<role>.metrics name (the gauges and
# counters Kthena's autoscaler scales on, and the latency histograms the dashboard and alerts
# read). Each version's metrics.txt lists those of them its vLLM registers, with their type.
AUTOSCALING_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:external_prefix_cache_hits",
)
# Where vLLM registers its engine metrics (vllm/v1/metrics/loggers.py at 0.13 through 0.33).
METRICS_SOURCE = "vllm/v1/metrics/loggers.py"
_METRIC_KINDS = {"gauge": "gauge", "counter": "counter", "histogram": "histogram"}


class EngineDataError(MooncakePdError):
    """A wheel could not be fetched or lacks what the generator reads, or the checked-in data
    and the packages disagree (exit 1: the repository's files are wrong, not the input)."""

    exit_code = FAILED


@dataclass(frozen=True)
class Wheel:
    """One wheel file: its name, digest and Python sources (path -> text)."""

    name: str
    sha256: str
    sources: Mapping[str, str]


def read_wheel(path: Path, prefix: str) -> Wheel:
    """The .py files under `prefix` (e.g. 'vllm_ascend/') of a wheel, and the wheel's sha256."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with zipfile.ZipFile(path) as archive:
        sources = {
            info.filename: archive.read(info).decode("utf-8-sig", "replace")
            for info in archive.infolist()
            if info.filename.startswith(prefix) and info.filename.endswith(".py")
        }
    if not sources:
        raise EngineDataError(f"{path.name}: holds no {prefix}*.py; is it the right wheel?")
    return Wheel(path.name, digest, sources)


def trees(wheel: Wheel) -> tuple[dict[str, ast.Module], list[str]]:
    """Each source parsed by this interpreter, and the files it cannot parse (syntax newer than
    its Python: the lists the generator writes name them, so nothing is dropped unseen)."""
    parsed, failed = {}, []
    for path in sorted(wheel.sources):
        try:
            parsed[path] = ast.parse(wheel.sources[path])
        except SyntaxError:
            failed.append(path)
    return parsed, failed


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def registered_connectors(wheel: Wheel) -> dict[str, str]:
    """The connectors vLLM-Ascend registers with vLLM's KVConnectorFactory: name -> module:Class
    (KVConnectorFactory.register_connector(name, module, class), wherever the wheel calls it)."""
    found: dict[str, str] = {}
    for tree in trees(wheel)[0].values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) == "register_connector" and len(node.args) == 3:
                name, module, cls = (_string(a) for a in node.args)
                if name and module and cls:
                    found[name] = f"{module}:{cls}"
    if not found:
        raise EngineDataError(f"{wheel.name}: no KVConnectorFactory.register_connector call found")
    return dict(sorted(found.items()))


def additional_config_keys(wheel: Wheel) -> list[str]:
    """The top-level --additional-config keys vLLM-Ascend reads: every literal key of a .get()
    or [] on a name or attribute called additional_config, or handed with it to a helper
    (vLLM-Ascend ignores any other key silently)."""
    keys: set[str] = set()

    def named(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "additional_config") or (
            isinstance(node, ast.Attribute) and node.attr == "additional_config"
        )

    for tree in trees(wheel)[0].values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                key = _string(node.args[0]) if node.args else None
                if key and named(node.func.value):
                    keys.add(key)
            elif isinstance(node, ast.Subscript) and named(node.value):
                key = _string(node.slice)
                if key:
                    keys.add(key)
            if isinstance(node, ast.Call):
                # A helper handed the dict and a literal key: _get_config_value(additional_config, "k", ...).
                for first, second in zip(node.args, node.args[1:], strict=False):
                    key = _string(second)
                    if key and named(first):
                        keys.add(key)
    return sorted(keys)


def registered_metrics(wheel: Wheel) -> dict[str, str]:
    """The metric families vLLM's loggers register (name as /metrics prints it -> type):
    calls of _gauge_cls, _counter_cls or _histogram_cls with a literal name="vllm:..."; a
    counter's samples end in _total, as prometheus_client prints them."""
    text = wheel.sources.get(METRICS_SOURCE)
    if text is None:
        raise EngineDataError(f"{wheel.name}: has no {METRICS_SOURCE}")
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        kind = next((k for k in _METRIC_KINDS if _call_name(node).strip("_").startswith(k)), None)
        name = next((_string(k.value) for k in node.keywords if k.arg == "name"), None)
        if kind and name and name.startswith("vllm:"):
            found[name] = kind
    return found


def metrics_text(registered: Mapping[str, str], vllm: str, wheel: str) -> str:
    """metrics.txt: the AUTOSCALING_METRICS this vLLM registers, as `name type` lines."""
    lines = [
        f"# vLLM {vllm} metric families the chart reads or may autoscale on: name and Prometheus type as",
        f"# /metrics prints them (counters carry _total). Generated from {METRICS_SOURCE} of {wheel}",
        "# by `mooncake-pd engines generate`; autoscaling.<role>.metrics are checked against it at render.",
    ]
    for name in AUTOSCALING_METRICS:
        kind = registered.get(name)
        if kind:
            lines.append(f"{name}{'_total' if kind == 'counter' else ''} {kind}")
    return "\n".join(lines) + "\n"


def source_mentions(wheel: Wheel, names: Iterable[str]) -> dict[str, bool]:
    """Whether each name (a metric, an env variable) occurs in the wheel's sources."""
    return {name: any(name in text for text in wheel.sources.values()) for name in names}


def options_json(vllm: str, command: str, flags: list[dict[str, Any]]) -> str:
    """serve-flags.json / bench-serve-flags.json: the format mooncake_pd.vllmflags reads."""
    return json.dumps({"vllm": vllm, "command": command, "flags": flags}, indent=1) + "\n"


def kv_transfer_json(vllm: str, config: Mapping[str, Any]) -> str:
    return json.dumps({"vllm": vllm, **config}, indent=1) + "\n"


def ascend_json(version: str, wheel: Wheel) -> str:
    """vllm-ascend.json: registered connectors, --additional-config keys, and the files this
    interpreter could not read (none expected)."""
    data = {
        "vllmAscend": version,
        "connectors": registered_connectors(wheel),
        "additionalConfigKeys": additional_config_keys(wheel),
        "unparsed": trees(wheel)[1],
    }
    return json.dumps(data, indent=1) + "\n"
