"""The benchmark Job and `mooncake-pd bench`: the Job's command line parses against vLLM 0.13.0's
`vllm bench serve` options and runs (stub vllm) to the result line; the collector reads recorded
results and recorded API answers; the table, --compare and --plot."""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import Renderer, assert_valid
from mooncake_pd import bench, paths, vllmflags

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
ONE, TWO = FIXTURES / "1p1d.json", FIXTURES / "2p1d.json"
ON = {"benchmark": {"enabled": True}}

# A stub `vllm` that records its argv and writes a result where --result-dir/--result-filename say.
STUB = """#!{python}
import json, os, sys
argv = sys.argv[1:]
json.dump(argv, open(os.environ["STUB_ARGV"], "w"))
value = lambda flag: argv[argv.index(flag) + 1]
with open(os.path.join(value("--result-dir"), value("--result-filename")), "w") as f:
    f.write(open(os.environ["STUB_RESULT"]).read())
print("============ Serving Benchmark Result ============")
"""


def job(rendered) -> dict:
    (found,) = rendered.find("Job")
    return found


def run_job_script(rendered, tmp_path: Path) -> tuple[list[str], str]:
    """The Job's script with bash and the stub vllm; /results (an emptyDir) relocated to tmp."""
    container = job(rendered)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-c"]
    results = tmp_path / "results"
    results.mkdir()
    # The programs the Job mounts from the scripts ConfigMap at /workspace/<name>.
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    data = rendered.one("ConfigMap", "deepseek-pd-scripts")["data"]
    for mount in container["volumeMounts"]:
        if mount["name"] == "scripts":
            (workspace / mount["subPath"]).write_text(data[mount["subPath"]])
    script = container["args"][0].replace("/results", str(results)).replace("/workspace", str(workspace))
    stub = tmp_path / "bin" / "vllm"
    stub.parent.mkdir()
    stub.write_text(STUB.replace("{python}", sys.executable))
    stub.chmod(0o755)
    env = {
        "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}",
        "STUB_ARGV": str(tmp_path / "argv.json"),
        "STUB_RESULT": str(ONE),
        **{e["name"]: e["value"] for e in container["env"]},
    }
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True)
    return json.loads((tmp_path / "argv.json").read_text()), proc.stdout


def test_off_by_default(render: Renderer):
    assert render().find("Job") == []


def test_job_runs_bench_serve_with_vllms_options(render: Renderer, tmp_path: Path, crds):
    rendered = render(overrides=ON)
    assert_valid(rendered, crds)
    argv, stdout = run_job_script(rendered, tmp_path)
    assert argv[:2] == ["bench", "serve"]
    assert vllmflags.check_argv(argv[2:], vllmflags.BENCH_SERVE) == []
    flags = dict(itertools.pairwise(argv[2:]))
    assert flags["--base-url"] == "http://deepseek-pd-proxy.default.svc:8080"
    assert flags["--model"] == "ds_r1"
    assert flags["--tokenizer"] == "/models/DeepSeek-R1-Distill-Qwen-1.5B"
    assert flags["--dataset-name"] == "random"
    assert (flags["--random-input-len"], flags["--random-output-len"]) == ("1024", "128")
    assert (flags["--num-prompts"], flags["--max-concurrency"], flags["--request-rate"]) == ("200", "16", "inf")
    assert flags["--percentile-metrics"] == "ttft,tpot,itl,e2el"
    assert "--save-result" in argv
    # The result is printed after the marker, where the collector finds it.
    assert bench.parse_log(stdout.splitlines()) == bench.load(str(ONE))


