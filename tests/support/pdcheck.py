"""What proves the PD data path on real engines, shared by the e2e runs (tests/test_e2e.py,
tests/test_e2e_2p1d.py): the prompts, the requests, the judgement on decode's metrics, and the
peak memory of the processes a run started."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import engines, helm, manifests, paths, verify
from support.localpods import (
    API_KEY,
    E2E_VENV,
    ENGINE_NICE,
    Container,
    Network,
    Proc,
    Processes,
    post_json,
    prepare,
    run_to_end,
    wait_ready,
)

TINY_MODEL = Path(__file__).resolve().parents[1] / "e2e" / "tiny_model.py"
PRESET = paths.VALUES_DIR / "qwen2.5-0.5b-instruct-cpu-1p1d.yaml"
E2E_VALUES = Path(__file__).resolve().parents[1] / "e2e" / "values.yaml"

PROMPTS = [
    "Hello, how are you?",
    "The quick brown fox jumps over the lazy dog.",
    "Tell me a story about a cat, a dog and a mouse.",
    "What is the capital of France?",
    "Prefill computes the KV cache of the prompt; decode",
    "One two three four five six seven",
    "Kubernetes schedules pods on nodes and Volcano",
    "Mooncake and NIXL move the KV cache from",
    "I am fine, thank you. And you?",
    "Paris is the capital of France, and the capital of Italy is",
]
MAX_TOKENS = 16
# An engine from its start to its readiness probe's 200 (wait_ready, each engine in turn, all of
# them started together). Measured on the 2-core machine (README, "End-to-end run"): one engine
# 25-30 s (vLLM 0.13.0), 48 s (0.32.0); prefill and decode 30-48 s; three engines 50-67 s; four
# (the mixed run) 136 s. A one-core CPU hog about doubles that (272 s), past the 240 s this was:
# 480 s. An engine that fails exits, and wait_ready says so at once.
READY_TIMEOUT = 480.0
# The tiny model made (tiny_model.py: torch and transformers imported, random weights saved). Its
# seconds are recorded (the e2e's summary.json, timings_s.model) but not published; the whole
# 1P1D run, this included, takes 199-293 s. Kept at 120 s until a loaded run's figure says
# otherwise: it only imports and writes, and a script that hangs is broken.
MODEL_TIMEOUT = 120.0
# What the PD proxy asks prefill for (chart/files/vendor/*/load_balance_proxy_server_example.py):
# compute the prompt and keep its KV cache for a remote decode.
PREFILL_ASK = {"do_remote_decode": True, "do_remote_prefill": False}
EXTERNAL_HITS, NIXL_TRANSFERS, NIXL_FAILED = verify.EXTERNAL_HITS, verify.NIXL_TRANSFERS, verify.NIXL_FAILED
NIXL_BYTES = "vllm:nixl_bytes_transferred_sum"
# Where the reference engine listens: decode's flags without the connector (plain_engine_shim).
PLAIN_PORT = 7199

# Mooncake's transfer engine for the engines (scripts/install-mooncake.sh): the newest release,
# what a vLLM CPU image would install, and libibverbs, which its engine.so links.
MOONCAKE_TOOLS = paths.REPO / ".tools" / "mooncake"
MOONCAKE_TRANSFER_ENGINE = "0.3.13.post1"
# MooncakeConnector asserts block_size == cache.shape[-3] (vllm 0.13 mooncake_connector.py
# ~713-714), in vLLM's CPU KV-cache layout (2, blocks, kv_heads, block_size, head_size) the KV head
# count: the Mooncake runs' model has as many KV heads as tokens in a block.
MOONCAKE_KV_HEADS = 32


def mooncake_values() -> dict[str, Any]:
    """The values a run with MooncakeConnector sets over the cpu preset (tests/test_e2e_mooncake.py,
    harness/drills.py), for a model made with kv_heads=MOONCAKE_KV_HEADS."""
    return {
        "kvTransfer.connector": "MooncakeConnector",
        # Sender threads per prefill (num_workers, 10 by default): two engines share 2 cores here.
        "kvTransfer.extraConfig": {"num_workers": 2},
        "engine.args.block-size": MOONCAKE_KV_HEADS,
        # The engine image with Mooncake installed: its wheel's folder and libibverbs.
        "engine.env.PYTHONPATH": str(MOONCAKE_TOOLS / MOONCAKE_TRANSFER_ENGINE),
        "engine.env.LD_LIBRARY_PATH": str(MOONCAKE_TOOLS / "lib"),
    }


def require_mooncake() -> None:
    """Fail (not skip) where scripts/install-mooncake.sh has not run."""
    if not (MOONCAKE_TOOLS / ".installed").exists():
        pytest.fail(f"Mooncake's transfer engine is missing ({MOONCAKE_TOOLS}): run scripts/install-mooncake.sh")


def complete(base: str, prompt: str) -> dict[str, Any]:
    return post_json(
        f"{base}/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    )


def ask_prefill(base: str, prompt: str) -> dict[str, Any]:
    """Prefill's half of a PD request, as the proxy sends it (max_tokens 1, PREFILL_ASK): its
    answer's kv_transfer_params are what decode is given."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0, "kv_transfer_params": PREFILL_ASK}
    return post_json(f"{base}/v1/completions", body)


