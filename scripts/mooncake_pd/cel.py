"""Evaluate a CRD's CEL rules (`x-kubernetes-validations`) against an object, offline.

A JSON-schema check skips these rules; the API server runs them. This walks the version's
openAPIV3Schema alongside the object and, at every schema node whose value exists, evaluates each
rule with `self` bound to that value (Kubernetes' semantics, apiextensions-apiserver
pkg/apiserver/schema/cel), using cel-python (`celpy`).

Transition rules (those that name `oldSelf`) run only on an update, against the old object's
value at the same place: without `old` they are skipped, as on a create; with it, they run
where the old value exists (reached through object fields, map keys and list-type=map items, the
places Kubernetes correlates). Rules that call a function cel-python lacks (Kubernetes' own
libraries: isSorted, quantity, url, ip, format, ...) raise CelUnsupported, even where
short-circuiting would not reach the call: such a rule is never passed silently.

The Kthena CRDs' rules use only has(), size(), all(), exists_one(), `!`, `&&`, `||`, `==`,
`!=`, `>=`, `>` and, in transition rules, oldSelf.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from mooncake_pd.errors import FAILED, MooncakePdError

# Functions and macros cel-python implements (celpy.evaluation.base_functions plus the
# macros); a call to anything else is refused before evaluation.
SUPPORTED = frozenset(
    {
        "has",
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "type",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "bool",
        "duration",
        "timestamp",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getMonth",
        "getSeconds",
    }
)
_CALLS = {"ident_arg": 0, "dot_ident_arg": 0, "member_dot_arg": 1}


class CelError(MooncakePdError):
    """A CRD or object this module cannot work with (validate reports it as an error of the
    object, so a render with it exits 1)."""

    exit_code = FAILED


class CelUnsupported(CelError):
    """A rule that uses a function cel-python does not implement."""


@dataclass(frozen=True)
class Rule:
    """One x-kubernetes-validations entry and where it sits (a path with `*` for map values
    and `[]` for list items)."""

    path: str
    rule: str
    message: str | None

    @property
    def transition(self) -> bool:
        return "oldSelf" in _identifiers(self.rule)


def schema_for(crd: Mapping[str, Any], api_version: str | None = None) -> dict[str, Any]:
    """The openAPIV3Schema of the CRD version named by apiVersion (group/version), or of the
    storage version."""
    versions = (crd.get("spec") or {}).get("versions") or []
    group = (crd.get("spec") or {}).get("group")
    for v in versions:
        if (api_version is None and v.get("storage")) or api_version == f"{group}/{v.get('name')}":
            return v["schema"]["openAPIV3Schema"]
    raise CelError(f"the CRD {crd.get('metadata', {}).get('name')} has no version {api_version or '(storage)'}")


def rules(schema: Mapping[str, Any], path: str = "") -> Iterator[Rule]:
    """Every rule in the schema, outermost first."""
    for entry in schema.get("x-kubernetes-validations") or []:
        yield Rule(path or "<root>", entry["rule"], entry.get("message"))
    for name, sub in (schema.get("properties") or {}).items():
        yield from rules(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from rules(schema["additionalProperties"], f"{path}[*]")
    if isinstance(schema.get("items"), dict):
        yield from rules(schema["items"], f"{path}[]")


def _identifiers(expr: str) -> set[str]:
    tree = _compile(expr)
    return {str(t.children[0]) for t in tree.iter_subtrees() if t.data == "ident" and t.children}


def _functions(expr: str) -> set[str]:
    tree = _compile(expr)
    return {str(t.children[_CALLS[t.data]]) for t in tree.iter_subtrees() if t.data in _CALLS}


def _compile(expr: str) -> Any:
    try:
        return celpy.Environment().compile(expr)
    except celpy.CELParseError as e:
        raise CelError(f"CEL rule {expr!r} does not parse: {str(e).splitlines()[0]}") from None


def check_supported(rule: str) -> None:
    """Raise CelUnsupported when the rule calls a function this evaluator lacks."""
    missing = sorted(_functions(rule) - SUPPORTED)
    if missing:
        raise CelUnsupported(f"CEL rule {rule!r} uses {', '.join(missing)}, which this evaluator does not implement")


def evaluate(rule: str, value: Any, old: Any = None) -> bool:
    """The rule's result with self = value (and oldSelf = old); raises CelError when it does
    not evaluate to a bool (a missing field, a type error), as the API server reports it."""
    check_supported(rule)
    env = celpy.Environment()
    activation = {"self": celpy.json_to_cel(_plain(value))}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(_plain(old))
    try:
        result = env.program(env.compile(rule)).evaluate(activation)
    except celpy.CELEvalError as e:
        raise CelError(_short(e)) from None
    if not isinstance(result, celtypes.BoolType):
        raise CelError(f"evaluates to {type(result).__name__}, not a bool")
    return bool(result)


def _short(e: celpy.CELEvalError) -> str:
    """cel-python's messages nest and can dump the whole activation: name the missing key or
    function the way the API server does, else keep the first line."""
    text = repr(e)
    missing = dict.fromkeys(re.findall(r"no such member in mapping: \\*'([^'\\]+)", text))
    if missing:
        return f"no such key: {', '.join(missing)}"
    undeclared = re.findall(r"undeclared reference to \\*'([^'\\]+)", text)
    if undeclared:
        return f"undeclared reference to {undeclared[0]}"
    return str(e.args[0] if e.args else e).splitlines()[0][:200]


def _plain(value: Any) -> Any:
    """YAML values as JSON types (timestamps and other YAML-only types become strings)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def errors(crd: Mapping[str, Any], obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """The CRD's CEL rules that `obj` breaks, as "<path>: <message>" lines (the rule itself
    when it has no message), for the CRD version of obj's apiVersion. `old` is the object
    before an update: it turns the transition rules on."""
    schema = schema_for(crd, obj.get("apiVersion"))
    return list(_walk(schema, obj, old, "", old is not None))


def _walk(schema: Mapping[str, Any], value: Any, old: Any, path: str, correlated: bool) -> Iterator[str]:
    where = path or "<root>"
    for entry in schema.get("x-kubernetes-validations") or []:
        rule = entry["rule"]
        is_transition = "oldSelf" in _identifiers(rule)
        if is_transition and not (correlated and old is not None):
            check_supported(rule)
            continue
        try:
            ok = evaluate(rule, value, old if is_transition else None)
        except CelUnsupported:
            raise
        except CelError as e:
            yield f"{where}: {e} evaluating rule: {rule}"
            continue
        if not ok:
            yield f"{where}: {entry.get('message') or f'failed rule: {rule}'}"
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, Mapping) else {}
        for key, sub in value.items():
            child = props.get(key) if props else (extra if isinstance(extra, dict) else None)
            if child is None:
                continue
            sub_path = f"{path}.{key}" if props else f"{path}[{key}]"
            yield from _walk(child, sub, old_map.get(key), sub_path.lstrip("."), correlated and key in old_map)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys") or []
        by_key = {}
        if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            by_key = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, Mapping)}
        for i, item in enumerate(value):
            prev = by_key.get(tuple(item.get(k) for k in keys)) if by_key and isinstance(item, Mapping) else None
            yield from _walk(schema["items"], item, prev, f"{path}[{i}]", correlated and prev is not None)