def test_job_spec(render: Renderer):
    rendered = render(overrides=ON)
    spec = job(rendered)["spec"]
    assert spec["backoffLimit"] == 0
    assert "helm.sh/hook" not in job(rendered)["metadata"].get("annotations", {}), "a Job, not a hook"
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert not set(container["resources"]["limits"]) & {"huawei.com/ascend-1980", "nvidia.com/gpu"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True
    assert {v["name"] for v in pod["volumes"]} == {"results", "tmp", "model", "scripts"}
    assert json.loads(job(rendered)["metadata"]["annotations"]["mooncake-pd/benchmark-workload"])["numPrompts"] == 200


def test_a_new_workload_is_a_new_job(render: Renderer):
    """A Job's template cannot change: the name follows what it runs."""
    first = job(render(overrides=ON))["metadata"]["name"]
    again = job(render(overrides=ON))["metadata"]["name"]
    other = job(render(overrides={"benchmark": {"enabled": True, "workload": {"numPrompts": 50}}}))["metadata"]["name"]
    assert first == again
    assert first != other
    assert re.fullmatch(r"deepseek-pd-benchmark-[0-9a-f]{8}", first)


def test_kthena_router_chat_and_sharegpt(render: Renderer, tmp_path: Path):
    overrides = {
        "router": {"type": "kthena"},
        "decode": {"port": 7100},
        "benchmark": {
            "enabled": True,
            "api": "chat",
            "workload": {"dataset": "sharegpt", "sharegptPath": "/models/sharegpt.json", "maxConcurrency": None},
            "args": {"goodput": ["ttft:500", "tpot:50"]},
        },
    }
    argv, _ = run_job_script(render(overrides=overrides), tmp_path)
    assert vllmflags.check_argv(argv[2:], vllmflags.BENCH_SERVE) == []
    assert argv[argv.index("--base-url") + 1] == "http://kthena-router.kthena-system.svc:80"
    assert argv[argv.index("--backend") + 1] == "openai-chat"
    assert argv[argv.index("--endpoint") + 1] == "/v1/chat/completions"
    assert argv[argv.index("--dataset-path") + 1] == "/models/sharegpt.json"
    assert argv[argv.index("--goodput") + 1 : argv.index("--goodput") + 3] == ["ttft:500", "tpot:50"]
    assert "--max-concurrency" not in argv and "--random-input-len" not in argv


def test_parse_log_takes_the_marker_line():
    lines = [
        "INFO starting",
        "Successful requests: 200",
        bench.MARKER + json.dumps({"completed": 3, "errors": ["", "x"]}),
    ]
    assert bench.parse_log(lines) == {"completed": 3, "errors": ["", "x"], "failed": 1}
    with pytest.raises(bench.BenchError, match="did not finish"):
        bench.parse_log(["Traceback (most recent call last):"])


def test_table_of_one_run_names_the_quantities_as_the_dashboard_does():
    text = bench.table([("1p1d", bench.load(str(ONE)))])
    for row in [
        "Successful requests",
        "Failed requests",
        "Request throughput (req/s)",
        "Output token throughput (tok/s)",
        "Time to first token p99 (ms)",
        "Time per output token mean (ms)",
        "Inter-token latency p50 (ms)",
        "End-to-end latency p90 (ms)",
    ]:
        assert row in text
    assert re.search(r"Time to first token mean \(ms\)\s+182\.40", text)
    dashboard = json.loads((paths.CHART / "dashboards" / "mooncake-pd.json").read_text())
    titles = " ".join(p["title"] for p in dashboard["panels"])
    for name in ("Time to first token", "Time per output token"):
        assert name in titles, "the benchmark and the dashboard call a quantity by one name"
    assert "p50, p99" in titles


def test_compare_shows_changes_marked_better_or_worse():
    text = bench.table([("1p1d", bench.load(str(ONE))), ("2p1d", bench.load(str(TWO)))])
    header = text.splitlines()[0].split()
    assert header == ["metric", "1p1d", "2p1d", "change"]
    ttft = next(line for line in text.splitlines() if line.startswith("Time to first token mean"))
    assert "-36.48 (-20.0%) better" in ttft
    throughput = next(line for line in text.splitlines() if line.startswith("Output token throughput"))
    assert "(+25.0%) better" in throughput
    failed = next(line for line in text.splitlines() if line.startswith("Failed requests"))
    assert failed.rstrip().endswith("=")


def test_counts_are_integers():
    one, two = bench.load(str(ONE)), bench.load(str(TWO))
    lines = bench.table([("1p1d", one)]).splitlines()
    assert re.fullmatch(r"Failed requests\s+0", next(line for line in lines if line.startswith("Failed")))
    assert re.fullmatch(r"Successful requests\s+200", next(line for line in lines if line.startswith("Successful")))
    # A change in a count is a whole number too.
    text = bench.table([("1p1d", one), ("2p1d", {**two, "completed": 197, "failed": 3})])
    failed = next(line for line in text.splitlines() if line.startswith("Failed requests"))
    assert re.fullmatch(r"Failed requests\s+0\s+3\s+\+3 worse", failed)
    completed = next(line for line in text.splitlines() if line.startswith("Successful requests"))
    assert completed.endswith(" -3 (-1.5%) worse")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mooncake_pd", "bench", *map(str, args)], capture_output=True, text=True, cwd=paths.REPO
    )


