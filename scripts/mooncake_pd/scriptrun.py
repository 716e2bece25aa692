"""Run a rendered start script with bash and a stub `vllm` that records what it was given,
so tests (and the render summary) see the real argv and environment of the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STUB = """#!{python}
import json, os, sys
with open(os.environ["MOONCAKE_PD_STUB_OUT"], "w") as out:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, out)
"""

# Variables the stubbed run or bash itself set; they are not what the script exports.
# PYTHONCOERCECLOCALE=0 keeps the stub's Python from adding LC_CTYPE under the C locale (PEP 538).
NOT_EXPORTED = ("MOONCAKE_PD_STUB_OUT", "PATH", "PWD", "OLDPWD", "SHLVL", "_", "PYTHONCOERCECLOCALE")


class ScriptFailed(RuntimeError):
    """The script exited non-zero or never reached `vllm`."""


@dataclass(frozen=True)
class Run:
    argv: list[str]
    env: dict[str, str]


def run(script: str, env: dict[str, str], *, extra_path: list[Path] = ()) -> Run:
    """Run `script` with bash under `env` (plus PATH with the stub first); return the stub's
    argv and environment."""
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        stub = tmpdir / "bin" / "vllm"
        stub.parent.mkdir()
        stub.write_text(STUB.replace("{python}", sys.executable))
        stub.chmod(0o755)
        script_path = tmpdir / "start.sh"
        script_path.write_text(script)
        out = tmpdir / "stub.json"
        path = os.pathsep.join([str(stub.parent), *map(str, extra_path), os.environ.get("PATH", "")])
        full_env = {**env, "PATH": path, "MOONCAKE_PD_STUB_OUT": str(out), "PYTHONCOERCECLOCALE": "0"}
        proc = subprocess.run(
            ["bash", str(script_path)], env=full_env, cwd=tmp, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0 or not out.exists():
            raise ScriptFailed(f"script exited {proc.returncode}: {proc.stderr.strip()}")
        recorded = json.loads(out.read_text())
    return Run(argv=recorded["argv"], env={k: v for k, v in recorded["env"].items() if k not in NOT_EXPORTED})


def parse_serve_argv(argv: list[str], json_flags: frozenset[str]) -> dict[str, Any]:
    """`vllm serve MODEL --flag value ...` as {"model": MODEL, "flags": {flag: value}}: a flag
    with no value is True, several values a list, JSON flags parsed. Repeated flags fail."""
    if argv[:1] != ["serve"] or len(argv) < 2:
        raise ValueError(f"not a `vllm serve MODEL ...` command line: {argv[:3]}")
    flags: dict[str, Any] = {}
    current: str | None = None
    for token in argv[2:]:
        if token.startswith("--"):
            current = token[2:]
            if current in flags:
                raise ValueError(f"--{current} given twice")
            flags[current] = []
        elif current is None:
            raise ValueError(f"unexpected argument {token!r}")
        else:
            flags[current].append(token)
    parsed: dict[str, Any] = {}
    for name, values in flags.items():
        if not values:
            parsed[name] = True
        elif len(values) == 1:
            parsed[name] = json.loads(values[0]) if name in json_flags else values[0]
        else:
            parsed[name] = values
    return {"model": argv[1], "flags": parsed}


# vLLM v0.13.0 flags whose value is JSON (facts.md).
JSON_FLAGS = frozenset({"kv-transfer-config", "additional-config", "compilation-config", "hf-overrides"})
