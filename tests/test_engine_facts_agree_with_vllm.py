"""What the chart refuses from the engine data (config-keys.json, registered-names.json,
serve-checks.json) vLLM 0.13.0 refuses too, and what it lets through vLLM accepts: each case's
flags through vLLM's own serve parser (its JSON options' config classes included),
validate_parsed_serve_args and validate_api_server_args, in the e2e venv."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from mooncake_pd import paths
from test_engine_facts_at_render import VALID

BAD = Path(__file__).parent / "bad-values"
# The bad-values cases of vLLM 0.13.0 (the gate's engine) that vLLM refuses at start; the ignored
# speculative key is not among them (vLLM drops it silently: the chart refuses what it would lose).
REFUSED = (
    "engine-config-key-unknown-compilation.yaml",
    "engine-config-key-unknown-nested-pass-config.yaml",
    "engine-name-reasoning-parser-unknown.yaml",
    "engine-name-tool-call-parser-unknown.yaml",
    "engine-check-auto-tool-choice-without-parser.yaml",
    "engine-check-log-outputs-without-log-requests.yaml",
)
ACCEPTED = (
    "compilation-config-known-keys",
    "compilation-config-as-json-text",
    "registered-parsers",
    "tool-call-parser-without-auto-choice",
    "log-outputs-with-log-requests",
)
CHECK = """
import copy, json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.entrypoints.openai.api_server import validate_api_server_args
from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = ServeSubcommand().subparser_init(FlexibleArgumentParser(prog="vllm").add_subparsers())
out = []
for argv in json.load(sys.stdin):
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            raise ValueError("vllm serve's parser refused the arguments")
        validate_parsed_serve_args(args)
        # EngineArgs.create_engine_config copies --reasoning-parser into the structured-outputs
        # config (vllm/engine/arg_utils.py ~1662), where the API server's check reads it (a copy:
        # the parser's default object is shared between parses).
        if args.reasoning_parser:
            args.structured_outputs_config = copy.deepcopy(args.structured_outputs_config)
            args.structured_outputs_config.reasoning_parser = args.reasoning_parser
        validate_api_server_args(args)
        out.append(None)
    except Exception as error:
        out.append(f"{type(error).__name__}: {error}"[:300])
print(json.dumps(out))
"""


def _words(args: dict) -> list[str]:
    """`vllm serve` words of a flag map as the chart writes them (mooncake-pd.vllm.flagWords)."""
    words: list[str] = []
    for name, value in args.items():
        if value is True:
            words.append(f"--{name}")
        elif isinstance(value, dict):
            words += [f"--{name}", json.dumps(value)]
        else:
            words += [f"--{name}", str(value)]
    return words


def _role_args(values: dict) -> list[dict]:
    """engine.args under each role's args, the way a role's start script passes them."""
    engine = (values.get("engine") or {}).get("args") or {}
    return [{**engine, **((values.get(role) or {}).get("args") or {})} for role in ("prefill", "decode")]


@pytest.mark.conformance
def test_vllm_refuses_what_the_chart_refuses_and_accepts_the_rest():
    python = paths.e2e_venv(paths.E2E_FIRST_CPU) / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {python}: make e2e-venv")
    cases: list[tuple[str, bool, list[str]]] = []
    for name in REFUSED:
        values = yaml.safe_load((BAD / name).read_text())
        # The role the case breaks: the one whose flags vLLM must refuse.
        cases += [(name, True, ["--model", "m", *_words(a)]) for a in _role_args(values) if a]
    for name in ACCEPTED:
        cases += [(name, False, ["--model", "m", *_words(a)]) for a in _role_args(VALID[name]) if a]
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(python), "-c", CHECK],
        input=json.dumps([argv for _, _, argv in cases]),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    by_case: dict[str, list] = {}
    for (name, refused, argv), error in zip(cases, results, strict=True):
        by_case.setdefault(name, []).append(error)
        if not refused:
            assert error is None, (name, argv, error)
    for name in REFUSED:
        assert any(by_case[name]), f"{name}: vLLM 0.13.0 accepted what the chart refuses"
