"""Runtime conformance: every container the chart renders that can run here runs its real
command, with exactly its rendered env and as its rendered user, in its image's Python
(`make conformance`; `make test` runs it too). tests/support/localpods.py says what stands in for
what: the vLLM-Ascend image's Python is vLLM 0.13.0 plus the `vllm-ascend==0.13.0` wheel (its
entry points load) and torch_npu 2.8.0.post2, without CANN or a driver, as in a pod with no NPU.

- The PD proxy starts, passes its readiness probe and serves a chat and a completion request
  through stand-in engines (tests/support/openai_standin.py on the engines' ports), sending
  prefill the NIXL/Mooncake parameters and decode what prefill answered; a client's
  /instances/add is refused (the guard, chart/files/proxy_guard.py).
- The helm test pod's script passes against it (or against a stand-in Kthena router).
- The benchmark Job's script completes against it: `vllm bench serve` with its tokenizer read
  from the model volume (a stand-in folder with a tokenizer), and its result on the marker line.
- The download init containers get past their imports to the network call: the hub endpoint is
  a closed local port (HF_ENDPOINT, MODELSCOPE_DOMAIN), so they must fail on the connection.
- Accelerator containers (the engines) cannot run without their device; the cpu profile's do,
  in the e2e run (tests/test_e2e.py).

A container added later is covered without a new test: every container of every scenario is
run, and one whose image has no Python here fails the test (localpods.IMAGE_PYTHONS).

The later engine versions (v0.18.0, v0.23.0) run their own proxy from their image in their
image's Python (that release's vllm, vllm-ascend and torch_npu over the same venv; Python 3.11
here, where v0.23.0's image has 3.12), and each version's rendered --kv-transfer-config goes
through that version's own KVTransferConfig, connector registry and vLLM-Ascend's
check_kv_extra_config (tests/support/kvconfig_check.py).

Also here: ModelScope's own revision check on the rendered revision, the per-node start scripts
of multi-node roles against vLLM 0.13.0's option list, and the NetworkPolicies' data path.
What it cannot prove: the image's exact torch (2.8 there, 2.9.1 here, the CPU build of vLLM
here), that vLLM-Ascend or Mooncake start (no NPU), that a CNI enforces the policies, or
anything that needs a cluster.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from conftest import Rendered, Renderer
from mooncake_pd import bench, engines, paths, validate, vllmflags
from support import netpol, podlisting
from support.localpods import (
    E2E_VENV,
    LATER_ASCEND,
    Container,
    Network,
    Proc,
    Processes,
    image_files,
    image_python,
    pod_specs,
    post_json,
    prepare,
    run_to_end,
    wait_ready,
)
from support.podlisting import PodListing

# The stand-ins and the proxy listen on fixed ports, so this module runs in one process: `make
# test` runs tests in two with --dist loadfile, which keeps a module on one worker (xdist 3.8's
# xdist_group does nothing under pytest 9.2: it renames item._nodeid, which pytest 9 no longer reads).
pytestmark = pytest.mark.conformance

TESTS = Path(__file__).resolve().parent
ACCELERATORS = ("huawei.com/ascend-1980", "huawei.com/Ascend910", "nvidia.com/gpu")
TORCH_NPU_FAILURE = "Failed to load the backend extension: torch_npu"
ENGINE_PORTS = (7100, 7101)
ROUTER_PORT = 18880
CLOSED_PORT = 9  # discard: nothing listens there
OUT = paths.REPO / "out" / "conformance"

DOWNLOAD = {"model": {"storage": {"type": "download", "claimName": "models"}, "download": {"repo": "org/model"}}}
SCENARIOS = {
    "defaults": {},
    "nvidia": {"accelerator": {"type": "nvidia"}, "decode": {"args": {"additional-config": None}}},
    "ascend-a2": {"accelerator": {"type": "ascend-a2"}},
    "cpu": None,  # chart/ci/cpu-values.yaml
    "download-huggingface": DOWNLOAD,
    "download-modelscope": {"model": {**DOWNLOAD["model"], "download": {"repo": "org/model", "hub": "modelscope"}}},
    "benchmark": {"benchmark": {"enabled": True, "workload": {"numPrompts": 8, "inputLen": 32, "outputLen": 8}}},
    # The later engine versions: their proxy, from their image, in their image's Python.
    "ascend-v0.18.0": {"engine": {"version": "v0.18.0"}},
    "ascend-v0.23.0": {"image": {"tag": "v0.23.0-a3"}, "decode": {"args": {"additional-config": None}}},
    # Last: they run no proxy, and the proxy the others share then starts once (Servers).
    "kthena-router": {"router": {"type": "kthena", "kthena": {"servicePort": ROUTER_PORT}}, "decode": {"port": 7100}},
    "benchmark-kthena-router": {
        "router": {"type": "kthena", "kthena": {"servicePort": ROUTER_PORT}},
        "decode": {"port": 7100},
        "benchmark": {"enabled": True, "workload": {"numPrompts": 8, "inputLen": 32, "outputLen": 8}},
    },
}


# The later engine versions' images (vLLM-Ascend v0.18.0, v0.23.0) run in `make test-all` only
# (marker `full`): each needs that release's overlay (vllm, vllm-ascend, torch_npu: 2.2 GB for
# the two) and checks what the gate's render tests already hold against that version's data
# (chart/files/engines/<version>/, tests/test_engine_versions.py); the gate runs v0.13.0's.
LATER_VERSION_SCENARIOS = {f"ascend-{v}" for v in LATER_ASCEND}


def later(value: Any, version: str) -> Any:
    """`value` as a pytest parameter, marked `full` where it belongs to a later engine version."""
    if version not in LATER_ASCEND:
        return value
    return pytest.param(*(value if isinstance(value, tuple) else (value,)), marks=pytest.mark.full)


def _render(render: Renderer, scenario: str) -> Rendered:
    if SCENARIOS[scenario] is None:
        return render((paths.CHART / "ci" / f"{scenario}-values.yaml",))
    return render(overrides=SCENARIOS[scenario])


def require_image(image: str) -> None:
    missing = image_python(image).missing()
    if missing:
        pytest.fail(f"{image}: its Python is not installed here ({missing[0]}): run `make e2e-venv`")


@pytest.fixture(scope="session")
def image_pythons() -> None:
    """The gate's images; a later engine version's test asks for its own (require_image)."""
    for image in ("quay.io/ascend/vllm-ascend:v0.13.0", "docker.io/vllm/vllm-openai:v0.13.0"):
        require_image(image)


@pytest.fixture(scope="session")
def standins(image_pythons):
    """Stand-in engines on the rendered engine ports and a stand-in Kthena router, recording what
    they are sent; a model folder with a real tokenizer (the tiny model's) for the benchmark."""
    # Under /var/tmp, not pytest's 0700 folder: the containers' users (65534) must reach it.
    base = Path(tempfile.mkdtemp(prefix="mooncake-pd-conformance-", dir="/var/tmp"))
    base.chmod(0o755)
    processes = Processes(OUT / "logs")
    made = run_to_end(
        processes,
        Container(
            "tiny-model",
            [
                str(E2E_VENV / "bin" / "python3"),
                str(TESTS / "e2e" / "tiny_model.py"),
                str(base / "models" / "DeepSeek-R1-Distill-Qwen-1.5B"),
            ],
            {"PATH": "/usr/bin:/bin", "HOME": str(base)},
            base,
            None,
        ),
        timeout=120,
    )
    assert made[0] == 0, made[1][-2000:]
    for path in (base / "models").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        for port in (*ENGINE_PORTS, ROUTER_PORT):
            argv = [
                str(E2E_VENV / "bin" / "python3"),
                str(TESTS / "support" / "openai_standin.py"),
                "--port",
                str(port),
                "--model",
                "ds_r1",
                "--record",
                str(base / f"requests-{port}.jsonl"),
            ]
            proc = processes.start(f"standin-{port}", argv, {"PATH": "/usr/bin:/bin"}, base)
            wait_ready(proc, f"http://127.0.0.1:{port}/health", 30)
        yield base
    finally:
        processes.close()
        shutil.rmtree(base, ignore_errors=True)


def cpu_containers(rendered: Rendered) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, pod spec, container) for every container that is not an engine: the Deployments',
    Jobs' and Pods' containers and the engines' pods' init containers. The engines need their
    accelerator; the cpu profile's run for real in the e2e run."""
    found = []
    engines_pods = {label: pod["spec"] for label, pod in validate.pod_templates(rendered.modelserving)}
    for where, spec in {**pod_specs(rendered.objects), **engines_pods}.items():
        containers = spec.get("initContainers", []) + ([] if where in engines_pods else spec["containers"])
        for container in containers:
            limits = (container.get("resources") or {}).get("limits") or {}
            assert not set(limits) & set(ACCELERATORS), f"{where}: {container['name']} asks for an accelerator"
            found.append((f"{where} container {container['name']}", spec, container))
    return found


