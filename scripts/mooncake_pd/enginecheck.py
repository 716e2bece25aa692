"""`mooncake-pd render --engine-check`: the engines judge their own arguments, off the cluster.

Each engine start script runs chart/files/engine_args.py before `vllm serve`: that vLLM's own
parser and config checks on the exact argv it is about to exec. Here the rendered scripts run as
in a pod (scriptrun, a stand-in node, a stub `vllm`), with `python3` a venv of the engine
version the values target (the e2e venv, .tools/e2e, for vLLM 0.13.0), so the same check runs
before anything is installed. Its refusals are the pods' lines: `<values key>: <vLLM's words>;
<fix>`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mooncake_pd import engines, paths, scriptrun
from mooncake_pd.errors import MooncakePdError
from mooncake_pd.manifests import Manifest, one

PROGRAM = "engine_args.py"
PREFIX = "mooncake-pd preflight:"
EX_CONFIG = 78
# Set for the check's runs: engine_args.py then fails where it cannot import vLLM or the venv's
# vLLM is another version than the values target, where a pod only warns.
REQUIRE_ENV = {"MOONCAKE_PD_ENGINE_CHECK": "require"}
VERSION_LABEL = "mooncake-pd/engine-version"


class EngineCheckError(MooncakePdError):
    """The check could not run (a missing tool, as errors.BAD_INPUT says): no venv of that
    version, checks turned off, or a script that failed otherwise. Refusals are not errors: render
    prints them and exits 1."""


@dataclass(frozen=True)
class Outcome:
    """What the engines said: the refusals (`<values key>: ...; fix`) and the lines of those
    that accepted their arguments."""

    refusals: list[str]
    accepted: list[str]


def engine_version(objects: list[Manifest]) -> str:
    """The engine version the release runs (v0.13.0), from the engine pods' label."""
    modelserving = one(objects, "ModelServing")
    template = modelserving["spec"]["template"]["roles"][0]["entryTemplate"]
    return str(template["metadata"]["labels"][VERSION_LABEL])


def python_for(given: str, version: str) -> Path:
    """The python the check runs: `given` (a python, or a venv folder), or for "" the venv of
    `version` here (paths.e2e_venv). EngineCheckError when there is none."""
    if given:
        path = Path(given)
        python = path / "bin" / "python" if path.is_dir() else path
        where = f"--engine-check {given}"
    else:
        python = paths.e2e_venv(version) / "bin" / "python"
        where = f"no venv of vLLM {version.lstrip('v')} here ({python.parent.parent})"
    if not python.is_file():
        raise EngineCheckError(
            f"{where}: no python at {python}; give --engine-check a python (or venv) with that vLLM installed "
            "(`make e2e-venv` installs vLLM 0.13.0's in .tools/e2e)"
        )
    return python


def pods(objects: list[Manifest]) -> list[tuple[dict[str, Any], engines.PodIdentity]]:
    """Each role's entry pod and, for a multi-node role, its first worker (their start scripts differ)."""
    modelserving = one(objects, "ModelServing")
    name = modelserving["metadata"]["name"]
    namespace = modelserving["metadata"].get("namespace", "default")
    found = []
    for role in modelserving["spec"]["template"]["roles"]:
        workers = int(role.get("workerReplicas", 0))
        found.append((role["entryTemplate"], engines.PodIdentity(name, 0, role["name"], 0, 0, workers, namespace)))
        if workers and role.get("workerTemplate"):
            found.append((role["workerTemplate"], engines.PodIdentity(name, 0, role["name"], 0, 1, workers, namespace)))
    return found


def lines_of(text: str) -> list[str]:
    return [line[len(PREFIX) :].strip() for line in text.splitlines() if line.startswith(PREFIX)]


def check(objects: list[Manifest], python: Path) -> Outcome:
    """Run every engine start script to its `exec vllm` with `python` as its python3; the
    engine check's refusals (all of them, every pod) and its accepting lines."""
    refusals: list[str] = []
    accepted: list[str] = []
    for template, pod in pods(objects):
        script = engines.script_of(objects, template)
        if PROGRAM not in script:
            raise EngineCheckError(
                "the start scripts run no engine check (engine.preflight.enabled or engine.preflight.checks.engineArgs "
                "is false); turn it on to check the engine's arguments"
            )
        container = template["spec"]["containers"][0]
        env = {**engines.container_env(container, pod), **REQUIRE_ENV}
        try:
            run = scriptrun.run(
                script,
                env,
                beside=engines.beside_script(objects, template),
                node=engines.node_files(container, env, engines.Node()),
                python3=python,
            )
        except scriptrun.ScriptFailed as failed:
            if failed.returncode != EX_CONFIG or not lines_of(failed.termination_log):
                tail = "\n".join(failed.stderr.strip().splitlines()[-5:])
                raise EngineCheckError(
                    f"{pod.name}'s start script with {python} exited {failed.returncode}:\n{tail}"
                ) from None
            refusals += [line for line in lines_of(failed.termination_log) if line not in refusals]
            continue
        accepted += [line for line in lines_of(run.stderr) if line.startswith("ok:") and "vLLM" in line]
    return Outcome(refusals, accepted)