def version_values(version: str) -> dict[str, Any]:
    """The values a run sets for an e2e venv's vLLM CPU release: none for the chart's default
    engine version, engine.version else."""
    return {} if version == paths.E2E_FIRST_CPU else {"engine.version": version}


def completions(base: str, concurrent: bool) -> tuple[list[str], int]:
    """(texts, prompt tokens) of PROMPTS, sent one by one or four at a time."""
    if concurrent:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda p: complete(base, p), PROMPTS))
    else:
        answers = [complete(base, p) for p in PROMPTS]
    return [a["choices"][0]["text"] for a in answers], sum(a["usage"]["prompt_tokens"] for a in answers)


def judge(
    reference: list[str], outputs: list[str], before: str, after: str, prompt_tokens: int, nixl: bool = True
) -> list[str]:
    """What shows that decode did not use prefill's KV cache, or it came wrong; [] when proven.
    nixl: the connector counts its transfers (NixlConnector's vllm:nixl_*; MooncakeConnector
    counts none, so the answers and the external hits decide)."""

    def delta(name: str) -> float:
        return verify.metric_total(after, name) - verify.metric_total(before, name)

    problems = []
    differ = [i for i, (want, got) in enumerate(zip(reference, outputs, strict=True)) if want != got]
    if differ:
        problems.append(f"{len(differ)} of {len(reference)} outputs differ from the plain engine's (prompts {differ})")
    if delta(EXTERNAL_HITS) < prompt_tokens:
        problems.append(f"{EXTERNAL_HITS} rose by {delta(EXTERNAL_HITS):g}, not by the {prompt_tokens} prompt tokens")
    if not nixl:
        return problems
    if delta(NIXL_TRANSFERS) < len(reference):
        problems.append(f"{NIXL_TRANSFERS} rose by {delta(NIXL_TRANSFERS):g} for {len(reference)} requests")
    if delta(NIXL_BYTES) <= 0:
        problems.append(f"{NIXL_BYTES} did not rise")
    if delta(NIXL_FAILED) != 0:
        problems.append(f"{NIXL_FAILED} rose by {delta(NIXL_FAILED):g}")
    return problems