def _network(rendered: Rendered) -> Network:
    network = Network()
    network.add_services(rendered.objects)
    network.add("kthena-router.kthena-system.svc", ROUTER_PORT, ROUTER_PORT)
    return network


def _requests(standins: Path, port: int) -> list[dict[str, Any]]:
    path = standins / f"requests-{port}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# Runs are a function of what is run: helm 3 and 4 render the same containers, and scenarios
# share most of theirs (the helm test pod, the proxy of two profiles), so each runs once.
_outcomes: dict[str, str] = {}


def _key(container: Container) -> str:
    return json.dumps([container.argv, sorted(container.env.items()), container.user], default=str)


class Servers:
    """The render's servers (the proxy), left running between scenarios, one per port: a server
    that several renders share (helm 3 and 4, most scenarios) starts, and is checked, once."""

    def __init__(self, processes: Processes, standins: Path):
        self.processes = processes
        self.standins = standins
        self.running: dict[str, tuple[str, Proc]] = {}

    def serve(self, server: Container) -> str:
        """Have `server` running; "" or why it does not serve (then it is stopped)."""
        key = _key(server)
        current = self.running.get(server.probe_url)
        if current and current[0] == key and current[1].popen.poll() is None:
            return _outcomes[key]
        if current:
            self.processes.stop(current[1])
            del self.running[server.probe_url]
        proc = self.processes.run(server, f"{server.name}-{len(_outcomes)}")
        try:
            wait_ready(proc, server.probe_url, 120)
            if key not in _outcomes:
                _outcomes[key] = _check_server(server, self.standins)
        except Exception as e:  # the reason, with the server's log
            _outcomes[key] = f"{server.name}: {e}"
        if _outcomes[key]:
            _outcomes[key] += f"\n{proc.tail()}"
            self.processes.stop(proc)
        else:
            self.running[server.probe_url] = (key, proc)
        return _outcomes[key]

    def keep_only(self, servers: list[Container]) -> None:
        """Stop what a render does not run: its clients must not reach an earlier render's server."""
        wanted = {(s.probe_url, _key(s)) for s in servers}
        for url, (key, proc) in list(self.running.items()):
            if (url, key) not in wanted:
                self.processes.stop(proc)
                del self.running[url]


