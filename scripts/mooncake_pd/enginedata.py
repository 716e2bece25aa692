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


# The function `vllm serve` runs on its parsed arguments before it loads anything
# (vllm/entrypoints/{openai,launchers,common}/cli_args.py, by version): its `if ...: raise` checks
# of one flag against another are what serve_checks reads.
SERVE_CHECKS_FUNCTION = "validate_parsed_serve_args"
_COMPARISONS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


def _arg_dest(node: ast.AST) -> str | None:
    """The dest an expression reads from the parsed arguments: args.X or getattr(args, "X", d)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args":
        return node.attr
    getattr_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
    if getattr_call and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == "args":  # type: ignore[attr-defined]
        return _string(node.args[1])  # type: ignore[attr-defined]
    return None


def _conditions(test: ast.AST) -> list[dict[str, Any]] | None:
    """A check's condition as a list of {dest, test[, value]} that must all hold, or None where
    it is not of the shapes read: args.X (test "true"), not args.X ("false"), args.X <op> a
    number or string (lt, le, gt, ge, eq, ne), and `and` of those."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        parts = [_conditions(v) for v in test.values]
        return None if any(p is None for p in parts) else [c for p in parts for c in p or []]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        dest = _arg_dest(test.operand)
        return [{"dest": dest, "test": "false"}] if dest else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARISONS:
        dest = _arg_dest(test.left)
        right = test.comparators[0]
        if dest and isinstance(right, ast.Constant) and isinstance(right.value, (int, float, str)):
            return [{"dest": dest, "test": _COMPARISONS[type(test.ops[0])], "value": right.value}]
        return None
    dest = _arg_dest(test)
    return [{"dest": dest, "test": "true"}] if dest else None


def _message(node: ast.Raise) -> str:
    """A raise's message: its literal text, or its source where it is built."""
    exc = node.exc
    if isinstance(exc, ast.Call) and exc.args:
        text = _string(exc.args[0])
        if text is None and isinstance(exc.args[0], ast.JoinedStr):
            text = "".join(_string(v) or "{...}" for v in exc.args[0].values)
        return text if text is not None else ast.unparse(exc.args[0])
    return ast.unparse(exc) if exc else ""


def serve_checks(wheel: Wheel) -> dict[str, Any]:
    """The checks of validate_parsed_serve_args in a vllm wheel: where it is, each `if <flags>:
    raise` it makes ({when: [{dest, test[, value]}], error, message, line}), and each other
    statement it runs that these data do not hold (a call of another validator, a condition of
    another shape), by line and source, so that nothing is dropped unseen. The guard that
    returns for other subcommands, docstrings and warnings are not checks."""
    found = [
        (path, node)
        for path, tree in trees(wheel)[0].items()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == SERVE_CHECKS_FUNCTION
    ]
    if len(found) != 1:
        raise EngineDataError(f"{wheel.name}: {len(found)} definitions of {SERVE_CHECKS_FUNCTION}, expected one")
    path, function = found[0]
    checks, unread = [], []
    for statement in function.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        if isinstance(statement, ast.If) and all(isinstance(s, ast.Return) for s in statement.body):
            continue  # another subcommand's arguments are not checked
        if isinstance(statement, ast.If) and all(_is_warning(s) for s in statement.body):
            continue  # a warning refuses nothing
        check = _check(statement) if isinstance(statement, ast.If) else None
        if check is not None:
            checks.append(check)
        else:
            unread.append(f"line {statement.lineno}: {ast.unparse(statement).splitlines()[0]}")
    return {"source": f"{path} {SERVE_CHECKS_FUNCTION}", "checks": checks, "unread": unread}


def _check(statement: ast.If) -> dict[str, Any] | None:
    """`if <condition of the shapes read>: raise E("message")` (no else) as a check, else None."""
    first = statement.body[0]
    when = _conditions(statement.test)
    if not isinstance(first, ast.Raise) or when is None or statement.orelse:
        return None
    error = first.exc.func if isinstance(first.exc, ast.Call) else first.exc
    name = error.id if isinstance(error, ast.Name) else (ast.unparse(error) if error else "")
    return {"when": when, "error": name, "message": _message(first), "line": statement.lineno}


def _is_warning(statement: ast.stmt) -> bool:
    """logger.warning(...) and the like: a statement that only logs."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and isinstance(statement.value.func, ast.Attribute)
        and statement.value.func.attr in ("warning", "warning_once", "info", "debug")
    )


def serve_checks_json(
    vllm: str, read: Mapping[str, Any], serve: list[dict[str, Any]], defaults: Mapping[str, Any]
) -> str:
    """serve-checks.json: serve_checks' checks with each dest as the option a values file sets
    (its first long spelling without "--"; null where `vllm serve` has no such option) and the
    default vLLM's parser gives each dest they read (what an unset flag holds)."""
    options = {
        row["dest"]: next(o for o in row["options"] if o.startswith("--"))[2:] for row in serve if row["options"]
    }
    checks = []
    for check in read["checks"]:
        when = [{"flag": options.get(c["dest"]), **c} for c in check["when"]]
        checks.append({**check, "when": when})
    dests = sorted({c["dest"] for check in read["checks"] for c in check["when"]})
    data = {
        "vllm": vllm,
        "source": read["source"],
        "checks": checks,
        "defaults": {d: defaults.get(d) for d in dests},
        "unread": read["unread"],
    }
    return json.dumps(data, indent=1) + "\n"


def config_keys_json(vllm: str, keys: Mapping[str, Any]) -> str:
    """config-keys.json: per JSON option, its config class's keys (engine_probe.config_keys)."""
    return json.dumps({"vllm": vllm, "options": keys}, indent=1) + "\n"


def registered_names_json(vllm: str, names: Mapping[str, list[str]]) -> str:
    """registered-names.json: the names vLLM's registries hold (engine_probe.registered)."""
    return json.dumps({"vllm": vllm, **names}, indent=1) + "\n"
