"""Read one vLLM version's own argument parsers and KVTransferConfig, and print them as JSON.

Runs inside a scratch environment that imports that vLLM (`mooncake-pd engines generate`
starts it with the vLLM of the version first on sys.path), so it imports nothing but the
standard library and vLLM itself; the JSON it prints is what chart/files/engines/<version>/
holds. `python engine_probe.py` prints {"vllm": ..., "serve": [...], "benchServe": [...],
"kvTransferConfig": {...}, "configKeys": {...}, "registered": {...}, "serveDefaults": {...}};
a serve option whose vLLM config field declares numeric bounds (pydantic `Field(gt=0, le=1)`,
annotated_types `Gt`/`Ge`/`Lt`/`Le`) carries them as "bounds"; configKeys are the keys of each
JSON option whose config field is a config class (--compilation-config: CompilationConfig's
fields), registered the names vLLM's registries hold (reasoning and tool-call parsers, attention
backends), serveDefaults each serve option's default (dest -> value).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable
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


# The keyword under which a config field's kwargs name their field, on their way from vLLM's
# get_kwargs(ConfigClass) to add_argument (record_sources): popped again before argparse sees it.
SOURCE = "_mooncake_pd_source"
BOUND_NAMES = ("gt", "ge", "lt", "le")


def record_sources() -> None:
    """Make every option vLLM builds from a config field remember that field: each module's
    get_kwargs (vllm.engine.arg_utils.get_kwargs, bound by name where it is imported) returns the
    kwargs with SOURCE = (class, field) added, and add_argument keeps it on the action. The flag
    names do not always match the field (--kv-cache-dtype is CacheConfig.cache_dtype), so the
    parser's own calls say which field an option sets."""
    import vllm.engine.arg_utils as arg_utils

    original = arg_utils.get_kwargs

    def get_kwargs(cls: Any) -> dict[str, dict[str, Any]]:
        found = original(cls)
        for name, kwargs in found.items():
            kwargs[SOURCE] = (cls, name)
        return found

    for module in list(sys.modules.values()):
        if getattr(module, "get_kwargs", None) is original:
            module.get_kwargs = get_kwargs  # type: ignore[attr-defined]
    keep_sources()


def keep_sources() -> Callable[..., argparse.Action]:
    """argparse's add_argument, from now on, takes SOURCE out of its kwargs and keeps it on the
    action it makes; returns the add_argument it replaced (to put back)."""
    add_argument = argparse._ActionsContainer.add_argument

    def keeping_source(self: Any, *args: Any, **kwargs: Any) -> argparse.Action:
        source = kwargs.pop(SOURCE, None)
        action = add_argument(self, *args, **kwargs)
        if source is not None:
            setattr(action, SOURCE, source)
        return action

    argparse._ActionsContainer.add_argument = keeping_source  # type: ignore[method-assign]
    return add_argument