@pytest.fixture(scope="session")
def servers(standins: Path):
    processes = Processes(OUT / "logs")
    try:
        yield Servers(processes, standins)
    finally:
        processes.close()


def run_scenario(rendered: Rendered, servers: Servers, workdir: Path) -> dict[str, str]:
    """Run every CPU container of a render; where -> "" (passed) or what went wrong. A render
    whose containers have all run (helm 3 and 4 render the same) starts nothing."""
    network = _network(rendered)
    host_paths = {"/models": servers.standins / "models"}
    prepared, probed = {}, set()
    for where, spec, container in cpu_containers(rendered):
        if container.get("readinessProbe"):
            probed.add(where)
        prepared[where] = prepare(
            rendered.objects, spec, container, workdir / container["name"], network, host_paths=host_paths
        )
        if "DOWNLOAD_HUB" in prepared[where].env:
            prepared[where].env.update(
                {"HF_ENDPOINT": f"http://127.0.0.1:{CLOSED_PORT}", "MODELSCOPE_DOMAIN": f"127.0.0.1:{CLOSED_PORT}"}
            )
    if all(_key(c) in _outcomes for c in prepared.values()):
        return {where: _outcomes[_key(c)] for where, c in prepared.items()}
    running = {where: c for where, c in prepared.items() if where in probed}
    servers.keep_only(list(running.values()))
    outcomes = {where: servers.serve(server) for where, server in running.items()}
    processes = Processes(OUT / "logs")
    listings: list[PodListing] = []
    try:
        for where, client in prepared.items():
            if where not in outcomes:
                key = _key(client)
                if key not in _outcomes:
                    listings += _list_pods_for(client, workdir / f"listing-{len(listings)}")
                    _outcomes[key] = _run_client(processes, client)
                outcomes[where] = _outcomes[key]
    finally:
        processes.close()
        for listing in listings:
            listing.close()
    return outcomes


