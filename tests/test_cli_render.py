"""`make render` (python -m mooncake_pd render): writes validated manifests and a summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mooncake_pd import cli as mooncake_cli
from mooncake_pd import commands, manifests, paths

BAD = Path(__file__).parent / "bad-values" / "ports-serving-ports-equal.yaml"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mooncake_pd", *args], capture_output=True, text=True, cwd=paths.REPO)


@pytest.mark.parametrize("version", paths.HELM_VERSIONS)
def test_render_writes_and_summarises(tmp_path: Path, version: str):
    out = tmp_path / "out" / "deploy.yaml"
    proc = cli("--helm", str(paths.helm_binary(version)), "render", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    objects = manifests.parse(out.read_text())
    assert {o["kind"] for o in objects} == {"ConfigMap", "ModelServing", "Service", "Deployment", "Pod", "PodTemplate"}
    summary = proc.stdout
    for expected in [
        "ModelServing deepseek-pd: 1 serving group(s)",
        "prefill  replicas 1 (+0 workers), TP 2 x DP 4, devices per pod 8 x huawei.com/ascend-1980",
        "ports: serve 7101, dp-rpc 12322, kv 18100-18107",
        "KV connector: MooncakeConnectorV1",
        "prefill: kv_producer, kv_port 18000, engine_id deepseek-pd-0_prefill-0",
        "Proxy: http://deepseek-pd-proxy.default.svc:8080/v1/chat/completions",
    ]:
        assert expected in summary
    assert len(summary.splitlines()) <= 24, "the summary must fit one screen"
    # The guide's layout runs a Mooncake the known advisories name, on the host network: a
    # warning on stderr (docs/security.md), never a refusal.
    assert "Known advisories this deployment leaves reachable" in proc.stderr
    assert "CVE-2026-103764 applies to Mooncake transfer engine 0.3.7.post2" in proc.stderr


@pytest.mark.parametrize("values", sorted(paths.VALUES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_preset_renders_and_summarises(tmp_path: Path, values: Path):
    """`mooncake-pd render` on each values/ file: the manifests written and a summary of each
    role's side channel, whatever its connector (kv_port, or the variable NIXL reads)."""
    out = tmp_path / "deploy.yaml"
    proc = cli("render", "--values", str(values), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    objects = manifests.parse(out.read_text())
    roles = manifests.one(objects, "ModelServing")["spec"]["template"]["roles"]
    for role in roles:
        replicas = role.get("replicas", "autoscaled")
        assert f"{role['name']:<8} replicas {replicas} (+{role['workerReplicas']} workers)" in proc.stdout
    side_channel = "kv_port" if "MooncakeConnectorV1" in proc.stdout else "VLLM_NIXL_SIDE_CHANNEL_PORT"
    assert proc.stdout.count(f", {side_channel} ") == 2, proc.stdout
    assert not re.search(r"engine_id \S*_start[0-9]", proc.stdout), "the render's own time, not a pod's"


def test_render_refuses_bad_values_and_writes_nothing(tmp_path: Path):
    out = tmp_path / "deploy.yaml"
    proc = cli("render", "--values", str(BAD), "--out", str(out))
    assert proc.returncode == 2
    assert "decode.port: ports 7100-7100 overlap prefill.port" in proc.stderr
    assert not out.exists()


def test_render_without_the_crds_says_so_in_one_line(tmp_path: Path):
    out = tmp_path / "deploy.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "mooncake_pd", "render", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=paths.REPO,
        env={**os.environ, "KTHENA_CRDS_DIR": str(tmp_path / "no-crds")},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"mooncake-pd: CRDs not found at {tmp_path / 'no-crds'} (KTHENA_CRDS_DIR must name a folder of CRD files)"
    ]
    assert not out.exists()