def constraints(metadata: Any) -> dict[str, Any]:
    """gt/ge/lt/le of annotated_types constraints in a list of field metadata (Interval too)."""
    found: dict[str, Any] = {}
    for item in metadata or ():
        for name in BOUND_NAMES:
            value = getattr(item, name, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[name] = plain(value)
    return found


def field_bounds(cls: Any, name: str) -> dict[str, Any]:
    """The numeric bounds a pydantic dataclass declares on one field: the field's own metadata
    (Field(ge=1)), then Annotated[...] inside its type (int | Annotated[int, Gt(0)])."""
    from typing import Annotated, get_args, get_origin

    info = (getattr(cls, "__pydantic_fields__", None) or {}).get(name)
    if info is None:
        return {}
    found = constraints(info.metadata)
    pending = [info.annotation]
    while pending:
        hint = pending.pop()
        if get_origin(hint) is Annotated:
            found = {**constraints(get_args(hint)[1:]), **found}
            pending.append(get_args(hint)[0])
        else:
            pending.extend(a for a in get_args(hint) if a is not type(None))
    if not found:
        return {}
    return {"field": f"{cls.__module__}.{cls.__qualname__}.{name}", **dict(sorted(found.items()))}


def flags(parser: argparse.ArgumentParser, defaults: bool) -> list[dict[str, Any]]:
    """Every option of a parser, in the parser's order; with its config field's bounds where
    record_sources saw the field and it declares any."""
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
        source = getattr(action, SOURCE, None)
        bounds = field_bounds(*source) if source else {}
        if bounds:
            row["bounds"] = bounds
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


def field_types(cls: Any) -> dict[str, Any]:
    """A config class's fields and their resolved types: pydantic's own record of them, else the
    dataclass's type hints (a class that cannot resolve them has none)."""
    import typing

    fields = getattr(cls, "__pydantic_fields__", None)
    if fields:
        return {name: info.annotation for name, info in fields.items()}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an unresolved hint: the class's own field list, untyped
        hints = {}
    return {f.name: hints.get(f.name) for f in dataclasses.fields(cls)}


def config_class(hint: Any) -> Any:
    """The config class a field's type is, alone or in a union (CompilationConfig,
    SpeculativeConfig | None), or None: a class inside a dict or list (--limit-mm-per-prompt's
    per-modality options, --lora-modules' paths) is not the option's keys."""
    import types
    import typing

    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [config_class(a) for a in typing.get_args(hint) if a is not type(None)]
        return next((c for c in found if c is not None), None)
    return None


def class_keys(cls: Any, depth: int = 1) -> dict[str, Any]:
    """A config class's keys as a JSON option takes them: its fields, whether it refuses other
    keys (pydantic extra="forbid", or a plain dataclass, whose constructor refuses unknown
    keyword arguments), and, `depth` levels down, the same of each field that is a config class
    (CompilationConfig.pass_config)."""
    config = getattr(cls, "__pydantic_config__", None)
    extra = str((config or {}).get("extra") or "ignore") if config is not None else "forbid"
    types = field_types(cls)
    found: dict[str, Any] = {"class": f"{cls.__module__}.{cls.__qualname__}", "extra": extra, "fields": sorted(types)}
    nested = {}
    if depth > 0:
        for name, hint in sorted(types.items()):
            inner = config_class(hint)
            if inner is not None:
                nested[name] = class_keys(inner, depth - 1)
    if nested:
        found["nested"] = nested
    return found


def config_keys(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Each serve option (first long spelling, without "--") whose config field is a config class,
    with that class's keys (class_keys): --compilation-config takes CompilationConfig's."""
    found = {}
    for action in parser._actions:
        source = getattr(action, SOURCE, None)
        longs = [o for o in action.option_strings if o.startswith("--")]
        if source is None or not longs:
            continue
        inner = config_class(field_types(source[0]).get(source[1]))
        if inner is not None:
            found[longs[0].removeprefix("--")] = class_keys(inner)
    return dict(sorted(found.items()))


def registered(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """The names vLLM's registries hold, as its start checks them: reasoning parsers
    (ReasoningParserManager.list_registered), tool-call parsers (ToolParserManager, in
    vllm.tool_parsers or, before, vllm.entrypoints.openai.tool_parsers) and attention backends
    (the members of the enum --attention-backend's config field takes)."""
    import importlib

    from vllm.reasoning import ReasoningParserManager

    tools: Any = None
    for module in ("vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers"):
        try:
            tools = importlib.import_module(module).ToolParserManager
            break
        except (ImportError, AttributeError):
            continue
    if tools is None:
        raise RuntimeError("no ToolParserManager found")
    backends: list[str] = []
    words: list[str] = []
    for action in parser._actions:
        source = getattr(action, SOURCE, None)
        if "--attention-backend" in action.option_strings and source is not None:
            backends = enum_names(field_types(source[0]).get(source[1]))
            words = [w for w in WORDS if accepts(source[0], source[1], w)]
    if not backends:
        raise RuntimeError("--attention-backend: no enum of backends found on its config field")
    return {
        "reasoningParsers": sorted(ReasoningParserManager.list_registered()),
        "toolCallParsers": sorted(tools.list_registered()),
        "attentionBackends": backends,
        "attentionBackendWords": words,
    }


# Words a config field may take beside its enum's member names (vLLM >= 0.33 reads "auto" for
# --attention-backend as automatic selection); each is offered to the class itself (accepts).
WORDS = ("auto",)


def accepts(cls: Any, name: str, word: str) -> bool:
    """Whether the config class takes `word` for field `name` (built with that field alone)."""
    try:
        cls(**{name: word})
    except Exception:  # a refusal, whichever exception the class raises
        return False
    return True


def enum_names(hint: Any) -> list[str]:
    """The member names of the Enum inside a type (AttentionBackendEnum | None), in its order."""
    import enum
    from typing import get_args

    pending = [hint]
    while pending:
        current = pending.pop()
        if isinstance(current, type) and issubclass(current, enum.Enum):
            return list(current.__members__)
        pending.extend(get_args(current))
    return []


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
    # Import the serve command's modules first: each binds get_kwargs, which record_sources replaces.
    import vllm.entrypoints.cli.serve

    record_sources()

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
    serve = serve_parser()
    result["configKeys"] = config_keys(serve)
    result["registered"] = registered(serve)
    result["serveDefaults"] = {
        a.dest: plain(a.default) for a in serve._actions if a.option_strings and a.default is not argparse.SUPPRESS
    }
    json.dump(result, sys.stdout, indent=1, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
