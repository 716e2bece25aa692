"""The e2e's tiny models and plain reference engines, made and started once per pytest session
(the `references` fixture, tests/conftest.py) where the e2e modules share a model and flags.

Each e2e module judges its PD answers against one plain engine: decode's start script and flags
without the KV connector (pdcheck.plain_engine_shim), on the module's tiny model. Four of them in
the gate (the NIXL run, Kthena's router, Mooncake behind the proxy and behind the router) start
two distinct engines: the NIXL and the Kthena render differ, for the plain engine, only in the
port the shim replaces and the connector's side-channel port; the two Mooncake renders the same.
So an engine is shared where it is provably the one the module would have started:

- the model: the session makes each tiny model (per KV head count) once, with tiny_model.py as
  every module did, and every module copies it; the engine runs on the session's copy, and the
  module's own copy must hash the same (a module that changed its weights gets an engine of its
  own);
- the flags: the module's decode start script runs up to `exec vllm` with the shim in dry-run
  mode, which writes the vllm, argv and env the plain engine would get; these must equal what
  the running engine was started with, but for the model's folder, the shell's own variables and
  what only the connector the shim drops reads (VLLM_NIXL_SIDE_CHANNEL_*, VLLM_MOONCAKE_BOOTSTRAP_PORT:
  read by vllm 0.13.0's envs.py for nixl_connector.py and mooncake_connector.py alone) and the
  per-start MOONCAKE_ENGINE_ID. Otherwise the engine running is stopped and the module's started.

Its answers are cached per request (path and body): greedy, prefix caching off, one request at a
time, so an answer is the same whenever it is asked. Between uses the engine is paused (SIGSTOP of
its process group: no CPU beside the PD engines) and it is stopped by PID at the session's end,
also on failure. What ran and who shared it: out/e2e-reference/summary.json.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mooncake_pd import paths
from support.localpods import ENGINE_NICE, Proc, Processes, post_json, run_to_end, wait_ready
from support.pdcheck import (
    MAX_TOKENS,
    PLAIN_DRY_RUN,
    PLAIN_PORT,
    PLAIN_RECORD,
    PROMPTS,
    READY_TIMEOUT,
    LocalRun,
    Memory,
    PdSetup,
    engine,
    make_tiny_model,
    plain_engine_shim,
)

OUT = paths.REPO / "out" / "e2e-reference"
URL = f"http://127.0.0.1:{PLAIN_PORT}"
# What a plain engine's flags may differ in and still be the same engine: the shell's own
# variables, the engine_id made per start, and what only the dropped connector reads (above).
NOT_THE_ENGINES = frozenset(
    {
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "MOONCAKE_ENGINE_ID",
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_NIXL_SIDE_CHANNEL_PORT",
        "VLLM_MOONCAKE_BOOTSTRAP_PORT",
    }
)
# The start script up to `exec vllm` (two small Python programs: the connector's config and
# preflight, which reads the model's config): about 2 s here; 120 s is for a loaded machine.
DRY_RUN_TIMEOUT = 120.0


class ReferenceError(AssertionError):
    pass


def model_digest(folder: Path) -> str:
    """sha256 over a model folder's files, names and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def flags_key(record: dict[str, Any], models: Path) -> str:
    """What decides a plain engine's answers, from the shim's record: the vllm it runs, its argv
    and env, the model folder written as <models> (its contents are compared by digest)."""

    def plain(text: str) -> str:
        return text.replace(str(models), "<models>")

    env = {k: plain(v) for k, v in record["env"].items() if k not in NOT_THE_ENGINES}
    return json.dumps({"vllm": record["vllm"], "argv": [plain(w) for w in record["argv"]], "env": env}, sort_keys=True)