def test_cli_compares_saved_runs_and_plots(tmp_path: Path):
    plot = tmp_path / "runs.png"
    proc = cli("--from", TWO, "--compare", ONE, "--plot", plot)
    assert proc.returncode == 0, proc.stderr
    assert "deepseek-pd-2p1d" in proc.stdout.splitlines()[1]
    assert "better" in proc.stdout
    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_compare_warns_when_the_workloads_differ(tmp_path: Path):
    """`bench --compare` across workloads compares the workloads: it says so on stderr."""
    proc = cli("--from", TWO, "--compare", ONE)
    assert "warning" not in proc.stderr, proc.stderr  # the two saved runs share a workload
    other = tmp_path / "other.json"
    saved = json.loads(Path(ONE).read_text())
    saved["mooncake_pd"] = {**(saved.get("mooncake_pd") or {}), "release": "short-prompts"}
    saved["mooncake_pd"]["workload"] = {**(saved["mooncake_pd"].get("workload") or {}), "inputLen": 128}
    other.write_text(json.dumps(saved))
    proc = cli("--from", TWO, "--compare", str(other))
    assert proc.returncode == 0, proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert "short-prompts ran another workload than" in line and '"inputLen": 128' in line


def test_cli_refuses_what_is_not_a_result(tmp_path: Path):
    other = tmp_path / "values.json"
    other.write_text('{"model": {}}')
    proc = cli("--from", other)
    assert proc.returncode == 2
    assert "not a benchmark result" in proc.stderr


# Recorded API answers, in the shape the kubernetes client returns them.
def _job(name: str, minute: int, succeeded: int = 1, failed: int = 0):
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name=name,
            creation_timestamp=datetime.datetime(2026, 11, 30, 12, minute, tzinfo=datetime.UTC),
            annotations={"mooncake-pd/benchmark-workload": json.dumps({"numPrompts": 200})},
            labels={"app.kubernetes.io/component": "benchmark"},
        ),
        status=SimpleNamespace(succeeded=succeeded, failed=failed, conditions=[]),
    )


class FakeBatch:
    def __init__(self, jobs):
        self.jobs = {j.metadata.name: j for j in jobs}
        self.selectors = []

    def list_namespaced_job(self, namespace, label_selector):
        self.selectors.append(label_selector)
        return SimpleNamespace(items=list(self.jobs.values()))

    def read_namespaced_job(self, name, namespace):
        return self.jobs[name]


class FakeCore:
    def __init__(self, log: str):
        self.log = log

    def list_namespaced_pod(self, namespace, label_selector):
        name = label_selector.removeprefix("job-name=")
        return SimpleNamespace(
            items=[SimpleNamespace(metadata=SimpleNamespace(name=f"{name}-x", creation_timestamp=None))]
        )

    def read_namespaced_pod_log(self, name, namespace, container):
        assert container == "bench"
        return self.log


def test_collector_reads_the_newest_job_from_recorded_answers():
    batch = FakeBatch([_job("deepseek-pd-benchmark-aaaa", 1), _job("deepseek-pd-benchmark-bbbb", 5)])
    found = bench.find_job(batch, "deepseek-pd", "llm")
    assert found.metadata.name == "deepseek-pd-benchmark-bbbb"
    assert batch.selectors == ["app.kubernetes.io/instance=deepseek-pd,app.kubernetes.io/component=benchmark"]
    done = bench.wait(batch, found, "llm", timeout=1, progress=lambda _: None, poll=0)
    log = "noise\n" + bench.MARKER + ONE.read_text().replace("\n", "") + "\n"
    result = bench.parse_log(bench.job_log(FakeCore(log), done, "llm"))
    assert result["completed"] == 200
    assert bench.job_state(_job("j", 1, succeeded=0, failed=1)) == "failed"
    assert bench.job_state(_job("j", 1, succeeded=0)) == "running"
    with pytest.raises(bench.BenchError, match="has no benchmark Job: `helm upgrade"):
        bench.find_job(FakeBatch([]), "deepseek-pd", "llm")


