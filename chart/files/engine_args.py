"""mooncake-pd engine check: the engine judges its own arguments, before `vllm serve` starts.

The start script builds the exact argv it will exec (`vllm serve MODEL --flag ...`) and runs this
first, with the image's own python3 and vLLM: vLLM's own parser and checks judge those words, with
no model load and no device work, and a refusal names the values key each flag came from:

1. the `vllm serve` parser, built as the vllm command builds it (ServeSubcommand.subparser_init):
   unknown flags, bad choices, JSON flags whose keys their config class forbids (--compilation-config
   ...), the types and bounds of every option;
2. the serve command's own checks (ServeSubcommand.validate -> validate_parsed_serve_args: the pairs
   --enable-auto-tool-choice / --tool-call-parser, --enable-log-outputs / --enable-log-requests);
3. on an entry pod (an API server; not --headless), the API server's own check of the tool and
   reasoning parser names (api_server.validate_api_server_args, after importing the parser plugins
   as setup_server does), given the reasoning parser where create_engine_config puts it;
4. AsyncEngineArgs.from_cli_args (the engine arguments' own __post_init__: the EPLB and attention
   configs, the general plugins), then the config classes EngineArgs.create_engine_config builds
   without the model, each as and when it builds them (vllm v0.13.0 vllm/engine/arg_utils.py
   ~1460-1660): ParallelConfig, LoRAConfig with --enable-lora, ObservabilityConfig.
What needs the model's config (ModelConfig and what follows from it: the cache and scheduler
configs, speculative decoding, and create_engine_config's own asserts after it, such as the decode
context parallel size dividing TP) or the device (VllmConfig's platform checks) is left to vLLM.

Usage: python3 engine_args.py '<JSON settings rendered by the chart>' serve MODEL --flag ...
  settings: role, version (the engine version the chart targets), keys (flag without "--" -> the
  values key it came from), defaultKey, terminationLog. MOONCAKE_PD_ENGINE_CHECK=require (render's
  check): fail where vLLM cannot be imported or is not that version, instead of warning.
  exit 0: go on (or vLLM is not importable here: a warning, the check not run); exit 78 (EX_CONFIG):
  refused, each refusal one line `mooncake-pd preflight: <values key>: <what vLLM said>; <fix>` on
  stderr and in the termination log. MOONCAKE_PD_ROOT as for preflight.py.
Python 3.8+; the standard library and the image's own vLLM only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import time

EX_CONFIG = 78
PREFIX = "mooncake-pd preflight:"
# A values set can hold several mistakes: each round names one refusal's flags, drops them and
# asks again, so that the user sees them all at once.
MAX_REFUSALS = 8
REQUIRE_ENV = "MOONCAKE_PD_ENGINE_CHECK"
FIX = "set what vLLM asks for there, or remove it (vLLM's own check of the flags the chart renders)"


def host_path(path: str) -> str:
    root = os.environ.get("MOONCAKE_PD_ROOT", "")
    return os.path.join(root, path.lstrip("/")) if root else path


def one_line(text: str) -> str:
    """An engine message as one line: pydantic's links and error-type brackets dropped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("For further information visit")]
    joined = " ".join(lines)
    joined = re.sub(r"\s*\[type=[^\]]*\]", "", joined)
    return joined if len(joined) <= 600 else joined[:597] + "..."