@dataclass
class Reference:
    """One plain engine, paused between uses, and the answers it gave."""

    key: str
    model: str
    proc: Proc
    processes: Processes
    ready_s: float
    started_by: str
    shared_with: list[str] = field(default_factory=list)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @contextmanager
    def serving(self) -> Iterator[str]:
        """The engine resumed: its base URL, paused again afterwards."""
        if self.proc.popen.poll() is not None:
            raise ReferenceError(f"the plain reference engine exited {self.proc.popen.returncode}:\n{self.proc.tail()}")
        self.processes.resume(self.proc)
        try:
            yield URL
        finally:
            self.processes.pause(self.proc)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The engine's answer to `body` at `path`, asked once per session."""
        key = json.dumps([path, body], sort_keys=True)
        if key not in self.answers:
            with self.serving() as url:
                self.answers[key] = post_json(f"{url}{path}", body)
        return self.answers[key]

    def completions(self, prompts: list[str] = PROMPTS) -> list[str]:
        """Greedy completions of `prompts`, one at a time (pdcheck.completions' requests)."""
        bodies = [{"model": "tiny", "prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0} for p in prompts]
        return [str(self.post("/v1/completions", body)["choices"][0]["text"]) for body in bodies]


class References:
    """The session's tiny models and its plain reference engine (one at a time)."""

    def __init__(self, out: Path = OUT):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        self.out = out
        self.base = Path(tempfile.mkdtemp(prefix="mooncake-pd-reference-", dir="/var/tmp"))
        self.base.chmod(0o755)
        self.processes = Processes(out / "logs")
        self.run = LocalRun(self.processes, self.base)
        self.models: dict[int, Path] = {}
        self.current: Reference | None = None
        self.history: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}

    def tiny_model(self, run: LocalRun, model: Path, other_weights: Path, kv_heads: int = 0) -> None:
        """make_tiny_model's files, made once per session and KV head count, copied to `model` and
        `other_weights` (the run may change its copy: the NIXL run's negative control does)."""
        if kv_heads not in self.models:
            clock = time.monotonic()
            made = self.base / f"models-kv{kv_heads}"
            make_tiny_model(self.run, made / "models" / "tiny", made / "other-weights", kv_heads)
            self.models[kv_heads] = made
            self.timings[f"model_kv{kv_heads}"] = time.monotonic() - clock
        made = self.models[kv_heads]
        for source, target in ((made / "models" / "tiny", model), (made / "other-weights", other_weights)):
            shutil.copytree(source, target)
            for path in [target, *target.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)

    def engine(self, run: LocalRun, setup: PdSetup, name: str) -> Reference:
        """The plain engine of `setup`'s decode: the one running where it is provably the same
        (the module docstring), else one started for it. `name`: the module asking."""
        digest = model_digest(setup.models / "tiny")
        current = self.current
        alive = current is not None and current.model == digest and current.proc.popen.poll() is None
        if current is not None and alive and self._dry_run(run, setup) == current.key:
            current.shared_with.append(name)
            return current
        if current is not None:
            self.processes.stop(current.proc)
            self.current = None
        self.current = self._start(setup, name, digest)
        return self.current

    def _shimmed(self, setup: PdSetup, workdir: Path, host_paths: dict[str, Path] | None, record: Path):
        _, container = engine(setup.objects, setup.roles["decode"], workdir, setup.network, host_paths=host_paths)
        container.env["PATH"] = f"{plain_engine_shim(self.base / 'plain-bin')}:{container.env['PATH']}"
        container.env[PLAIN_RECORD] = str(record)
        return container

    def _dry_run(self, run: LocalRun, setup: PdSetup) -> str:
        """The flags key of the plain engine `setup`'s decode script would start."""
        record = run.base / "plain-flags.json"
        container = self._shimmed(setup, setup.work / "plain-flags", None, record)
        container.env[PLAIN_DRY_RUN] = "1"
        code, output = run_to_end(run.processes, container, DRY_RUN_TIMEOUT, "plain-engine-flags")
        if code != 0 or not record.exists():
            raise ReferenceError(f"decode's start script did not reach `exec vllm` (exit {code}):\n{output[-3000:]}")
        return flags_key(json.loads(record.read_text()), setup.models)

    def _start(self, setup: PdSetup, name: str, digest: str) -> Reference:
        """`setup`'s plain engine on the session's copy of its model, ready, then paused."""
        made = [
            folder / "models" for folder in self.models.values() if model_digest(folder / "models" / "tiny") == digest
        ]
        if not made:
            raise ReferenceError(f"{name}: its model is none the session made (References.tiny_model)")
        models = made[0]
        index = len(self.history)
        record = self.base / f"plain-{index}.json"
        clock = time.monotonic()
        container = self._shimmed(setup, self.base / "pods" / f"plain-{index}", {str(setup.models): models}, record)
        proc = self.processes.run(container, f"plain-engine-{index}", ENGINE_NICE)
        ready = wait_ready(proc, f"{URL}/health", READY_TIMEOUT)
        self.processes.pause(proc)
        reference = Reference(
            flags_key(json.loads(record.read_text()), models), digest, proc, self.processes, ready, name
        )
        # Its memory, once ready: the e2e modules' peak_rss_gib counts only what they started.
        rss = round(Memory(self.processes).sample() / 2**30, 2)
        self.history.append(
            {"started_by": name, "ready_s": round(ready, 1), "rss_gib": rss, "shared_with": reference.shared_with}
        )
        self.timings[f"plain_{index}_start"] = time.monotonic() - clock
        return reference

    def close(self) -> None:
        """Every engine stopped by PID, the session's folder removed, the summary written."""
        try:
            self.processes.close()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            summary = {
                "engines": self.history,
                "timings_s": {k: round(v, 1) for k, v in self.timings.items()},
            }
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
