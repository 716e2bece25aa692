"""Parse rendered manifests and pick objects out of them."""

from __future__ import annotations

from typing import Any

import yaml

Manifest = dict[str, Any]


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's parser when PyYAML has it: a render is parsed in every
    test), reading a plain `=` as the string Kubernetes' YAML reads, not as YAML 1.1's obscure
    "value" tag."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(text: str) -> Any:
    """One YAML document (a CRD, a values file)."""
    return yaml.load(text, Loader=_Loader)


def load_all(text: str) -> list[Any]:
    """Every YAML document of a stream, empty ones as None."""
    return list(yaml.load_all(text, Loader=_Loader))


def parse(text: str) -> list[Manifest]:
    """Every non-empty YAML document of a `helm template` output."""
    return [doc for doc in load_all(text) if doc]


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    return [o for o in objects if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(objects, kind, name)
    if len(found) != 1:
        raise LookupError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def role(modelserving: Manifest, name: str) -> dict[str, Any]:
    """A role of a ModelServing by its name."""
    for r in modelserving["spec"]["template"]["roles"]:
        if r["name"] == name:
            return r
    raise LookupError(f"ModelServing has no role {name!r}")


def ident(obj: Manifest) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