def _list_pods_for(client: Container, folder: Path) -> list[PodListing]:
    """The KV canary behind Kthena's router lists the engine pods first: a stand-in of that one
    API call (tests/support/podlisting.py) with a prefill and a decode pod at the stand-in
    engine's address (both roles on one port under the router), its token and CA laid out where
    the container's projected volume is."""
    discover = json.loads(client.env.get("CANARY_CONFIG", "{}")).get("discover")
    if not discover:
        return []
    pods = [
        podlisting.engine_pod(f"standin-{role}", "standin-0", discover["roles"][role], "127.0.0.1")
        for role in ("prefill", "decode")
    ]
    listing = PodListing(folder, discover["namespace"], pods)
    client.env.update(listing.lay_out(Path(discover["serviceAccount"])))
    return [listing]


def _check_server(server: Container, standins: Path) -> str:
    """The proxy, ready: a chat and a completion request through it, each sent to prefill with
    the KV parameters and then to decode with what prefill answered."""
    base = server.probe_url.rsplit("/", 1)[0]
    seen = {port: len(_requests(standins, port)) for port in ENGINE_PORTS}
    chat = post_json(
        f"{base}/v1/chat/completions",
        {"model": "ds_r1", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
    )
    text = post_json(f"{base}/v1/completions", {"model": "ds_r1", "prompt": "Hi", "max_tokens": 4})
    if not chat["choices"][0]["message"]["content"] or not text["choices"][0]["text"]:
        return f"{server.name}: empty answers {chat} {text}"
    prefill, decode = (_requests(standins, port)[seen[port] :] for port in ENGINE_PORTS)
    # The rendered command runs the script behind chart/files/proxy_guard.py: a client's order
    # is refused (tests/test_proxy_serves_users_not_orders.py judges the guard itself).
    order = urllib.request.Request(
        f"{base}/instances/add",
        data=b'{"type": "decode", "instances": ["127.0.0.1:9"]}',
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(order, timeout=30) as answer:
            return f"{server.name}: POST /instances/add answered HTTP {answer.status}, not 404"
    except urllib.error.HTTPError as e:
        if e.code != 404:
            return f"{server.name}: POST /instances/add answered HTTP {e.code}, not 404"
    if [r["body"]["kv_transfer_params"]["do_remote_decode"] for r in prefill] != [True, True]:
        return f"{server.name}: prefill was not asked for remote decode: {prefill}"
    if [r["body"]["kv_transfer_params"]["remote_engine_id"] for r in decode] != ["standin", "standin"]:
        return f"{server.name}: decode did not get prefill's kv_transfer_params: {decode}"
    return ""


def _run_client(processes: Processes, client: Container) -> str:
    code, output = run_to_end(processes, client, 300)
    if "DOWNLOAD_HUB" in client.env:
        # Up to the network call: past the imports (the torch_npu failure is a RuntimeError or
        # ImportError there), failing on the hub's closed port.
        if code != 0 and "downloading" in output and "Connection refused" in output and TORCH_NPU_FAILURE not in output:
            return ""
        return f"{client.name}: did not reach the hub (exit {code}):\n{output[-3000:]}"
    if code != 0:
        return f"{client.name}: exit {code}:\n{output[-3000:]}"
    if client.name == "bench":
        result = bench.parse_log(output.splitlines())
        if not result or result.get("completed", 0) < 1 or result.get("failed"):
            return f"{client.name}: no complete result: {str(result)[:500]}"
    return ""


@pytest.mark.parametrize("scenario", [later(s, s.removeprefix("ascend-")) for s in SCENARIOS], ids=list(SCENARIOS))
def test_every_cpu_container_runs_its_real_command(render: Renderer, servers: Servers, scenario: str):
    if scenario in LATER_VERSION_SCENARIOS:
        require_image(f"quay.io/ascend/vllm-ascend:{scenario.removeprefix('ascend-')}-a3")
    rendered = _render(render, scenario)
    outcomes = run_scenario(rendered, servers, servers.standins / "pods")
    names = {where.rsplit(" ", 1)[1] for where in outcomes}
    assert "chat" in names and "kv-canary" in names
    assert ("proxy" in names) == ("kthena" not in scenario)
    assert ("download-model" in names) == scenario.startswith("download")
    assert ("bench" in names) == scenario.startswith("benchmark")
    failed = {where: why for where, why in outcomes.items() if why}
    assert failed == {}, "\n\n".join(f"{w}: {why}" for w, why in failed.items())


def test_the_vllm_ascend_image_python_reproduces_the_npu_less_pod(image_pythons):
    """Control: in the vLLM-Ascend image's Python, without the chart's env, `import torch` fails
    as in a pod without an NPU; with TORCH_DEVICE_BACKEND_AUTOLOAD=0 torch imports. (That vLLM's
    CLI still dies there, loading the vllm_ascend platform plugin, is the next test; that vLLM's
    own image runs `vllm bench serve` is the benchmark scenarios above.)"""
    ascend = image_python("quay.io/ascend/vllm-ascend:v0.13.0")
    proc = _python(ascend, ["-c", "import torch"], {})
    assert proc.returncode != 0 and TORCH_NPU_FAILURE in proc.stderr, proc.stderr[-2000:]
    assert _python(ascend, ["-c", "import torch"], {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).returncode == 0


@pytest.mark.parametrize(
    ("version", "needs_autoload_off"),
    [later(("v0.13.0", True), "v0.13.0"), later(("v0.18.0", True), "v0.18.0"), later(("v0.23.0", False), "v0.23.0")],
    ids=["v0.13.0", "v0.18.0", "v0.23.0"],
)
def test_which_proxy_needs_torch_autoload_off(image_pythons, version: str, needs_autoload_off: bool):
    """Each version's proxy in its image's Python, without the chart's env: v0.13.0 imports vLLM
    (so torch, so torch_npu without a driver); v0.18.0 wraps that import in `except ImportError`,
    which torch_npu's RuntimeError escapes; v0.23.0 imports neither. The chart sets
    TORCH_DEVICE_BACKEND_AUTOLOAD=0 for all three (mooncake-pd.env.cpuPython): the other CPU
    containers in the image (download, benchmark) still import torch."""
    require_image(f"quay.io/ascend/vllm-ascend:{version}-a3")
    image = image_python(f"quay.io/ascend/vllm-ascend:{version}-a3")
    script = next(iter(image_files(f"quay.io/ascend/vllm-ascend:{version}-a3").values()))
    proc = _python(image, [str(script), "--help"], {})
    if needs_autoload_off:
        assert proc.returncode != 0 and TORCH_NPU_FAILURE in proc.stderr, proc.stderr[-2000:]
        assert _python(image, [str(script), "--help"], {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).returncode == 0
    else:
        assert proc.returncode == 0 and "--prefiller-hosts" in proc.stdout, proc.stderr[-2000:]


def _kv_checks(version: str, rows: list[dict[str, Any]]) -> dict[str, str]:
    """tests/support/kvconfig_check.py in the vLLM-Ascend image's Python of `version`: role ->
    what that version's own code refuses in the role's --kv-transfer-config ("" for nothing)."""
    image = image_python(f"quay.io/ascend/vllm-ascend:{version}-a3")
    script = TESTS / "support" / "kvconfig_check.py"
    proc = _python(image, [str(script), json.dumps(rows)], {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # vLLM logs to stdout too: the script's own lines are the JSON ones.
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"role"')]
    return {r["role"]: r["problem"] for r in map(json.loads, lines)}


@pytest.mark.parametrize("version", [later(v, v) for v in ("v0.13.0", *LATER_ASCEND)], ids=["v0.13.0", *LATER_ASCEND])
def test_each_versions_own_code_accepts_the_rendered_kv_transfer_config(render: Renderer, image_pythons, version):
    """The rendered --kv-transfer-config of both roles through that version's vLLM
    (KVTransferConfig, which refuses unknown keys from 0.18; its connector registry after
    vLLM-Ascend's own register_connector; the module path, where written) and vLLM-Ascend's
    check_kv_extra_config against the role's TP and DP, as they run at start. The controls show
    the same checks refusing what the chart refuses at render for that version."""
    require_image(f"quay.io/ascend/vllm-ascend:{version}-a3")
    values = {"engine": {"version": version}, "decode": {"args": {"additional-config": None}}}
    rendered = render(overrides=values)
    rows = []
    for run in engines.entry_runs(rendered.objects):
        argv = run.run.argv
        config = json.loads(argv[argv.index("--kv-transfer-config") + 1])
        # The parallel sizes as vLLM reads them: from the command line.
        tensor = argv[argv.index("--tensor-parallel-size") + 1]
        data = argv[argv.index("--data-parallel-size") + 1]
        rows.append({"role": run.role, "config": config, "tensor": tensor, "data": data})
    stale = {**rows[0]["config"], "kv_connector_module_path": "vllm_ascend.distributed.mooncake_connector"}
    unknown = {**rows[0]["config"], "kv_buffer_sizes": 1}
    wrong_dp = {**rows[0]["config"], "kv_connector_extra_config": {"prefill": {"tp_size": 2, "dp_size": 1}}}
    controls = [
        {**rows[0], "role": "stale-module", "config": stale},
        {**rows[0], "role": "unknown-key", "config": unknown},
        {**rows[0], "role": "wrong-dp", "config": wrong_dp},
    ]
    found = _kv_checks(version, rows + controls)
    assert {r["role"]: found[r["role"]] for r in rows} == {"prefill": "", "decode": ""}, found
    assert ("ModuleNotFoundError" in found["stale-module"]) == (version != "v0.13.0"), found
    assert ("unexpected_keyword_argument" in found["unknown-key"]) == (version != "v0.13.0"), found
    assert "conflicting data parallel size" in found["wrong-dp"], found


def test_the_old_benchmark_image_dies_at_import(render: Renderer, servers: Servers):
    """The benchmark Job as 0.2.0 rendered it (the vLLM-Ascend engine image) fails here, as it
    did on the cluster: the conformance run catches the class of defect. Its env turns torch's
    device autoload off, so what kills it is vLLM's CLI loading the vllm_ascend platform plugin
    (torch_npu needs libhccl, the driver's), not `import torch`."""
    overrides = {
        **SCENARIOS["benchmark"],
        "benchmark": {
            **SCENARIOS["benchmark"]["benchmark"],
            "image": {"repository": "quay.io/ascend/vllm-ascend", "tag": "v0.13.0-a3"},
        },
    }
    rendered = render(overrides=overrides)
    job = rendered.one("Job")["spec"]["template"]["spec"]["containers"][0]
    assert container_env(job)["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    outcomes = run_scenario(rendered, servers, servers.standins / "pods")
    bench_outcome = next(why for where, why in outcomes.items() if where.endswith("container bench"))
    assert "torch_npu" in bench_outcome or "libhccl" in bench_outcome, bench_outcome
    assert TORCH_NPU_FAILURE not in bench_outcome, bench_outcome


@cache
def _cached(python: str, pythonpath: str, argv: tuple[str, ...], env: str) -> subprocess.CompletedProcess:
    full = {"PATH": f"{Path(python).parent}:/usr/bin:/bin", "HOME": "/tmp", **json.loads(env)}
    if pythonpath:
        full["PYTHONPATH"] = pythonpath
    return subprocess.run([*argv], env=full, capture_output=True, text=True, check=False, timeout=300)


def _python(image, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    python = str(image.venv / "bin" / "python3")
    return _cached(python, str(image.overlay or ""), (python, *args), json.dumps(env, sort_keys=True))


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's env as Kubernetes gives it; references resolve to a stand-in value."""
    return {e["name"]: e.get("value", "from-a-reference") for e in container.get("env", [])}


# ModelScope's own revision check (modelscope 1.33 hub/api.py get_valid_revision_detail) against a
# repository that has only ModelScope's default branch, as most do: the rendered revision, then the
# chart's old default, main, which ModelScope refuses (one process: importing modelscope takes seconds).
REVISION_CHECK = """
import os
from modelscope.hub.api import HubApi
api = HubApi()
api.get_model_branches_and_tags_details = lambda *a, **k: ([{"Revision": "master", "CreatedAt": 0}], [])
print("rendered:", api.get_valid_revision_detail(os.environ["DOWNLOAD_REPO"], revision=os.environ["DOWNLOAD_REVISION"]))
try:
    api.get_valid_revision_detail(os.environ["DOWNLOAD_REPO"], revision="main")
except Exception as e:
    print("main:", type(e).__name__)
else:
    print("main: accepted")
"""


@pytest.mark.parametrize(("hub", "revision"), [("modelscope", "master"), ("huggingface", "main")])
def test_download_asks_for_the_hubs_default_branch(render: Renderer, image_pythons, hub: str, revision: str):
    overrides = {"model": {**DOWNLOAD["model"], "download": {"repo": "org/model", "hub": hub}}}
    rendered = render(overrides=overrides)
    downloads = [c for _, _, c in cpu_containers(rendered) if c["name"] == "download-model"]
    assert len(downloads) == 2  # one in each role's pods
    env = container_env(downloads[0])
    assert env["DOWNLOAD_REVISION"] == revision
    python = image_python(downloads[0]["image"])
    if hub == "modelscope":
        proc = _python(python, ["-c", REVISION_CHECK], env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "rendered: {" in proc.stdout, proc.stdout
        assert "main: NotExistError" in proc.stdout, proc.stdout
    else:
        code = (
            "import os; from huggingface_hub import constants; "
            "assert os.environ['DOWNLOAD_REVISION'] == constants.DEFAULT_REVISION"
        )
        assert _python(python, ["-c", code], env).returncode == 0


MULTI_NODE = (
    paths.VALUES_DIR / "deepseek-r1-w8a8-a3-2p1d-multinode.yaml",
    paths.CHART / "ci" / "multinode-values.yaml",
)


@pytest.mark.parametrize("values", MULTI_NODE, ids=lambda p: p.stem)
def test_multi_node_role_scripts_per_node(render: Renderer, values: Path):
    """Each node of a multi-node role gets its own engine_id and the DP flags vLLM expects, and
    every command line parses against vLLM 0.13.0's options."""
    rendered = render((values,))
    for role in rendered.modelserving["spec"]["template"]["roles"]:
        workers = role["workerReplicas"]
        ids = set()
        for index in range(workers + 1):
            pod = engines.PodIdentity("deepseek-pd", 0, role["name"], 0, index, workers=workers)
            template = role["workerTemplate"] if index else role["entryTemplate"]
            run = engines.run_template(rendered.objects, template, pod)
            assert vllmflags.check_argv(run.run.argv[2:]) == [], run.run.argv
            flags = run.serve["flags"]
            ids.add(flags["kv-transfer-config"]["engine_id"])
            if workers:
                local = int(flags["data-parallel-size-local"])
                assert flags["data-parallel-address"] == f"deepseek-pd-0-{role['name']}-0-0.default"
                assert int(flags.get("data-parallel-start-rank", 0)) == index * local
                assert ("headless" in flags) == (index > 0)
        assert len(ids) == workers + 1, f"{role['name']}: engine_ids {ids} are not one per node"


ENGINE = {"app.kubernetes.io/name": "mooncake-pd", "app.kubernetes.io/instance": "deepseek-pd"}


def _policies(rendered: Rendered) -> list[dict[str, Any]]:
    policies = rendered.find("NetworkPolicy")
    assert policies
    return policies


@pytest.mark.parametrize("port", [7100, 12321, 18003, 20345, 35555, 5600, 41000])
def test_network_policy_admits_the_engine_data_path(render: Renderer, port: int):
    """Engine to engine on any port: serving, DP RPC, kv side channels, and the ports opened at
    random (Mooncake's transfer-engine RPC, NIXL/UCX, DP's ZMQ and TCPStore)."""
    policies = _policies(render(overrides={"networkPolicy": {"enabled": True}}))
    prefill = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "prefill"})
    decode = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "decode"})
    assert netpol.allowed(policies, decode, prefill, port)
    assert netpol.allowed(policies, prefill, decode, port)


@pytest.mark.parametrize("router", ["proxy", "kthena"])
def test_network_policy_admits_the_router_and_nobody_else(render: Renderer, router: str):
    overrides: dict[str, Any] = {"networkPolicy": {"enabled": True}, "router": {"type": router}}
    if router == "kthena":
        overrides["decode"] = {"port": 7100}
    policies = _policies(render(overrides=overrides))
    prefill = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "prefill"})
    if router == "proxy":
        client = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "proxy"})
        proxy = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "proxy"})
        test_pod = netpol.Pod({**ENGINE, "app.kubernetes.io/component": "test"})
        assert netpol.allowed(policies, test_pod, proxy, 8080)
    else:
        client = netpol.Pod({"app.kubernetes.io/component": "kthena-router"}, namespace="kthena-system")
    stranger = netpol.Pod({"app": "other"})
    assert netpol.allowed(policies, client, prefill, 7100)
    assert not netpol.allowed(policies, client, prefill, 18000)
    assert not netpol.allowed(policies, stranger, prefill, 7100)
    assert not netpol.allowed(policies, stranger, prefill, 18000)
