"""Each engine version's vLLM command-line options, read from vLLM's own parser into
chart/files/engines/<version>/ (SOURCE.md there): check a `vllm serve` or `vllm bench serve`
command line, or a flag name, against those of a version (default: the guide's, v0.13.0)."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mooncake_pd import paths

SERVE = "serve-flags.json"
BENCH_SERVE = "bench-serve-flags.json"
# The engine version the guide's values run (chart/files/profiles.yaml accelerators' default).
DEFAULT_VERSION = "v0.13.0"


@dataclass(frozen=True)
class Option:
    """One option: every spelling, what it takes (bool: nothing; value: one; list: one or more),
    the values the parser allows and its default (bench serve lists defaults)."""

    options: tuple[str, ...]
    dest: str
    kind: str
    choices: tuple[str, ...] | None
    default: object = None


@cache
def options(name: str = SERVE, version: str = DEFAULT_VERSION, folder: Path | None = None) -> dict[str, Option]:
    """Every spelling (`--max-model-len`, `--no-enable-prefix-caching`, `-tp`) -> its option."""
    data = json.loads(((folder or paths.ENGINE_DATA) / version / name).read_text())
    found: dict[str, Option] = {}
    for flag in data["flags"]:
        choices = tuple(str(c) for c in flag["choices"]) if flag.get("choices") else None
        option = Option(tuple(flag["options"]), flag["dest"], flag["kind"], choices, flag.get("default"))
        for spelling in option.options:
            found[spelling] = option
    return found


def lookup(flag: str, name: str = SERVE, version: str = DEFAULT_VERSION) -> Option | None:
    """The option a `--flag` spelling names; vLLM also accepts underscores for dashes."""
    known = options(name, version)
    return known.get(flag) or known.get("--" + flag.removeprefix("--").replace("_", "-"))


def suggestion(flag: str, name: str = SERVE, version: str = DEFAULT_VERSION) -> str:
    """' (did you mean --x?)' for the nearest long spelling, or ''."""
    longs = [o for o in options(name, version) if o.startswith("--")]
    close = difflib.get_close_matches("--" + flag.removeprefix("--"), longs, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def check_argv(argv: list[str], name: str = SERVE, version: str = DEFAULT_VERSION) -> list[str]:
    """Problems with a command line's options (after the subcommand and its positional), as
    vLLM's parser would see them: unknown flags, a flag given twice, a bool flag with a value,
    a value flag without one, a value outside the parser's choices. Empty when it parses."""
    problems: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-"):
            problems.append(f"unexpected argument {token!r}")
            i += 1
            continue
        flag, has_inline, inline = token.partition("=")
        option = lookup(flag, name, version)
        if option is None:
            problems.append(f"{flag}: not an option of vLLM {version.lstrip('v')}{suggestion(flag, name, version)}")
            i += 1
            continue
        if option.dest in seen:
            problems.append(f"{flag}: given twice")
        seen.add(option.dest)
        values = [inline] if has_inline else []
        i += 1
        while not has_inline and i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
            if option.kind == "value":
                break
        if option.kind == "bool" and values:
            problems.append(f"{flag}: takes no value, got {values}")
        elif option.kind != "bool" and not values:
            problems.append(f"{flag}: needs a value")
        elif option.choices and any(v not in option.choices for v in values):
            problems.append(f"{flag}: {values} not among {list(option.choices)}")
    return problems


_UNKNOWN = re.compile(
    r"^(\s*- (\S+?)\.args\.(\S+): not an option of vllm (serve|bench serve) in vLLM ([0-9]+\.[0-9]+\.[0-9]+))(.*)$"
)


def with_suggestions(message: str) -> str:
    """helm's refusal with a did-you-mean after each unknown vLLM flag it names."""
    lines = []
    for line in message.splitlines():
        match = _UNKNOWN.match(line)
        version = f"v{match.group(5)}" if match else ""
        if match and (paths.ENGINE_DATA / version).is_dir():
            head, _, flag, command, _, rest = match.groups()
            hint = suggestion(flag, SERVE if command == "serve" else BENCH_SERVE, version)
            line = f"{head}{hint}{rest}" if hint else line
        lines.append(line)
    return "\n".join(lines)
