"""A did-you-mean for a misspelt values key: helm's schema refusal names the key it does not
know and where; the nearest key the schema has there is added to the line. helm 3 (gojsonschema)
and helm 4 (santhosh-tekuri/jsonschema) word the refusal differently; both are read."""

from __future__ import annotations

import difflib
import json
import re
from functools import cache
from typing import Any

from mooncake_pd import paths

# helm 3: "- decode: Additional property replica is not allowed" ("(root)" at the top).
_HELM3 = re.compile(r"^(\s*- (\S+): Additional property (\S+) is not allowed)(.*)$")
# helm 4: "- at '/decode': additional properties 'replica' not allowed" (one or more names).
_HELM4 = re.compile(r"^(\s*- at '([^']*)': additional properties ((?:'[^']+'(?:, )?)+) not allowed)(.*)$")


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((paths.CHART / "values.schema.json").read_text())
    return schema


def _node(where: list[str]) -> dict[str, Any]:
    """The schema of the values at a path of keys (a list item's for a number), or {}."""
    node = _schema()
    for key in where:
        node = (node.get("items") if key.isdigit() else (node.get("properties") or {}).get(key)) or {}
    return node


def known_keys(where: list[str]) -> list[str]:
    """The keys the schema has at a path of keys, or []."""
    return list(_node(where).get("properties") or {})


def suggestion(where: list[str], key: str) -> str:
    """The nearest key the schema has there; in a map of named keys (vLLM flags), the key with
    dashes for underscores where that is a valid name (vLLM accepts both, the chart dashes)."""
    node = _node(where)
    dashed = key.replace("_", "-")
    if dashed != key and any(re.fullmatch(p, dashed) for p in node.get("patternProperties") or {}):
        return dashed
    close = difflib.get_close_matches(key, known_keys(where), n=1, cutoff=0.6)
    return close[0] if close else ""


def with_suggestions(message: str) -> str:
    """helm's refusal with "(did you mean <key>?)" after each unknown key it names."""
    lines = []
    for line in message.splitlines():
        if match := _HELM3.match(line):
            head, where, key, rest = match.groups()
            path = [] if where == "(root)" else where.split(".")
            hint = suggestion(path, key)
            line = f"{head} (did you mean {'.'.join([*path, hint])}?){rest}" if hint else line
        elif match := _HELM4.match(line):
            head, pointer, names, rest = match.groups()
            path = [p for p in pointer.split("/") if p]
            hints = [h for h in (suggestion(path, n.strip("'")) for n in names.split(", ")) if h]
            if hints:
                line = f"{head} (did you mean {', '.join('.'.join([*path, h]) for h in hints)}?){rest}"
        lines.append(line)
    return "\n".join(lines)
