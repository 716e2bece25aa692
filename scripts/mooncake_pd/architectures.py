"""Model architectures as data (architectures.yaml beside this module, package data): what the
estimate reads from a config.json per architecture, the kind of each layer, the MoE layout,
and which engine versions run the architecture on which accelerator family, each with its
source. `model` reads it for the estimate, `generate` for its support check, `docs` for the
architecture table of docs/models-and-accelerators.md."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from mooncake_pd.errors import MooncakePdError

DATA = Path(__file__).resolve().parent / "architectures.yaml"
KINDS = ("full", "sliding", "chunked", "linear")
ATTENTION = ("mha", "gqa", "mla")
STATUSES = ("supported", "experimental", "untested", "unsupported")
# What a status means to generate: a note (warning) or a refusal; supported says nothing.
WARNS = ("experimental", "untested")


class ArchitectureError(MooncakePdError):
    """architectures.yaml is incomplete or an architecture name is unknown; the message names it."""


def check(table: dict[str, Any]) -> list[str]:
    """What is wrong with the table, as `architectures.NAME.field: problem` lines."""
    problems: list[str] = []
    sources = table.get("sources") or {}
    for name, row in (table.get("architectures") or {}).items():
        where = f"architectures.{name}"
        if row.get("attention") not in ATTENTION:
            problems.append(f"{where}.attention: {row.get('attention')!r}; use one of {', '.join(ATTENTION)}")
        layers = row.get("layers") or {}
        kinds = [layers.get("all")] if "all" in layers else []
        kinds += list((layers.get("kinds") or {}).values())
        default = layers.get("default") or {}
        kinds += [default.get("kind"), default.get("others")] if default else []
        if not kinds or any(k not in KINDS for k in kinds):
            problems.append(
                f"{where}.layers: kinds {kinds}; give `all` or `default` with kinds among {', '.join(KINDS)}"
            )
        for kind, fields in (("sliding", ("window",)), ("chunked", ("chunk",)), ("linear", ("convKernel",))):
            if kind in kinds and not all(f in (row.get(kind) or {}) for f in fields):
                problems.append(f"{where}.{kind}: missing; a {kind} layer needs {', '.join(fields)}")
        indexer = row.get("indexer")
        if indexer is not None and not (
            {"head", "heads"} <= set(indexer) and ((indexer.get("cache") or {}).get("nvidia") or {}).get("all")
        ):
            problems.append(f"{where}.indexer: needs head, heads and cache.nvidia.all (vLLM's own layout)")
        variants = [row, *(row.get("variants") or {}).values()]
        for variant in variants:
            for family, versions in (variant.get("support") or {}).items():
                for version, cell in versions.items():
                    extra = sorted(set(cell) - {"status", "source", "line", "note"})
                    if extra:
                        problems.append(
                            f"{where}.support.{family}.{version}: unknown keys {extra} (quote a note with commas)"
                        )
                    if cell.get("status") not in STATUSES:
                        problems.append(f"{where}.support.{family}.{version}.status: {cell.get('status')!r}")
                    if cell.get("source") not in sources:
                        problems.append(
                            f"{where}.support.{family}.{version}.source: {cell.get('source')!r} not in sources"
                        )
    return problems


@cache
def load(path: Path = DATA) -> dict[str, Any]:
    """The whole table, checked (ArchitectureError naming every problem)."""
    table = yaml.safe_load(path.read_text())
    problems = check(table) if isinstance(table, dict) else ["(root): not a mapping"]
    if problems:
        raise ArchitectureError(f"{path} is incomplete:\n  - " + "\n  - ".join(problems))
    return table


def names() -> tuple[str, ...]:
    return tuple(load()["architectures"])


@dataclass(frozen=True)
class Support:
    """One cell of the support table: an architecture on a family at an engine version."""

    status: str
    source: str
    line: int | None = None
    note: str = ""

    def cite(self) -> str:
        """The source, as the table's `sources` names it, with its line."""
        text = load()["sources"][self.source]
        return f"{text}{f' line {self.line}' if self.line else ''}"

    @property
    def refused(self) -> bool:
        return self.status == "unsupported"