@dataclass
class Memory:
    """Peak resident memory of every process the test started (all their process groups)."""

    processes: Processes
    peak: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> int:
        groups = {p.popen.pid for p in list(self.processes.running)}
        total = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                pgid = int(stat.rsplit(")", 1)[1].split()[2])
                if pgid in groups:
                    total += int((entry / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, ValueError, IndexError):
                continue
        return total

    def run(self) -> None:
        while not self.stop.wait(2):
            self.peak = max(self.peak, self.sample())


@dataclass
class LocalRun:
    """A run's processes and its folder for models and pod volumes (under /var/tmp, which the
    containers' users can read); after it, its wall time and peak memory."""

    processes: Processes
    base: Path
    wall: float = 0.0
    peak_rss: int = 0


@contextmanager
def local_run(
    out: Path, prefix: str, summary: Callable[[LocalRun], dict[str, Any]], venvs: tuple[Path, ...] = (E2E_VENV,)
) -> Iterator[LocalRun]:
    """`out` made afresh (logs/ and summary.json stay after the run); every process the run
    started stopped on the way out, also on failure; summary(run) written to out/summary.json.
    `venvs`: the e2e venvs whose engines the run starts."""
    missing = [p for venv in venvs for p in (venv / ".installed", venv / "bin" / "vllm") if not p.exists()]
    if missing:
        pytest.fail(f"the e2e venv is missing ({missing[0]}): run `make e2e-venv`")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    base.chmod(0o755)
    run = LocalRun(Processes(out / "logs"), base)
    memory = Memory(run.processes)
    sampler = threading.Thread(target=memory.run, daemon=True)
    sampler.start()
    try:
        yield run
    finally:
        run.processes.close()
        memory.stop.set()
        sampler.join(timeout=5)
        run.peak_rss = memory.peak
        run.wall = time.monotonic() - started
        (out / "summary.json").write_text(json.dumps(summary(run), indent=2) + "\n")
        shutil.rmtree(base, ignore_errors=True)


def make_tiny_model(run: LocalRun, model: Path, other_weights: Path, kv_heads: int = 0) -> None:
    """The test's tiny model at `model`, and weights of the same shapes at `other_weights`,
    readable by the containers' users (the benchmark Job's 65534 reads the tokenizer).
    kv_heads: as many attention and KV heads (tiny_model.py --kv-heads; 0: its default)."""
    argv = [str(E2E_VENV / "bin" / "python3"), str(TINY_MODEL), str(model), str(other_weights)]
    argv += ["--kv-heads", str(kv_heads)] if kv_heads else []
    command = Container("tiny-model", argv, {"PATH": "/usr/bin:/bin", "HOME": str(run.base)}, run.base, None)
    code, output = run_to_end(run.processes, command, timeout=MODEL_TIMEOUT)
    assert code == 0, output[-3000:]
    for path in run.base.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def render(models: Path, values: dict[str, Any] | None = None) -> list[manifests.Manifest]:
    """The cpu preset under tests/e2e/values.yaml, for the tiny model in `models`, with `values`
    (dotted keys) on top."""
    where = {"model.path": str(models / "tiny"), "model.storage.mountPath": str(models)}
    where.update({"model.storage.hostPath": str(models), **(values or {})})
    objects = manifests.parse(helm.template(paths.helm_binary(), (PRESET, E2E_VALUES), where))
    return [*objects, api_key_secret()]


def api_key_secret() -> manifests.Manifest:
    """The Secret tests/e2e/values.yaml's engine.apiKeySecret names, as a user creates it before
    the install (the process kubelet reads it from the API server, localpods from the objects)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "e2e-api-key", "namespace": "default"},
        "stringData": {"api-key": API_KEY},
    }


def engine(
    objects: list[manifests.Manifest],
    role: dict[str, Any],
    workdir: Path,
    network: Network,
    replica: int = 0,
    address: str = "127.0.0.1",
    host_paths: dict[str, Path] | None = None,
) -> tuple[engines.PodIdentity, Container]:
    """A role's entry pod (replica `replica` at `address`), ready to run with the env Kthena and
    the chart give it; `host_paths`: a hostPath volume's path -> the local folder it is here."""
    template = role["entryTemplate"]
    container = template["spec"]["containers"][0]
    pod = engines.PodIdentity("deepseek-pd", 0, role["name"], replica, ip=address)
    env = {**engines.container_env(container, pod), "PYTHONUNBUFFERED": "1"}
    prepared = prepare(objects, template["spec"], container, workdir / pod.name, network, env, host_paths, address)
    return pod, prepared


def metrics_url(role: dict[str, Any], address: str = "127.0.0.1") -> str:
    ports = role["entryTemplate"]["spec"]["containers"][0]["ports"]
    return f"http://{address}:{next(p['containerPort'] for p in ports if p['name'] == 'server')}/metrics"


# The plain engine's shim writes what it runs (the real vllm, its argv, its env with PATH as the
# engine gets it) as JSON to the file PLAIN_RECORD names; with PLAIN_DRY_RUN set it then exits
# instead: what a start script would run, without an engine (tests/support/reference.py).
PLAIN_RECORD, PLAIN_DRY_RUN = "MOONCAKE_PD_PLAIN_RECORD", "MOONCAKE_PD_PLAIN_DRY_RUN"


def plain_engine_shim(folder: Path) -> Path:
    """A `vllm` first on PATH that runs the real one (the next on PATH: the image's) with the
    script's flags minus the KV connector and on PLAIN_PORT: the decode engine's exact flags,
    without PD."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "vllm"
    shim.write_text(
        f"""#!/usr/bin/env python3
import json, os, shutil, sys
here = os.path.dirname(os.path.abspath(__file__))
rest = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if os.path.abspath(p) != here)
real = shutil.which("vllm", path=rest)
argv, out, skip = sys.argv[1:], [], False
for i, word in enumerate(argv):
    if skip:
        skip = False
    elif word == "--kv-transfer-config":
        skip = True
    elif i and argv[i - 1] == "--port":
        out[-1:] = ["--port", "{PLAIN_PORT}"]
    else:
        out.append(word)
