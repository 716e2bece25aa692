"""Run a rendered start script with bash and a stub `vllm` that records what it was given,
so tests (and the render summary) see the real argv and environment of the engine."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mooncake_pd.errors import FAILED, MooncakePdError

# The stub records what `vllm` was given. It and `python3` (for the script's own helpers:
# preflight.py, a JSON edit) run this Python without `site` (-S): they need only the standard
# library, and a Python with many site packages spends ~60 ms a start on them.
STUB = """import json, os, sys
with open(os.environ["MOONCAKE_PD_STUB_OUT"], "w") as out:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, out)
"""


def _launcher(*argv: str) -> str:
    return f'#!/bin/sh\nexec {" ".join(map(shlex.quote, argv))} "$@"\n'


# Variables the stubbed run or bash itself set; they are not what the script exports.
# PYTHONCOERCECLOCALE=0 keeps the stub's Python from adding LC_CTYPE under the C locale (PEP 538).
NOT_EXPORTED = (
    "MOONCAKE_PD_STUB_OUT",
    "MOONCAKE_PD_ROOT",
    "PATH",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "PYTHONCOERCECLOCALE",
)


# Variables naming a container path the script writes (an emptyDir's file in the pod): a run
# points them at the same path under its root, so the script writes there and not on this host;
# what the run returns keeps the container's path.
WRITTEN_PATH_ENV = ("RESTART_MARKER",)


class ScriptFailed(MooncakePdError):
    """The script exited non-zero or never reached `vllm`: the render does not start."""

    exit_code = FAILED

    def __init__(self, returncode: int, stderr: str, termination_log: str = ""):
        super().__init__(f"script exited {returncode}: {stderr.strip()}")
        self.returncode = returncode
        self.stderr = stderr
        self.termination_log = termination_log


@dataclass(frozen=True)
class Run:
    argv: list[str]
    env: dict[str, str]
    stderr: str = ""


@dataclass(frozen=True)
class NodeFile:
    """A file of the node the pod sees, written under MOONCAKE_PD_ROOT."""

    text: str
    executable: bool = False


TERMINATION_LOG = "/dev/termination-log"
# Node files under this prefix are Python modules of the image (a stand-in of Mooncake's transfer
# engine, which the preflight imports): written to a folder on the run's PYTHONPATH instead.
IMAGE_PYTHON_PATH = "/image-python/"


def run(
    script: str,
    env: dict[str, str],
    *,
    extra_path: Sequence[Path] = (),
    beside: Mapping[str, str] | None = None,
    node: Mapping[str, NodeFile] | None = None,
    python3: Path | None = None,
) -> Run:
    """Run `script` with bash under `env` (plus PATH with the stub and this Python first, as
    `vllm` and `python3`); return the stub's argv and environment. `beside`: files next to the
    script (the ConfigMap's other keys); `node`: container paths -> files, laid out under a
    folder given as MOONCAKE_PD_ROOT, which the preflight reads every absolute path under;
    `python3`: the script's python3 instead (with its site packages: an engine's venv, whose vLLM
    the script's engine check imports as the image's would)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        bin_dir = tmpdir / "bin"
        bin_dir.mkdir()
        stub = bin_dir / "vllm-stub.py"
        stub.write_text(STUB)
        # python3 is this Python rather than whichever is first on PATH (a pyenv shim adds
        # ~0.15 s a call; an old system Python may not run the helpers at all).
        for name, launcher in {
            "vllm": _launcher(sys.executable, "-S", str(stub)),
            "python3": _launcher(str(python3)) if python3 else _launcher(sys.executable, "-S"),
        }.items():
            (bin_dir / name).write_text(launcher)
            (bin_dir / name).chmod(0o755)
        script_path = tmpdir / "start.sh"
        script_path.write_text(script)
        for name, text in (beside or {}).items():
            (tmpdir / name).write_text(text)
        root = tmpdir / "root"
        site = tmpdir / "image-python"
        site.mkdir()
        for path, file in {TERMINATION_LOG: NodeFile(""), **(node or {})}.items():
            if path.startswith(IMAGE_PYTHON_PATH):
                target = site / path.removeprefix(IMAGE_PYTHON_PATH)
            else:
                target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(file.text)
            target.chmod(0o755 if file.executable else 0o644)
        written = {name: env[name] for name in WRITTEN_PATH_ENV if env.get(name, "").startswith("/")}
        rebased = {name: root / container_path.lstrip("/") for name, container_path in written.items()}
        for local in rebased.values():
            local.parent.mkdir(parents=True, exist_ok=True)
        out = tmpdir / "stub.json"
        path = os.pathsep.join([str(bin_dir), *map(str, extra_path), os.environ.get("PATH", "")])
        full_env = {
            **env,
            **{name: str(local) for name, local in rebased.items()},
            "PATH": path,
            "MOONCAKE_PD_STUB_OUT": str(out),
            "MOONCAKE_PD_ROOT": str(root),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")])),
            "PYTHONCOERCECLOCALE": "0",
        }
        proc = subprocess.run(
            ["bash", str(script_path)], env=full_env, cwd=tmp, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0 or not out.exists():
            log = (root / TERMINATION_LOG.lstrip("/")).read_text()
            raise ScriptFailed(proc.returncode, proc.stderr, log)
        recorded = json.loads(out.read_text())
    env_out = {k: v for k, v in recorded["env"].items() if k not in NOT_EXPORTED} | written
    # The image's stand-in modules were this run's, not the pod's: the pod's own PYTHONPATH, if any.
    if env_out.get("PYTHONPATH") == full_env["PYTHONPATH"]:
        if env.get("PYTHONPATH"):
            env_out["PYTHONPATH"] = env["PYTHONPATH"]
        else:
            del env_out["PYTHONPATH"]
    return Run(argv=recorded["argv"], env=env_out, stderr=proc.stderr)


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
