"""A prefill whose connector answers a stale ask as done (vLLM 0.13.0's MooncakeConnector,
profiles.yaml restartQuietSeconds) waits after a restart of its container before the engine
starts, so that decode's asks queued for the process that died time out first; a first start,
and a new pod, start at once. The rendered start script runs under bash with `sleep` and `vllm`
standing in, its marker in a folder that plays the pod's restart-marker emptyDir."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import Renderer
from mooncake_pd import engines, manifests, paths, profiles

CPU_PRESET = (paths.VALUES_DIR / "qwen2.5-0.5b-instruct-cpu-1p1d.yaml",)
# MooncakeConnector on vLLM's CPU build needs a block size equal to the model's KV head count
# (profiles.yaml blockSizeWithoutDevice); 8 is one of 0.13.0's choices. No preflight: it reads
# the node, which is not what this test is about.
MOONCAKE = {
    "kvTransfer": {"connector": "MooncakeConnector"},
    "engine": {"args": {"block-size": 8}, "preflight": {"enabled": False}},
}


def roles(rendered) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in manifests.one(rendered.objects, "ModelServing")["spec"]["template"]["roles"]}


def quiet_seconds(version: str, connector: str) -> int:
    return int(profiles.load()["engines"][version]["connectors"][connector]["restartQuietSeconds"])


def start(objects, template: dict[str, Any], pod_dir: Path) -> list[str]:
    """Run the template's start script once as a container of the pod whose emptyDir is
    pod_dir; what `sleep` and `vllm` were called with, in order."""
    container = template["spec"]["containers"][0]
    env = engines.container_env(container, engines.PodIdentity("deepseek-pd", 0, "prefill", 0))
    work = pod_dir / f"container-{len(list(pod_dir.glob('container-*')))}"
    (work / "bin").mkdir(parents=True)
    calls = work / "calls"
    for name, body in {
        "sleep": f'echo "sleep $*" >> {shlex.quote(str(calls))}',
        "vllm": f'echo "vllm $1" >> {shlex.quote(str(calls))}',
        "python3": f'exec {shlex.quote(sys.executable)} -S "$@"',
    }.items():
        (work / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (work / "bin" / name).chmod(0o755)
    (work / "start.sh").write_text(engines.script_of(objects, template))
    for name, text in engines.beside_script(objects, template).items():
        (work / name).write_text(text)
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "restart-marker")
    marker = env["RESTART_MARKER"]
    assert Path(marker).parent == Path(mount), "the marker is not in the restart-marker volume"
    (pod_dir / "volume").mkdir(exist_ok=True)
    env["RESTART_MARKER"] = str(pod_dir / "volume" / Path(marker).name)
    env["PATH"] = f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(
        ["bash", str(work / "start.sh")], env=env, cwd=work, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return calls.read_text().splitlines()


def test_a_restarted_prefill_waits_and_a_first_start_does_not(render: Renderer, tmp_path: Path):
    rendered = render(CPU_PRESET, MOONCAKE)
    prefill = roles(rendered)["prefill"]["entryTemplate"]
    seconds = quiet_seconds("v0.13.0", "MooncakeConnector")
    assert seconds >= 60, "vLLM 0.13.0's decode waits 60 s for prefill's answer (RCVTIMEO 60000)"
    pod = tmp_path / "pod-a"
    assert start(rendered.objects, prefill, pod) == ["vllm serve"]
    assert start(rendered.objects, prefill, pod) == [f"sleep {seconds}", "vllm serve"]
    assert start(rendered.objects, prefill, pod) == [f"sleep {seconds}", "vllm serve"]
    # A new pod has a new emptyDir: no marker, no wait.
    assert start(rendered.objects, prefill, tmp_path / "pod-b") == ["vllm serve"]


def test_the_volume_outlives_the_container_and_not_the_pod(render: Renderer):
    spec = roles(render(CPU_PRESET, MOONCAKE))["prefill"]["entryTemplate"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "restart-marker")
    assert set(volume) == {"name", "emptyDir"}


@pytest.mark.parametrize(
    "overrides, waiting",
    [
        (MOONCAKE, {"prefill"}),  # decode (kv_consumer) asks, it does not answer
        ({}, set()),  # NixlConnector: a restart gets a new engine_id instead (engineIdPerStart)
    ],
    ids=["mooncake", "nixl"],
)
def test_only_a_listening_role_of_a_connector_that_needs_it_waits(render: Renderer, overrides, waiting):
    rendered = render(CPU_PRESET, overrides)
    for name, role in roles(rendered).items():
        spec = role["entryTemplate"]["spec"]
        env = {e["name"] for e in spec["containers"][0].get("env", [])}
        volumes = {v["name"] for v in spec["volumes"]}
        script = engines.script_of(rendered.objects, role["entryTemplate"])
        expected = name in waiting
        assert ("RESTART_MARKER" in env) == expected, name
        assert ("restart-marker" in volumes) == expected, name
        assert ("RESTART_MARKER" in script) == expected, name


@pytest.mark.parametrize(
    "probes, refused",
    [
        ({"startupProbe": {"periodSeconds": 10, "failureThreshold": 5}}, "engine.startupProbe: "),
        ({"startupProbe": {"initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 4}}, ""),
        # No startup probe: the liveness probe judges the starting container (3 x 10 s by default).
        (
            {"startupProbe": None, "livenessProbe": {"failureThreshold": None, "periodSeconds": None}},
            "engine.livenessProbe: ",
        ),
        ({"startupProbe": None, "livenessProbe": None}, ""),
    ],
    ids=["startup-too-short", "startup-long-enough", "liveness-defaults-too-short", "no-probes"],
)
def test_a_probe_that_would_kill_the_waiting_prefill_is_refused(render: Renderer, probes, refused):
    values = {**MOONCAKE, "engine": {**MOONCAKE["engine"], **probes}}
    if not refused:
        render(CPU_PRESET, values)
        return
    error = render.error(CPU_PRESET, values)
    assert refused in error and "waits 60 s" in error and "restarted forever" in error, error
    # NixlConnector's prefill does not wait: the same probe renders.
    render(CPU_PRESET, {"engine": probes})