@dataclass(frozen=True)
class Architecture:
    name: str
    row: dict[str, Any]

    @property
    def attention(self) -> str:
        return str(self.row["attention"])

    @property
    def models(self) -> str:
        return str(self.row.get("models") or "")

    @property
    def moe(self) -> dict[str, Any]:
        return dict(self.row.get("moe") or {})

    def field(self, kind: str, name: str) -> str:
        """The config.json field a layer kind reads (sliding.window, linear.keyHeads, ...)."""
        return str(self.row[kind][name])

    def size(self, method: str | None) -> dict[str, Any] | None:
        """bytesPerWeight and covers of a quantization method the table sizes, else None."""
        return (self.row.get("sizes") or {}).get(method) if method else None

    def layer_kinds(self, text: dict[str, Any], layers: int) -> list[str]:
        """The kind of each of `layers` layers, from config.json's text config `text`."""
        rule = self.row["layers"]
        if "all" in rule:
            return [str(rule["all"])] * layers
        field = rule.get("field")
        listed = text.get(field) if field else None
        if isinstance(listed, list) and len(listed) == layers:
            kinds = {str(k): str(v) for k, v in rule["kinds"].items()}
            return [kinds.get(str(v), "full") for v in listed]
        default = rule["default"]
        every = int(default["every"])
        return [str(default["kind"]) if (i + 1) % every == 0 else str(default["others"]) for i in range(layers)]

    def support(self, family: str, version: str, model_type: str | None = None) -> Support | None:
        """The support cell for `family` at `version` (a model_type variant's own, where it has
        one), or None where the table records none."""
        variant = (self.row.get("variants") or {}).get(model_type or "") or {}
        for rows in (variant.get("support") or {}, self.row.get("support") or {}):
            cell = (rows.get(family) or {}).get(version)
            if cell:
                return Support(str(cell["status"]), str(cell["source"]), cell.get("line"), str(cell.get("note") or ""))
        return None

    def families(self) -> list[str]:
        return list(self.row.get("support") or {})

    def kinds(self) -> set[str]:
        """The layer kinds the architecture can have (its `layers` rule)."""
        rule = self.row["layers"]
        if "all" in rule:
            return {str(rule["all"])}
        kinds = {str(k) for k in (rule.get("kinds") or {}).values()}
        return kinds | {str(rule["default"]["kind"]), str(rule["default"]["others"])}

    def variants(self) -> list[str]:
        return list(self.row.get("variants") or {})

    def variant_models(self, model_type: str) -> str:
        return str(((self.row.get("variants") or {}).get(model_type) or {}).get("models") or "")


def get(name: str | None) -> Architecture | None:
    row = load()["architectures"].get(name or "")
    return Architecture(str(name), row) if row else None


def require(name: str) -> Architecture:
    """The architecture `name`, or ArchitectureError listing the known ones."""
    found = get(name)
    if found is None:
        raise ArchitectureError(f"--architecture {name}: not one the estimate knows; known: {', '.join(names())}")
    return found


def hybrid_kv_cache(version: str, connector: str, args: dict[str, Any] | None = None) -> bool | None:
    """Whether vLLM's hybrid KV cache manager runs under PD at `version` with `connector`: an
    explicit engine arg disable-hybrid-kv-cache-manager decides (vLLM keeps an explicit choice,
    vllm/config/vllm.py), else the table; None where the table does not record the version or
    connector."""
    explicit = (args or {}).get("disable-hybrid-kv-cache-manager")
    if isinstance(explicit, bool):
        return not explicit
    row = load()["hybridKvCache"].get(version) or {}
    value = (row.get("connectors") or {}).get(connector)
    return bool(value) if value is not None else None


def hybrid_source(version: str) -> str:
    return str((load()["hybridKvCache"].get(version) or {}).get("source") or "not recorded")


# vLLM's refusal at start of a linear-attention model without the hybrid KV cache manager.
NO_HYBRID = "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type."


def verdict(
    spec: Architecture,
    kinds: set[str],
    family: str,
    version: str,
    connector: str,
    args: dict[str, Any] | None = None,
    model_type: str | None = None,
) -> tuple[str, str]:
    """(status, reason with its source) of the architecture at `version` on `family` under PD
    with `connector`: the support table's status, unsupported where the model has linear-attention
    layers and PD turns vLLM's hybrid KV cache manager off there, or unrecorded."""
    if "linear" in kinds and hybrid_kv_cache(version, connector, args) is False:
        return (
            "unsupported",
            f"its linear-attention layers need vLLM's hybrid KV cache manager, which PD with {connector} turns off "
            f'at {version} ({hybrid_source(version)}), and vLLM then stops at start ("{NO_HYBRID}", vllm '
            "vllm/v1/core/kv_cache_utils.py unify_hybrid_kv_cache_specs)",
        )
    cell = spec.support(family, version, model_type)
    if cell is None:
        return "unrecorded", f"architectures.yaml records no support at {version} on {family}; check it"
    note = f"{cell.note}; " if cell.note else ""
    return cell.status, f"{note}{cell.cite()}"