class Engine:
    """The image's vLLM: its serve parser and checks, imported once."""

    def __init__(self) -> None:
        # Everything the checks call, imported here: a vLLM they do not fit fails here, and the
        # check warns and steps aside instead of refusing every argv.
        from vllm.config import LoRAConfig, ObservabilityConfig, ParallelConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.entrypoints.openai import api_server
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        self.configs = (ParallelConfig, LoRAConfig, ObservabilityConfig)
        self.engine_args = AsyncEngineArgs
        self.api_server = api_server
        self.command = ServeSubcommand()
        top = FlexibleArgumentParser(prog="vllm")
        subparsers = top.add_subparsers(required=False, dest="subparser")
        self.command.subparser_init(subparsers).set_defaults(dispatch_function=self.command.cmd)
        self.parser = top

    def parse(self, argv: list[str]) -> argparse.Namespace:
        """argparse's refusal (it prints usage and exits 2) as a ValueError with its message."""
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                return self.parser.parse_args(argv)
        except SystemExit:
            # argparse prints the usage, then `<prog>: error: <message>` (which may span lines).
            text = err.getvalue()
            message = text.split(": error: ", 1)[1] if ": error: " in text else text
            raise ValueError(one_line(message) or "the parser refused the arguments") from None

    def api_server_checks(self, args: argparse.Namespace) -> None:
        """What the API server checks before it binds its port (setup_server), on a copy of the
        arguments whose structured outputs config names the reasoning parser as
        create_engine_config will (vllm v0.13.0 arg_utils.py ~1662): 0.13.0 runs this check
        before that copy is made, so vLLM itself finds a bad name only when it builds the chat
        endpoint, after the model has loaded."""
        api_server = self.api_server
        validate = getattr(api_server, "validate_api_server_args", None)
        if validate is None:
            return
        for manager, plugin in (
            ("ToolParserManager", getattr(args, "tool_parser_plugin", None)),
            ("ReasoningParserManager", getattr(args, "reasoning_parser_plugin", None)),
        ):
            registry = getattr(api_server, manager, None)
            if plugin and len(plugin) > 3 and registry is not None:
                importer = getattr(
                    registry, "import_tool_parser" if manager == "ToolParserManager" else "import_reasoning_parser"
                )
                importer(plugin)
        copied = argparse.Namespace(**vars(args))
        outputs = getattr(args, "structured_outputs_config", None)
        if outputs is not None and getattr(args, "reasoning_parser", None):
            copied.structured_outputs_config = dataclasses.replace(outputs, reasoning_parser=args.reasoning_parser)
        validate(copied)

    @staticmethod
    def build(cls: type, source: object, **given: object) -> object:
        """A config class from the engine arguments of the same names (None: the class's
        default), as create_engine_config passes them."""
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        values = {n: getattr(source, n) for n in names if getattr(source, n, None) is not None}
        values.update(given)
        return cls(**values)

    def config_checks(self, args: argparse.Namespace) -> None:
        ParallelConfig, LoRAConfig, ObservabilityConfig = self.configs
        engine_args = self.engine_args.from_cli_args(args)
        self.build(ParallelConfig, engine_args)
        if getattr(engine_args, "enable_lora", False):
            cpu_loras = getattr(engine_args, "max_cpu_loras", None)
            self.build(LoRAConfig, engine_args, max_cpu_loras=cpu_loras if cpu_loras and cpu_loras > 0 else None)
        self.build(ObservabilityConfig, engine_args)

    def judge(self, argv: list[str]) -> str:
        """vLLM's refusal of `vllm <argv>`, one line, or "" when it accepts them."""
        try:
            args = self.parse(argv)
            self.command.validate(args)
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag
            if not args.headless and args.api_server_count >= 1:
                self.api_server_checks(args)
            self.config_checks(args)
        except (ImportError, AttributeError, NameError):
            raise  # the check does not fit this vLLM: not a refusal (main steps aside)
        except Exception as e:  # vLLM's checks raise TypeError, ValueError, KeyError, AssertionError ...
            text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
            return one_line(f"{type(e).__name__}: {text}" if text else type(e).__name__)
        return ""


def groups(argv: list[str]) -> list[tuple[int, int]]:
    """Each flag's words in `serve MODEL --flag [value ...]`: (start, end) indexes."""
    starts = [i for i, word in enumerate(argv) if i >= 2 and word.startswith("--")]
    ends = [*starts[1:], len(argv)]
    return [(start, ends[i]) for i, start in enumerate(starts)]


def flag_name(word: str) -> str:
    return word[2:].split("=", 1)[0]