def test_help_explains_every_command():
    proc = cli("--help")
    assert proc.returncode == 0
    for command, summary in commands.SUMMARIES.items():
        assert command in proc.stdout
        # Loaded, the command's module declares it with the line `--help` lists, and describes it.
        subparsers = mooncake_cli.build_parser([command])._subparsers._group_actions[0]
        assert [a.help for a in subparsers._choices_actions if a.dest == command] == [summary]
        assert subparsers.choices[command].description


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["update", "values.yaml", "--check"], "update"),
        (["--helm", "render", "render"], "render"),
        (["--chart", "chart", "--helm=/bin/helm", "golden"], "golden"),
        (["--help"], None),
    ],
)
def test_only_the_command_that_runs_is_loaded(argv: list[str], command: str | None):
    """Commands are imported on use (the others bring kubernetes-validate, the Kubernetes client or
    the autoscaler model), so a run loads its own module and no other."""
    assert mooncake_cli.command_in(argv) == command
    program = (
        "import sys; from mooncake_pd import cli; cli.build_parser(sys.argv[1:]); "
        "print(sorted(m for m in sys.modules if m.startswith('mooncake_pd.commands.')))"
    )
    proc = subprocess.run([sys.executable, "-c", program, *argv], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == str([f"mooncake_pd.commands.{command}"] if command else [])


def test_render_suggests_the_nearest_vllm_flag(tmp_path: Path):
    proc = cli("render", "--values", str(Path(__file__).parent / "bad-values" / "vllm-unknown-flag.yaml"))
    assert proc.returncode == 2
    assert "prefill.args.gpu-memory-utilisation: not an option of vllm serve in vLLM 0.13.0 " in proc.stderr
    assert "(did you mean --gpu-memory-utilization?)" in proc.stderr


@pytest.mark.parametrize("values", sorted(paths.VALUES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_preset_gives_vllm_a_command_line_it_parses(values: Path):
    """Each role's `vllm serve` command line, as the start script runs it, against the own option
    list of the vLLM the preset's engine version runs."""
    from mooncake_pd import engines, helm, profiles, vllmflags

    version = profiles.engine_version(yaml.safe_load(values.read_text()))
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,)))
    for run in engines.entry_runs(objects):
        assert vllmflags.check_argv(run.run.argv[2:], version=version) == [], (run.role, run.run.argv)


# Issue #40 item 9: render took no -n, verify needed --release, bench took the release as a word.
@pytest.mark.parametrize("command", ["render", "verify", "bench"])
def test_every_command_that_names_a_release_takes_release_and_namespace_alike(command: str):
    for namespace in (["-n", "llm"], ["--namespace", "llm"]):
        argv = [command, "--release", "my-model", *namespace]
        args = mooncake_cli.build_parser(argv).parse_args(argv)
        assert (args.release, args.namespace) == ("my-model", "llm")
    argv = [command, "--release", "my-model"]
    assert mooncake_cli.build_parser(argv).parse_args(argv).namespace == paths.NAMESPACE


def test_the_nvidia_summary_names_the_engine_it_renders_and_no_start_time(tmp_path: Path):
    """The NVIDIA engines run upstream vLLM, not "vLLM-Ascend v0.13.0 ... (the guide's)"; NIXL's
    engine_id gets the time of each start from the start script, which the summary's stand-in run
    would show as the render's own time."""
    values = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-nvidia-h100-1p1d.yaml"
    proc = cli("render", "-f", str(values), "-n", "llm", "--out", str(tmp_path / "nvidia.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "Engine version v0.13.0 (upstream vLLM 0.13.0): docker.io/vllm/vllm-openai:v0.13.0\n" in proc.stdout
    assert "vLLM-Ascend" not in proc.stdout
    assert "engine_id deepseek-pd-0_prefill-0_start<ns at each start>\n" in proc.stdout
    assert "Proxy: http://deepseek-pd-proxy.llm.svc:8080/v1/chat/completions" in proc.stdout
    ascend = cli("render", "--out", str(tmp_path / "defaults.yaml"))
    assert "Engine version v0.13.0 (vLLM-Ascend v0.13.0 on vLLM 0.13.0, the guide's)" in ascend.stdout
    assert "engine_id deepseek-pd-0_prefill-0\n" in ascend.stdout


@pytest.mark.parametrize("how", ["path", "HELM", "--helm"])
def test_the_summary_says_which_helm_rendered_and_how_it_was_chosen(tmp_path: Path, how: str):
    """A helm that is not the pinned download: the one on PATH (a tool installed outside a
    checkout, no HELM set), $HELM, or --helm; the summary names the way it was chosen, never a
    HELM= that was not set."""
    wrapper = tmp_path / "bin" / "helm"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {paths.helm_binary()} "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HELM"}
    args = ["render", "--out", str(tmp_path / "out.yaml")]
    if how == "path":
        env["PATH"] = f"{wrapper.parent}:{env['PATH']}"
        args = ["--helm", "helm", *args]
    elif how == "HELM":
        env["HELM"] = str(wrapper)
    else:
        args = ["--helm", str(wrapper), *args]
    proc = subprocess.run(
        [sys.executable, "-m", "mooncake_pd", *args], capture_output=True, text=True, cwd=paths.REPO, env=env
    )
    assert proc.returncode == 0, proc.stderr
    said = {"path": f"({wrapper}, the helm on PATH)", "HELM": f"(HELM={wrapper},", "--helm": f"(--helm {wrapper},"}
    assert said[how] in proc.stdout
    assert ("HELM=" in proc.stdout) == (how == "HELM")