def test_cli_without_a_cluster_exits_2(tmp_path: Path):
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": tempfile.mkdtemp()}
    proc = subprocess.run(
        [sys.executable, "-m", "mooncake_pd", "bench", "deepseek-pd"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert "mooncake-pd bench:" in proc.stderr


def test_restart_posts_the_same_spec_under_a_new_name_without_the_old_runs_selector():
    created = {}

    class Batch:
        def create_namespaced_job(self, namespace, body):
            created.update(namespace=namespace, body=body)
            return SimpleNamespace(metadata=SimpleNamespace(name=body["metadata"]["name"]))

    old = _job("deepseek-pd-benchmark-aaaa", 1)
    template_labels = {
        "app.kubernetes.io/component": "benchmark",
        "batch.kubernetes.io/controller-uid": "u",
        "controller-uid": "u",
        "job-name": "deepseek-pd-benchmark-aaaa",
        "batch.kubernetes.io/job-name": "deepseek-pd-benchmark-aaaa",
    }
    old.spec = SimpleNamespace(
        selector={"matchLabels": {"controller-uid": "u"}},
        template=SimpleNamespace(metadata=SimpleNamespace(labels=template_labels)),
    )
    new = bench.restart(Batch(), old, "llm")
    body = created["body"]
    assert created["namespace"] == "llm"
    assert new.metadata.name.startswith("deepseek-pd-benchmark-aaaa-r") and new.metadata.name != old.metadata.name
    assert body["spec"].selector is None
    assert body["spec"].template.metadata.labels == {"app.kubernetes.io/component": "benchmark"}
    assert body["metadata"]["labels"] == old.metadata.labels


def _selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels, matchExpressions with In) against a pod's labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


def test_job_lands_beside_an_engine_where_the_model_is_on_the_node(render: Renderer):
    """With a hostPath model the tokenizer is on the engines' nodes only: the Job's default
    placement is beside an engine pod of this release; a tokenizer, nodeSelector or affinity of
    the user's, or a model on a claim, leaves placement to them."""
    rendered = render(overrides=ON)
    pod = job(rendered)["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    entry_labels = {role: rendered.role(role)["entryTemplate"]["metadata"]["labels"] for role in ("prefill", "decode")}
    assert all(_selects(term["labelSelector"], labels) for labels in entry_labels.values())
    proxy = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not _selects(term["labelSelector"], proxy), "the proxy may run on a node without the model"
    own = {"nodeSelector": {"llm": "yes"}}
    for overrides in (
        {"benchmark": {"enabled": True, "tokenizer": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"}},
        {"benchmark": {"enabled": True, **own}},
        {"benchmark": {"enabled": True}, "model": {"storage": {"type": "pvc", "claimName": "models"}}},
    ):
        placed = job(render(overrides=overrides))["spec"]["template"]["spec"]
        assert "affinity" not in placed, overrides
    assert job(render(overrides={"benchmark": {"enabled": True, **own}}))["spec"]["template"]["spec"][
        "nodeSelector"
    ] == {"llm": "yes"}


@pytest.mark.parametrize(
    ("accelerator", "image"),
    [
        ("ascend-a3", "docker.io/vllm/vllm-openai:v0.13.0"),
        ("ascend-a2", "docker.io/vllm/vllm-openai:v0.13.0"),
        ("nvidia", "docker.io/vllm/vllm-openai:v0.13.0"),
    ],
)
def test_job_runs_from_an_image_that_starts_without_an_npu(render: Renderer, accelerator: str, image: str):
    """The vLLM-Ascend image cannot start `vllm` without an NPU (tests/test_conformance.py shows
    it): on Ascend the client runs from vLLM's own image of the same version."""
    overrides = {"accelerator": {"type": accelerator}, **ON}
    if accelerator == "nvidia":
        overrides["decode"] = {"args": {"additional-config": None}}
    container = job(render(overrides=overrides))["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image


def test_the_release_is_given_as_render_and_verify_take_it_and_the_old_word_still_works(
    capsys: pytest.CaptureFixture[str],
):
    """bench took its release as a positional word, render and verify as --release (the chart's
    NOTES print `verify --release`): --release is the spelling, the word is kept for existing
    scripts with a deprecation note in --help and on stderr."""
    from mooncake_pd import cli
    from mooncake_pd.commands import bench as command

    def parsed(*argv: str):
        return cli.build_parser(["bench", *argv]).parse_args(["bench", *argv])

    assert command.release_of(parsed("--release", "my-model", "-n", "llm")) == "my-model"
    assert capsys.readouterr().err == ""
    assert command.release_of(parsed("my-model", "-n", "llm")) == "my-model"
    assert "the release as a positional word is deprecated; give --release my-model" in capsys.readouterr().err
    with pytest.raises(bench.BenchError, match="named twice, --release a and b; give it once, as --release"):
        command.release_of(parsed("b", "--release", "a"))
    help_text = " ".join(
        subprocess.run(
            [sys.executable, "-m", "mooncake_pd", "bench", "--help"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert "deprecated: the release as a positional word" in help_text and "--release NAME" in help_text


# benchmark.args against the checks `vllm bench serve` makes after parsing
# (chart/files/bench-serve-rules.yaml, read by chart/templates/validate/_benchmark.tpl).
RULES = paths.REPO / "chart" / "files" / "bench-serve-rules.yaml"


def engine_versions() -> dict[str, str]:
    """engine version -> its vLLM release (chart/files/profiles.yaml)."""
    import yaml

    table = yaml.safe_load((paths.REPO / "chart" / "files" / "profiles.yaml").read_text())
    return {version: str(row["vllm"]) for version, row in table["engines"].items()}


def bench_options(version: str) -> set[str]:
    data = json.loads((paths.REPO / "chart" / "files" / "engines" / version / "bench-serve-flags.json").read_text())
    return {option.removeprefix("--") for flag in data["flags"] for option in flag["options"]}


def in_range(rule_range: str, vllm: str) -> bool:
    """The rules' ranges are '>=X.Y.Z' (the template reads them with semverCompare)."""
    assert re.fullmatch(r">=\d+\.\d+\.\d+", rule_range), rule_range
    return tuple(map(int, vllm.split("."))) >= tuple(map(int, rule_range[2:].split(".")))


def test_bench_rules_name_options_of_every_version_they_apply_to():
    import yaml

    rules = yaml.safe_load(RULES.read_text())["rules"]
    versions = engine_versions()
    checks = {"needs", "requestRate", "datasets", "min", "above", "below", "notAbove", "pattern", "owner"}
    for rule in rules:
        assert rule["why"] and re.match(r"vllm v\d+\.\d+\.\d+ vllm/benchmarks/\S+\.py \w", rule["source"]), rule
        assert checks & set(rule), f"{rule['option']}: no check"
        covered = [v for v, vllm in versions.items() if in_range(rule["vllm"], vllm)]
        assert covered, f"{rule['option']}: applies to no engine version"
        # A prefix (a data set's options) names options of some version; vLLM dropped some since.
        prefixed = [o for v in covered for o in bench_options(v) if o.startswith(rule["option"])]
        assert prefixed or not rule.get("prefix"), f"{rule['option']}: no option of any version starts so"
        for version in covered:
            options = bench_options(version)
            if not rule.get("prefix"):
                named = [rule["option"], *rule.get("needs", []), *rule.get("when", {}), rule.get("notAbove")]
                missing = [o for o in named if o and o not in options]
                assert not missing, f"{rule['option']} at {version}: {missing} not options of vllm bench serve"


def test_bench_args_that_satisfy_the_rules_reach_the_job(render: Renderer):
    args = {
        "goodput": ["ttft:500", "tpot:50", "e2el:1.5e3"],
        "header": ["X-Run=a"],
        "burstiness": 0.5,
        "random-range-ratio": 0.2,
        "random-prefix-len": 16,
        "metric-percentiles": "50, 90,99.9",
    }
    values = {"benchmark": {"enabled": True, "workload": {"requestRate": 8}, "args": args}}
    script = job(render(overrides=values))["spec"]["template"]["spec"]["containers"][0]["args"][0]
    for flag in ("--goodput", "--burstiness", "--random-range-ratio", "--random-prefix-len", "--header"):
        assert flag in script
    ramp = {"ramp-up-strategy": "linear", "ramp-up-start-rps": 1, "ramp-up-end-rps": 20}
    assert job(render(overrides={"benchmark": {"enabled": True, "args": ramp}}))


@pytest.mark.parametrize(
    ("args", "rate", "expected"),
    [
        (
            {"ramp-up-strategy": "linear", "ramp-up-end-rps": 2},
            "inf",
            "needs --ramp-up-start-rps in benchmark.args too",
        ),
        ({"ramp-up-end-rps": 2}, "inf", "benchmark.args.ramp-up-end-rps: needs --ramp-up-strategy"),
        (
            {"ramp-up-strategy": "linear", "ramp-up-start-rps": 5, "ramp-up-end-rps": 2},
            "inf",
            "5 is above --ramp-up-end-rps 2",
        ),
        ({"ramp-up-strategy": "exponential", "ramp-up-start-rps": 0, "ramp-up-end-rps": 2}, "inf", "0 must be above 0"),
        ({"burstiness": 0}, "4", "benchmark.args.burstiness: 0 must be above 0"),
        ({"header": ["Authorization"]}, "inf", '"Authorization" is not KEY=VALUE'),
        ({"goodput": "tpot:-5"}, "inf", '"tpot:-5" is not NAME:MILLISECONDS'),
        ({"metric-percentiles": "p50"}, "inf", '"p50" is not numbers separated by commas'),
        ({"random-range-ratio": 1}, "inf", "1 must be below 1"),
        ({"sonnet-input-len": 100}, "inf", "applies to --dataset-name sonnet, not benchmark.workload.dataset random"),
    ],
)
def test_bench_args_vllm_would_refuse_or_ignore_are_refused(render: Renderer, args: dict, rate: str, expected: str):
    values = {"benchmark": {"enabled": True, "workload": {"requestRate": rate}, "args": args}}
    assert expected in render.error(overrides=values)


# benchmark.tokenizer, when not a path, is a Hugging Face repo id: the chart refuses exactly what
# huggingface_hub's validate_repo_id refuses (within the schema's ASCII form).
REPO_IDS = [
    "Qwen/Qwen2.5-7B-Instruct",
    "gpt2",
    "1/2",
    "o_/n_",
    "org/" + "a" * 96,
    "org/" + "a" * 97,
    "a--b/c",
    "a/b..c",
    "org/name.",
    "org/name-",
    "org./name",
    "org/x.git",
    "org/x.gitx",
]


@functools.cache
def hub_verdicts() -> dict[str, bool]:
    """validate_repo_id's verdict on each of REPO_IDS, from the huggingface_hub the e2e venv holds
    (0.36.2, the one vLLM 0.13.0's CPU release installs; .tools/e2e, make e2e-install)."""
    python = paths.e2e_venv(paths.E2E_FIRST_CPU) / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/install-e2e.sh gate (its huggingface_hub judges the ids)")
    program = (
        "import json, sys\n"
        "from huggingface_hub.utils import HFValidationError, validate_repo_id\n"
        "out = {}\n"
        "for r in json.load(sys.stdin):\n"
        "    try:\n"
        "        validate_repo_id(r); out[r] = True\n"
        "    except HFValidationError:\n"
        "        out[r] = False\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [str(python), "-c", program], input=json.dumps(REPO_IDS), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


@pytest.mark.parametrize("repo_id", REPO_IDS, ids=lambda r: r[:24])
def test_tokenizer_repo_ids_are_refused_as_huggingface_hub_refuses(render: Renderer, repo_id: str):
    values = {"benchmark": {"enabled": True, "tokenizer": repo_id}}
    if hub_verdicts()[repo_id]:
        assert job(render(overrides=values))
    else:
        assert f'benchmark.tokenizer: "{repo_id}"' in render.error(overrides=values)