def culprits(engine: Engine, argv: list[str], message: str) -> list[tuple[int, int]]:
    """The flags a refusal is about, asking vLLM again: those whose removal alone makes vLLM
    accept the rest; else (another refusal remains) those the message names, as --flag,
    field_name or "field name"; else those whose removal makes this refusal go (vLLM then refuses
    something else, which the next round names). Named before merely changed: removing a flag can
    also bring an earlier check's refusal forward, which would blame it for this one."""
    flags = groups(argv)
    answers = {span: engine.judge(argv[: span[0]] + argv[span[1] :]) for span in flags}
    passing = [span for span in flags if not answers[span]]
    if passing:
        return passing
    named = []
    for s, e in flags:
        name = flag_name(argv[s])
        spellings = {f"--{name}", name.replace("-", "_"), name.replace("-", " ")}
        if any(re.search(rf"(?<![\w-]){re.escape(spelling)}(?![\w-])", message) for spelling in spellings):
            named.append((s, e))
    return named or [span for span in flags if answers[span] != message]


def key_of(settings: dict, word: str) -> str:
    name = flag_name(word)
    keys = settings.get("keys") or {}
    return keys.get(name) or keys.get(name[3:] if name.startswith("no-") else name) or settings["defaultKey"]


def refusals(engine: Engine, settings: dict, argv: list[str]) -> list[str]:
    """Every refusal of the argv, one line each: `<values key>: vLLM <v> refuses <flags>: <why>; fix`."""
    found: list[str] = []
    version = settings.get("version") or "?"
    while len(found) < MAX_REFUSALS:
        message = engine.judge(argv)
        if not message:
            break
        spans = culprits(engine, argv, message)
        keys = sorted({key_of(settings, argv[s]) for s, _ in spans}) or [settings["defaultKey"]]
        words = " ".join(
            " ".join(argv[s:e]) if e - s <= 2 and len(" ".join(argv[s:e])) < 120 else argv[s] for s, e in spans
        )
        what = (
            f"vLLM {version} refuses {words}: {message}"
            if words
            else f"vLLM {version} refuses the arguments: {message}"
        )
        found.append(f"{', '.join(keys)}: {what}; {FIX}")
        if not spans:
            break
        drop = {i for s, e in spans for i in range(s, e)}
        argv = [word for i, word in enumerate(argv) if i not in drop]
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    settings = json.loads(argv[1])
    serve = argv[2:]
    # `mooncake-pd render --engine-check` requires the check; a pod whose python3 cannot import
    # vLLM only warns (vllm serve itself will say why).
    require = os.environ.get(REQUIRE_ENV) == "require"
    started = time.monotonic()
    try:
        # vLLM's import logs INFO lines (platform detection); only its refusals matter here.
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        engine = Engine()
        import vllm
    except Exception as e:
        what = f"cannot import vLLM's parser with {sys.executable} ({type(e).__name__}: {one_line(str(e))})"
        if require:
            print(f"{PREFIX} {settings['role']}: {what}", file=sys.stderr)
            return 1
        print(f"{PREFIX} warning: {what}; engine arguments not checked", file=sys.stderr)
        return 0
    here = str(getattr(vllm, "__version__", "?"))
    wanted = settings.get("version") or ""
    if require and wanted and here.split("+")[0] != wanted:
        print(
            f"{PREFIX} {settings['role']}: {sys.executable} has vLLM {here}, the values run {wanted}", file=sys.stderr
        )
        return 1
    try:
        # vLLM accepts a bare `vllm serve MODEL`: where it does not, the check does not fit this
        # vLLM (or this node), and would refuse every argv.
        baseline = engine.judge(serve[:2])
        if baseline:
            raise RuntimeError(f"vLLM {here} refuses even `vllm {' '.join(serve[:2])}` here: {baseline}")
        found = refusals(engine, settings, serve)
    except Exception as e:
        what = f"the engine check does not fit this vLLM ({type(e).__name__}: {one_line(str(e))})"
        print(f"{PREFIX} {'' if require else 'warning: '}{settings['role']}: {what}", file=sys.stderr)
        return 1 if require else 0
    seconds = time.monotonic() - started
    if found:
        lines = [f"{PREFIX} {line}" for line in found]
        print("\n".join(lines), file=sys.stderr)
        try:
            with open(host_path(settings.get("terminationLog", "/dev/termination-log")), "w") as log:
                log.write("\n".join(lines) + "\n")
        except OSError:
            pass
        return EX_CONFIG
    print(
        f"{PREFIX} ok: {settings['role']}: vLLM {here} accepts the {len(groups(serve))} flags ({seconds:.1f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