record, dry = os.environ.pop("{PLAIN_RECORD}", ""), os.environ.pop("{PLAIN_DRY_RUN}", "")
if record:
    with open(record, "w") as f:
        json.dump({{"vllm": real, "argv": out, "env": {{**os.environ, "PATH": rest}}}}, f)
if dry:
    sys.exit(0)
os.execv(real, ["vllm", *out])
"""
    )
    shim.chmod(0o755)
    return folder


@dataclass
class PdSetup:
    """A run's render of the cpu preset for its tiny model, with cluster DNS for its Services;
    `models`: the folder the model lies in (model.storage.hostPath), its tiny model in tiny/."""

    objects: list[manifests.Manifest]
    roles: dict[str, dict[str, Any]]
    network: Network
    work: Path
    models: Path


# What makes a run's tiny model (make_tiny_model's arguments); the e2e tests pass the session's
# References.tiny_model, which copies one made once per session.
MakeModel = Callable[[LocalRun, Path, Path, int], None]


def pd_setup(
    run: LocalRun, values: dict[str, Any] | None = None, kv_heads: int = 0, make_model: MakeModel | None = None
) -> PdSetup:
    """The tiny model made under the run's folder (tiny/ in run.base/models, weights of the same
    shapes in run.base/other-weights) and the chart rendered for it (harness/ttft_split.py and
    harness/drills.py start from here)."""
    models = run.base / "models"
    (make_model or make_tiny_model)(run, models / "tiny", run.base / "other-weights", kv_heads)
    objects = render(models, values)
    roles = {r["name"]: r for r in manifests.one(objects, "ModelServing")["spec"]["template"]["roles"]}
    network = Network()
    network.add_services(objects)
    return PdSetup(objects, roles, network, run.base / "pods", models)


def start_plain_engine(run: LocalRun, setup: PdSetup) -> tuple[Proc, str]:
    """Decode's flags without the connector on PLAIN_PORT, ready: (its process, its base URL)."""
    _, container = engine(setup.objects, setup.roles["decode"], setup.work / "plain", setup.network)
    container.env["PATH"] = f"{plain_engine_shim(run.base / 'plain-bin')}:{container.env['PATH']}"
    proc = run.processes.run(container, "plain-engine", ENGINE_NICE)
    url = f"http://127.0.0.1:{PLAIN_PORT}"
    wait_ready(proc, f"{url}/health", READY_TIMEOUT)
    return proc, url


def proxy_container(setup: PdSetup) -> Container:
    """The PD proxy's container, ready to run here."""
    spec = manifests.one(setup.objects, "Deployment", "deepseek-pd-proxy")["spec"]["template"]["spec"]
    return prepare(setup.objects, spec, spec["containers"][0], setup.work / "proxy", setup.network)
