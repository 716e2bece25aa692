"""`generate` and `update`: values from a model's config.json, checked, written atomically."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import Renderer, assert_valid
from mooncake_pd import (
    chartfiles,
    device_fit,
    engine_quantization,
    header,
    kv_cache,
    model,
    paths,
    sizing,
    topology,
    values_file,
)
from mooncake_pd.header import command_lines
from mooncake_pd.values_file import MODELINE, dump_new, schema_ref

FIXTURES = Path(__file__).parent / "fixtures"
MODELS = FIXTURES / "models"
# Real config.json files of current architectures, each with its SOURCE.md.
ARCHITECTURES = FIXTURES / "architectures"
BROKEN = FIXTURES / "broken"
VALUES_FILES = sorted(paths.VALUES_DIR.glob("*.yaml"))
# Files the tool cannot write (the cpu profile has no device memory to estimate); each says so.
HAND_WRITTEN = [p for p in VALUES_FILES if "\n# Written by hand:" in p.read_text()]
GENERATED = [p for p in VALUES_FILES if p not in HAND_WRITTEN]


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mooncake_pd", *map(str, args)], capture_output=True, text=True, cwd=paths.REPO
    )


@pytest.mark.parametrize(
    ("name", "tensor", "expected"),
    [
        ("DeepSeek-R1-Distill-Qwen-1.5B", 2, 2 * 28 * 1 * 128 * 2),  # 2 KV heads over TP 2
        ("DeepSeek-R1-Distill-Qwen-7B", 1, 2 * 28 * 4 * 128 * 2),
        ("DeepSeek-R1-Distill-Qwen-7B", 2, 2 * 28 * 2 * 128 * 2),
        ("DeepSeek-R1-Distill-Qwen-32B", 4, 2 * 64 * 2 * 128 * 2),
        ("Qwen2.5-7B-Instruct-AWQ", 1, 2 * 28 * 4 * 128 * 2),  # float16 KV, 4-bit weights
        ("Qwen3-8B", 2, 2 * 36 * 4 * 128 * 2),  # head_dim from config.json
        ("Llama-3.1-8B-Instruct", 16, 2 * 32 * 1 * 128 * 2),  # 8 KV heads replicated over TP 16
        ("DeepSeek-R1", 8, 61 * (512 + 64) * 2),  # MLA latent, the same on every TP rank
        ("DeepSeek-R1", 1, 61 * (512 + 64) * 2),
    ],
)
def test_kv_bytes_per_token(name: str, tensor: int, expected: int):
    assert kv_cache.kv_bytes_per_token(model.load(MODELS / name), tensor) == expected


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("DeepSeek-R1-Distill-Qwen-1.5B", 1.78),
        ("DeepSeek-R1-Distill-Qwen-7B", 7.62),
        ("DeepSeek-R1-Distill-Qwen-32B", 32.76),
        ("Qwen3-8B", 8.19),
        ("Llama-3.1-8B-Instruct", 8.03),
        ("DeepSeek-R1", 671.0),
    ],
)
def test_parameter_count_matches_published_size(name: str, billions: float):
    rest, experts = device_fit.parameters(model.load(MODELS / name))
    assert (rest + experts) / 1e9 == pytest.approx(billions, rel=0.01)


def test_head_dim_and_mla():
    qwen2 = model.load(MODELS / "DeepSeek-R1-Distill-Qwen-1.5B")
    assert (qwen2.needs_head_dim_override, qwen2.head_dim, qwen2.is_mla) == (True, 128, False)
    qwen3 = model.load(MODELS / "Qwen3-8B")
    assert (qwen3.needs_head_dim_override, qwen3.head_dim) == (False, 128)
    r1 = model.load(MODELS / "DeepSeek-R1")
    assert (r1.needs_head_dim_override, r1.is_mla) == (False, True)
    awq = model.load(MODELS / "Qwen2.5-7B-Instruct-AWQ").weight_sizes
    assert awq is not None and set(awq.sizes.values()) == {0.5}
    assert model.load(MODELS / "DeepSeek-R1-W8A8").ascend_quantization == "W8A8_DYNAMIC"


def generated(*args: str) -> tuple[dict, str]:
    proc = cli("generate", *args)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout), proc.stderr


def leaves(values, prefix=""):
    if isinstance(values, dict) and values:
        for k, v in values.items():
            yield from leaves(v, f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), values


def lookup(values: dict, dotted: str):
    node = values
    for part in dotted.split("."):
        node = node[part]
    return node


def test_generate_for_the_seed_model_equals_chart_defaults(render: Renderer):
    """Told the guide's NIC, generate writes the guide's deployment (seed parity)."""
    values, _ = generated(
        "--model-dir", MODELS / "DeepSeek-R1-Distill-Qwen-1.5B", "--served-name", "ds_r1", "--interface", "enp23s0f3"
    )
    defaults = values_file.chart_defaults()
    # But one key: the guide's trust-remote-code, which its model (no auto_map) does not need.
    assert values.pop("engine") == {"args": {"trust-remote-code": None}}
    for key, value in leaves(values):
        assert lookup(defaults, key) == value, key
    # head_dim is the preflight's, derived from the mounted model at start.
    assert "hfOverrides" not in values["model"]
    seed_file = paths.VALUES_DIR / "deepseek-r1-distill-qwen-1.5b-a3-1p1d.yaml"
    without_remote_code = render(overrides={"engine": {"args": {"trust-remote-code": None}}})
    assert render((seed_file,)).text == without_remote_code.text


def test_generate_without_override_when_config_has_head_dim():
    values, _ = generated("--model-dir", MODELS / "Qwen3-8B")
    assert "hfOverrides" not in values["model"]
    assert values["model"]["mla"] is False


def test_generate_fixed_head_dim_on_request():
    """For engine.preflight.checks.model false, where config.json is not read at start."""
    values, _ = generated("--model-dir", MODELS / "DeepSeek-R1-Distill-Qwen-1.5B", "--fixed-head-dim")
    assert values["model"]["hfOverrides"] == {"head_dim": 128}
    values, _ = generated("--model-dir", MODELS / "Qwen3-8B", "--fixed-head-dim")
    assert "hfOverrides" not in values["model"], "Qwen3's config.json has head_dim: nothing to fix"


# vLLM-Ascend's multi-node PD tutorial: prefill DP 2 x TP 8 per node, decode DP 32 x TP 1 on two nodes.
R1_TOPOLOGY = (
    *("--model-dir", str(MODELS / "DeepSeek-R1-W8A8"), "--prefill-tp", "8", "--prefill-dp", "2"),
    *("--decode-tp", "1", "--decode-dp", "32", "--decode-nodes", "2"),
)


def test_generate_mla_model():
    values, err = generated(*R1_TOPOLOGY, "--enable-expert-parallel")
    assert values["model"]["mla"] is True
    assert "hfOverrides" not in values["model"], "MLA: no head_dim"
    assert values["engine"]["args"] == {
        "enable-expert-parallel": True,
        "quantization": "ascend",
        "trust-remote-code": None,
    }
    assert values["decode"]["workerReplicas"] == 1
    assert values["decode"]["parallelism"] == {"tensor": 1, "data": 32, "dataLocal": 16}
    assert "70,272" in err


def quantized(tmp_path: Path, base: str, quantization_config: dict) -> Path:
    """A copy of a fixture model's config.json with a quantization_config (as the published
    Qwen3-8B-FP8 has quant_method fp8 with 128 x 128 blocks)."""
    folder = tmp_path / f"{base}-{quantization_config['quant_method']}"
    folder.mkdir()
    config = json.loads((MODELS / base / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": quantization_config}))
    return folder


FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}


def test_every_family_says_what_quantization_its_engine_loads():
    """Each accelerator family generate writes for has a row in model.ENGINE_QUANTIZATION."""
    assert {a.family for a in topology.ACCELERATORS.values()} <= set(engine_quantization.ENGINE_QUANTIZATION)


def weights_column(err: str, role: str) -> float:
    row = re.search(rf"^{role}\s+\d+ x \d+\s+[\d,]+\s+([\d.]+)", err, re.M)
    assert row, err
    return float(row[1])


def test_fp8_checkpoint_on_nvidia_is_one_byte_per_weight_without_warning(tmp_path: Path):
    """NVIDIA runs FP8 checkpoints natively (weight-only FP8 Marlin on A100): 1 byte per weight,
    half the BF16 checkpoint's, and no warning (the Ascend one printed here before)."""
    fp8 = quantized(tmp_path, "Qwen3-8B", FP8)
    # One byte per Linear weight and a float32 scale per 128 x 128 block (vllm v0.13.0
    # quantization/fp8.py create_weights); embeddings and lm_head bf16.
    sizes = model.load(fp8).weight_sizes
    assert sizes is not None and sizes.bytes("attention") == sizes.bytes("denseMlp") == 1 + 4 / 128**2
    assert sizes.bytes("embeddings") == sizes.bytes("lmHead") == 2
    options = ("--accelerator", "nvidia", "--prefill-tp", "2", "--prefill-dp", "1", "--decode-tp", "2")
    _, err = generated("--model-dir", fp8, *options, "--decode-dp", "1")
    _, bf16_err = generated("--model-dir", MODELS / "Qwen3-8B", *options, "--decode-dp", "1")
    assert "WARNING" not in err and "vLLM-Ascend" not in err, err
    expected = device_fit.device_weight_bytes(model.load(fp8), 2, 1, expert_parallel=False) / model.GIB
    assert weights_column(err, "decode") == pytest.approx(expected, abs=0.05)
    # About half the BF16 checkpoint's: Qwen3-8B's untied embeddings and lm_head (1.2B of 8.2B
    # parameters) stay BF16.
    assert 0.5 < weights_column(err, "decode") / weights_column(bf16_err, "decode") < 0.6
    # DeepSeek-V3/R1 as published (quant_method fp8): 671B at 1 byte over TP 8 fit an H200.
    _, err = generated(
        *("--model-dir", MODELS / "DeepSeek-R1", "--accelerator", "nvidia", "--gpu", "h200"),
        *("--prefill-tp", "8", "--prefill-dp", "1", "--decode-tp", "8", "--decode-dp", "1"),
    )
    assert "WARNING" not in err, err
    assert weights_column(err, "prefill") == pytest.approx(671e9 / 8 / model.GIB, rel=0.01)


@pytest.mark.parametrize("accelerator", ["ascend-a3", "ascend-a2"])
@pytest.mark.parametrize(("name", "method"), [("DeepSeek-R1", "fp8"), ("Qwen2.5-7B-Instruct-AWQ", "awq")])
def test_ascend_refuses_checkpoints_vllm_ascend_does_not_load(accelerator: str, name: str, method: str):
    """vLLM-Ascend (v0.13.0 vllm_ascend/platform.py supported_quantization: ascend,
    compressed-tensors) stops at start on an FP8 or AWQ checkpoint: generate refuses it instead
    of sizing it at 1 byte (or 0.5) with a warning."""
    options = ("--prefill-tp", "8", "--prefill-dp", "1", "--decode-tp", "8", "--decode-dp", "1")
    proc = cli("generate", "--model-dir", MODELS / name, "--accelerator", accelerator, *options)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert f"--model-dir {MODELS / name} on {accelerator}: config.json has quantization_config quant_method " in (
        proc.stderr
    )
    assert f"{method}, which vLLM-Ascend does not run" in proc.stderr
    assert f'"{method} quantization is currently not supported in npu."' in proc.stderr
    assert "use the BF16 checkpoint or an msModelSlim W8A8 one" in proc.stderr
    assert proc.stderr.rstrip().endswith("or --accelerator nvidia"), proc.stderr


def test_update_refuses_an_fp8_checkpoint_on_ascend(tmp_path: Path):
    out = tmp_path / "qwen3.yaml"
    assert cli("generate", "--model-dir", MODELS / "Qwen3-8B", "--output", out).returncode == 0
    proc = cli("update", out, "--model-dir", quantized(tmp_path, "Qwen3-8B", FP8), "--check")
    assert proc.returncode == 2, proc.stderr
    assert "quant_method fp8, which vLLM-Ascend does not run" in proc.stderr


def test_quantization_the_estimate_cannot_size_is_warned(tmp_path: Path):
    """compressed-tensors loads on Ascend and on NVIDIA, but its bytes per weight are not in
    config.json's top level: sized at torch_dtype, with a warning. AWQ on NVIDIA: bits/8, silent."""
    compressed = quantized(tmp_path, "Qwen3-8B", {"quant_method": "compressed-tensors", "format": "int-quantized"})
    for accelerator in ("ascend-a3", "nvidia"):
        values, err = generated("--model-dir", compressed, "--accelerator", accelerator)
        assert (
            "WARNING: config.json has quantization_config (quant_method compressed-tensors): the estimate does not "
            "know its bytes per weight and counts 2 (torch_dtype bfloat16)"
        ) in err
        assert "quantization" not in values.get("engine", {}).get("args", {})
    _, err = generated("--model-dir", MODELS / "Qwen2.5-7B-Instruct-AWQ", "--accelerator", "nvidia")
    assert "WARNING" not in err, err


def test_generated_limits_respect_the_estimate():
    """Sized for sequences of max-model-len tokens (as before --expected-context-len existed), decode
    gets what fits; at the default 4096-token sequences it gets the chart's 40."""
    qwen3 = model.load(MODELS / "Qwen3-8B")
    fit = device_fit.fit(
        qwen3,
        role="decode",
        tensor=2,
        data=4,
        hbm_gib=64,
        memory_utilization=0.94,
        max_num_batched_tokens=256,
        max_num_seqs=40,
        max_model_len=40000,
    )
    values, err = generated("--model-dir", MODELS / "Qwen3-8B", "--expected-context-len", "40000")
    assert values["decode"]["args"]["max-num-seqs"] == fit.kv_tokens_per_rank // 40000 < 40
    assert "decode: max-num-seqs lowered from 40 to 18 so that 18 sequences of 40,000 tokens fit" in err
    assert re.search(r"decode\s+2 x 4\s+73,728", err), err
    values, err = generated("--model-dir", MODELS / "Qwen3-8B")
    assert values["decode"]["args"]["max-num-seqs"] == 40 < fit.kv_tokens_per_rank // 4096
    assert "lowered" not in err


def test_max_model_len_is_capped_by_max_position_embeddings():
    values, _ = generated("--model-dir", MODELS / "Qwen2.5-7B-Instruct")
    assert values["model"]["maxModelLen"] == 32768
    proc = cli("generate", "--model-dir", MODELS / "Qwen2.5-7B-Instruct", "--max-model-len", "65536")
    assert proc.returncode == 2
    assert "--max-model-len 65536: above max_position_embeddings (32768)" in proc.stderr
    values, err = generated("--model-dir", MODELS / "Qwen2.5-7B-Instruct", "--max-model-len", "65536", "--force")
    assert values["model"]["maxModelLen"] == 65536
    assert "WARNING: max-model-len 65536 is above max_position_embeddings" in err


BAD_OPTIONS = [
    (
        ["--prefill-tp", "5"],
        # 12 heads, 2 KV heads: 3 divides the heads, but the 2 KV heads cannot be split or replicated 3 ways.
        "--prefill-tp 5: 12 attention heads are not divisible by tensor parallel 5; valid on ascend-a3: 1, 2, 4, 6, 12",
    ),
    (["--decode-tp", "4", "--prefill-tp", "2"], "--prefill-tp 2: below --decode-tp 4"),
    (
        ["--prefill-tp", "3", "--decode-tp", "3"],
        "--prefill-tp 3: 2 KV heads and tensor parallel 3 do not divide each other",
    ),
    (
        ["--prefill-tp", "6", "--decode-tp", "4", "--prefill-dp", "2"],
        "--decode-tp 4: --prefill-tp 6 is not a multiple",
    ),
    (
        ["--prefill-tp", "4", "--prefill-dp", "8"],
        "--prefill-tp 4 x --prefill-dp 8 / --prefill-nodes 1 = 32 devices "
        "per pod, above the 16 of an ascend-a3 node; valid --prefill-dp",
    ),
    (["--accelerator", "ascend-a2", "--decode-dp", "8"], "above the 8 of an ascend-a2 node"),
    (["--decode-dp", "6", "--decode-nodes", "4"], "--decode-dp 6: not divisible by --decode-nodes 4"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=[" ".join(o) for o, _ in BAD_OPTIONS])
def test_bad_parallelism_exits_2_naming_the_option(tmp_path: Path, options, message):
    out = tmp_path / "values.yaml"
    out.write_text("keep: me\n")
    proc = cli("generate", "--model-dir", MODELS / "DeepSeek-R1-Distill-Qwen-1.5B", *options, "--output", out)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert out.read_text() == "keep: me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["values.yaml"]


# Issue #40 item 4: sizes below 1 ended in a ZeroDivisionError traceback (TP 0, nodes 0), were
# written (DP 0, TP -2), or became the default (max-model-len 0); a TP above the node's devices
# listed an empty set of valid DPs.
BAD_NUMBERS = [
    (["--prefill-tp", "0"], "argument --prefill-tp: 0 must be at least 1"),
    (["--prefill-nodes", "0"], "argument --prefill-nodes: 0 must be at least 1"),
    (["--prefill-dp", "0"], "argument --prefill-dp: 0 must be at least 1"),
    (["--decode-tp", "-2"], "argument --decode-tp: -2 must be at least 1"),
    (["--decode-replicas", "0"], "argument --decode-replicas: 0 must be at least 1"),
    (["--max-model-len", "0"], "argument --max-model-len: 0 must be at least 1"),
    (["--decode-dp", "two"], "argument --decode-dp: 'two' is not an integer; give a whole number of at least 1"),
    (["--device-memory-gib", "0"], "argument --device-memory-gib: 0 must be a finite number above 0"),
    (
        ["--prefill-tp", "32"],
        "--prefill-tp 32: above the 16 devices of an ascend-a3 node, which one TP group must fit; "
        "valid on ascend-a3: 1, 2, 4, 8, 16",
    ),
]


@pytest.mark.parametrize(("options", "message"), BAD_NUMBERS, ids=[" ".join(o) for o, _ in BAD_NUMBERS])
def test_a_size_that_cannot_work_exits_2_naming_the_option(tmp_path: Path, options: list[str], message: str):
    out = tmp_path / "values.yaml"
    out.write_text("keep: me\n")
    proc = cli("generate", "--model-dir", MODELS / "Qwen3-8B", *options, "--output", out)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr
    assert out.read_text() == "keep: me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["values.yaml"]


BROKEN_CASES = [
    ("missing-dir", "no such directory or file"),
    ("empty-dir", "config.json: missing; point --model-dir at a directory holding config.json"),
    ("invalid-json", "config.json: invalid JSON at line 2"),
    ("missing-heads", "config.json: num_attention_heads: missing"),
    ("string-layers", "config.json: num_hidden_layers: '28' is not an integer"),
    # Issue #40 item 3: a way forward, not a dead end.
    (
        "unknown-arch",
        "config.json: architectures: 'MambaForCausalLM' is not one the estimate knows (known: Qwen2ForCausalLM, ",
    ),
    ("unknown-arch", "give --architecture NAME to estimate it as a known architecture"),
    ("unknown-arch", "or --kv-bytes-per-token and --weights-gib"),
]


@pytest.mark.parametrize(("case", "message"), BROKEN_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(BROKEN_CASES)])
@pytest.mark.parametrize("command", ["generate", "update"])
def test_bad_model_files_exit_2_and_touch_nothing(tmp_path: Path, case: str, message: str, command: str):
    model_dir = BROKEN / case
    if case == "empty-dir":
        model_dir = tmp_path / "empty"
        model_dir.mkdir()
    elif case == "missing-dir":
        model_dir = tmp_path / "nowhere"
    target = tmp_path / "values.yaml"
    original = (paths.VALUES_DIR / "qwen3-8b-a3-1p1d.yaml").read_text()
    target.write_text(original)
    if command == "generate":
        proc = cli("generate", "--model-dir", model_dir, "--output", target)
    else:
        proc = cli("update", target, "--model-dir", model_dir)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert target.read_text() == original
    assert not list(tmp_path.glob("*.bak")) and not list(tmp_path.glob(".*.tmp"))


def test_generate_writes_atomically_and_keeps_a_backup(tmp_path: Path):
    out = tmp_path / "v.yaml"
    out.write_text("old: file\n")
    proc = cli("generate", "--model-dir", MODELS / "Qwen3-8B", "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "v.yaml.bak").read_text() == "old: file\n"
    text = out.read_text()
    # The header's command wraps where the paths are long (a deep checkout): read it back as argv
    # rather than expect one layout. The default expected context length is recorded, and the
    # command is written as an installed tool runs it.
    assert header.command(text) == [
        "mooncake-pd",
        "generate",
        "--model-dir",
        str(MODELS / "Qwen3-8B"),
        "--expected-context-len",
        "4096",
        "--output",
        str(out),
    ]


@pytest.mark.parametrize("depth", [0, 1, 3, 8])
def test_header_command_reads_back_under_any_path(depth: int):
    """Whatever the checkout's path, the recorded command wraps within the width, except a lone
    option too long for any line, and reads back as the same argv."""
    model = "/" + "/".join(["some-deeper-folder"] * depth + ["tests/fixtures/models/Qwen3-8B"])
    argv = ["python", "-m", "mooncake_pd", "generate", "--model-dir", model, "--output", "/tmp/a b/v.yaml", "--force"]
    lines = command_lines(argv)
    for line in lines:
        assert len(line) <= 96 or line.strip().count(" ") <= 2, line
    assert header.command("\n".join(f"# {line}" for line in lines)) == argv


def test_the_schema_line_points_at_the_chart_s_schema_from_where_the_file_is(tmp_path: Path):
    """`$schema=../chart/values.schema.json` pointed nowhere but from a checkout's values/: the
    reference is relative to the folder the file is written to (stdout: the current folder)."""
    schema = (paths.CHART / "values.schema.json").resolve()
    for out in (tmp_path / "v.yaml", tmp_path / "deeper" / "v.yaml", paths.VALUES_DIR / "never-written.yaml"):
        ref = schema_ref(paths.CHART, out)
        assert (out.parent / ref).resolve() == schema, ref
    assert schema_ref(paths.CHART, paths.VALUES_DIR / "x.yaml") == "../chart/values.schema.json"
    out = tmp_path / "deeper" / "v.yaml"
    out.parent.mkdir()
    proc = cli("generate", "--model-dir", MODELS / "Qwen3-8B", "--output", out)
    assert proc.returncode == 0, proc.stderr
    first = out.read_text().splitlines()[0]
    assert first.startswith(MODELINE)
    assert (out.parent / first.removeprefix(MODELINE)).resolve() == schema
    stdout = cli("generate", "--model-dir", MODELS / "Qwen3-8B").stdout
    assert stdout.startswith(f"{MODELINE}chart/values.schema.json\n"), "relative to the cwd, the checkout"


def test_the_installed_chart_s_schema_line_is_its_release_s(monkeypatch: pytest.MonkeyPatch):
    """The chart installed with the package lives in site-packages, which the next venv moves: its
    schema line is the file at the chart version's release tag (the tag is the chart's version)."""
    monkeypatch.setattr(paths, "PACKAGE", paths.REPO)
    version = yaml.safe_load((paths.CHART / "Chart.yaml").read_text())["version"]
    assert schema_ref(paths.CHART, None) == (
        f"https://raw.githubusercontent.com/mooncake-pd/mooncake-pd/v{version}/chart/values.schema.json"
    )


STALE = """\
# my comment stays
model:
  path: /models/Qwen3-8B   # inline comment stays
  servedName: qwen3
  hfOverrides:
    head_dim: 128          # wrong: Qwen3 has head_dim
    rope_theta: 1000000    # another override stays
  mla: true
myTeam:
  unknown: key stays
decode:
  args:
    max-num-seqs: 400
    max-num-batched-tokens: 512
"""


def test_update_rewrites_only_model_keys(tmp_path: Path):
    path = tmp_path / "values.yaml"
    path.write_text(STALE)
    check = cli("update", path, "--model-dir", MODELS / "Qwen3-8B", "--check")
    assert check.returncode == 1
    assert "-    head_dim: 128" in check.stdout and "+    head_dim" not in check.stdout
    assert path.read_text() == STALE, "--check changes nothing"
    proc = cli("update", path, "--model-dir", MODELS / "Qwen3-8B")
    assert proc.returncode == 0, proc.stderr
    text = path.read_text()
    assert (tmp_path / "values.yaml.bak").read_text() == STALE
    for kept in [
        "# my comment stays",
        "# inline comment stays",
        "rope_theta: 1000000    # another override stays",
        "myTeam:\n  unknown: key stays",
        "max-num-batched-tokens: 512",
        "servedName: qwen3",
    ]:
        assert kept in text
    new = yaml.safe_load(text)
    assert new["model"]["hfOverrides"] == {"rope_theta": 1000000}, "the preflight derives head_dim at start"
    assert new["model"]["mla"] is False
    assert new["decode"]["args"]["max-num-seqs"] < 400
    assert list(new) == ["model", "myTeam", "decode", "engine", "prefill"], "key order kept, new keys appended"
    # Up to date with the model now, but a key the chart's schema does not know is still refused.
    check = cli("update", path, "--model-dir", MODELS / "Qwen3-8B", "--check")
    assert (check.returncode, check.stdout) == (1, ""), check.stderr
    assert "the chart refuses it:" in check.stderr and "'myTeam' not allowed" in check.stderr


def model_dir_of(values_file: Path) -> Path:
    args = header.command(values_file.read_text())
    assert args is not None, f"{values_file}: no recorded command"
    return paths.REPO / args[args.index("--model-dir") + 1]


@pytest.mark.parametrize("values_file", GENERATED, ids=[p.stem for p in GENERATED])
def test_every_values_file_is_current(values_file: Path):
    text = values_file.read_text()
    assert text.startswith("# yaml-language-server: $schema=../chart/values.schema.json\n")
    proc = cli("update", values_file, "--model-dir", model_dir_of(values_file), "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=[p.stem for p in VALUES_FILES])
def test_every_values_file_renders_and_validates(render: Renderer, crds, values_file: Path):
    assert_valid(render((values_file,)), crds)


def test_generate_help_explains_every_option_and_the_formula():
    proc = cli("generate", "--help")
    assert proc.returncode == 0
    for option in [
        "--model-dir",
        "--accelerator",
        "--prefill-tp",
        "--decode-dp",
        "--prefill-nodes",
        "--decode-replicas",
        "--served-name",
        "--image",
        "--max-model-len",
        "--force",
        "--output",
        "--expected-context-len",
        "--interface",
    ]:
        assert option in proc.stdout
    assert "2 x layers x ceil(KV heads / TP)" in proc.stdout
    assert "estimated, not profiled" in proc.stdout
    text = " ".join(proc.stdout.split())
    assert "KV tokens per DP rank // --expected-context-len" in text
    assert '"sized for N-token sequences; one max-model-len sequence fits"' in text
    assert "(default: 4096, at most max-model-len" in text


def test_only_the_cpu_profile_is_written_by_hand():
    """A hand-written file is a cpu one and says why; the tool refuses cpu with the same reason."""
    assert [p.stem for p in HAND_WRITTEN] == ["qwen2.5-0.5b-instruct-cpu-1p1d"]
    for path in HAND_WRITTEN:
        assert yaml.safe_load(path.read_text())["accelerator"]["type"] in topology.HAND_WRITTEN
    proc = cli("update", HAND_WRITTEN[0], "--model-dir", "tests/fixtures/models/Qwen3-8B", "--check")
    assert proc.returncode == 2
    assert "accelerator.type 'cpu'" in proc.stderr and "kvCacheSpaceGiB" in proc.stderr


def test_accelerator_profiles_agree_with_the_chart(render: Renderer):
    schema_enum = yaml.safe_load((paths.CHART / "values.schema.json").read_text())["properties"]["accelerator"][
        "properties"
    ]["type"]["enum"]
    assert sorted([*topology.ACCELERATORS, *topology.HAND_WRITTEN]) == sorted(schema_enum)
    for name, profile in topology.ACCELERATORS.items():
        tensor = profile.devices_per_node // 4
        message = render.error(
            overrides={
                "accelerator": {"type": name},
                "prefill": {"parallelism": {"tensor": tensor * 2, "data": 4, "dataLocal": 4}},
                "decode": {"parallelism": {"tensor": tensor}},
            }
        )
        assert f"above the {profile.devices_per_node} devices of an {name} node" in message


def test_weights_that_leave_no_room_for_kv_exit_2():
    proc = cli("generate", *R1_TOPOLOGY)
    assert proc.returncode == 2
    assert "leave no room for the KV cache" in proc.stderr and "or --enable-expert-parallel" in proc.stderr
    # With expert parallel already on, the fix that works is more devices, not the flag again.
    small = ("--prefill-tp", "8", "--prefill-dp", "2", "--decode-tp", "1", "--decode-dp", "2")
    with_ep = cli("generate", "--model-dir", MODELS / "DeepSeek-R1-W8A8", *small, "--enable-expert-parallel")
    assert with_ep.returncode == 2 and "leave no room for the KV cache" in with_ep.stderr
    assert with_ep.stderr.split("leave no room")[1].count("--enable-expert-parallel") == 0
    assert (
        "raise --decode-tp or --decode-dp (or --decode-nodes): experts are spread over more devices" in with_ep.stderr
    )


@pytest.mark.parametrize("remote_code", [False, True])
def test_trust_remote_code_only_for_a_model_that_ships_its_own_classes(tmp_path: Path, remote_code: bool):
    """Remote code runs from the model folder in a root, host-network pod: generate writes
    trust-remote-code only where config.json names its own classes (auto_map), and null (which
    drops the chart default) elsewhere."""
    config = json.loads((MODELS / "Qwen3-8B" / "config.json").read_text())
    if remote_code:
        config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "values.yaml"
    proc = cli("generate", "--model-dir", model, "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(out.read_text())["engine"]["args"]["trust-remote-code"] is (True if remote_code else None)


def test_generate_and_the_preflight_share_one_tensor_parallel_rule(tmp_path: Path):
    """A 14B model with 40 heads and 8 KV heads: TP 5 and 10 divide the heads but not the KV
    heads. generate refuses them with the preflight's own words and lists what the preflight
    accepts; a TP generate accepts is one the preflight passes at start."""
    config = json.loads((MODELS / "Qwen2.5-7B-Instruct" / "config.json").read_text())
    config.update({"num_attention_heads": 40, "num_key_value_heads": 8, "hidden_size": 5120})
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    rules = chartfiles.program("preflight")
    for tensor in (5, 10):
        proc = cli("generate", "--model-dir", model, "--prefill-tp", str(tensor), "--output", tmp_path / "v.yaml")
        assert proc.returncode == 2
        assert f"8 KV heads and tensor parallel {tensor} do not divide each other" in proc.stderr
        assert "valid on ascend-a3: 1, 2, 4, 8\n" in proc.stderr
    assert rules.valid_tensor_parallel(config, 16) == [1, 2, 4, 8]
    for tensor in rules.valid_tensor_parallel(config, 16):
        assert rules.check_tensor_parallel(config, tensor, "prefill.parallelism.tensor").startswith(f"TP {tensor} fits")


def test_the_prefill_decode_tp_rule_is_the_profiles_connectors(tmp_path: Path, render: Renderer, crds):
    """generate applies the default connector's tensorRule (chart/files/profiles.yaml), as the
    chart does: MooncakeConnectorV1 on Ascend needs prefill TP >= decode TP, NIXL on NVIDIA
    does not (it was refused with MooncakeConnectorV1's words)."""
    args = ("generate", "--model-dir", MODELS / "Qwen3-8B", "--prefill-tp", "1", "--decode-tp", "2")
    ascend = cli(*args, "--output", tmp_path / "a.yaml")
    assert ascend.returncode == 2 and "MooncakeConnectorV1 needs prefill TP >= decode TP" in ascend.stderr
    nvidia = cli(*args, "--accelerator", "nvidia", "--output", tmp_path / "n.yaml")
    assert nvidia.returncode == 0, nvidia.stderr
    assert_valid(render((tmp_path / "n.yaml",)), crds)


def test_nixl_on_vllm_0_13_needs_decode_tp_a_multiple_of_prefill_tp_and_later_versions_either_way(
    tmp_path: Path, render: Renderer
):
    """NVIDIA's NIXL at v0.13.0 (tensorRule decodeMultiple): prefill TP 4 with decode TP 2 was
    written and then refused by render (issue 40 item 1); from v0.18.0 (divisible) it renders."""
    args = ("generate", "--model-dir", MODELS / "Qwen3-8B", "--accelerator", "nvidia", "--prefill-dp", "1")
    refused = cli(*args, "--prefill-tp", "4", "--decode-tp", "2", "--output", tmp_path / "a.yaml")
    assert refused.returncode == 2, refused.stdout
    assert "--decode-tp 2: not a multiple of --prefill-tp 4; NixlConnector" in refused.stderr
    assert "valid --decode-tp: 4, 8" in refused.stderr and not (tmp_path / "a.yaml").exists()
    later = tmp_path / "b.yaml"
    ok = cli(*args, "--prefill-tp", "4", "--decode-tp", "2", "--engine-version", "v0.18.0", "--output", later)
    assert ok.returncode == 0, ok.stderr
    assert render((later,)).one("ModelServing")
    # 32 heads allow no TP pair that fails "divisible"; the rule itself, as the chart words it:
    rule = dataclasses.replace(topology.ACCELERATORS["nvidia"], tensor_rule="divisible")
    with pytest.raises(topology.GenerateError, match="do not divide one another"):
        topology.check_tensor_rule(model.load(MODELS / "Qwen3-8B"), rule, 4, 6)


def test_generate_writes_interface_auto_unless_told(tmp_path: Path):
    """The guide's NIC (enp23s0f3, one vendor server's) is the chart's default for seed parity;
    generate writes auto (the default route's interface, found at start) unless --interface names one."""
    for accelerator in ("ascend-a3", "nvidia"):
        values, _ = generated("--model-dir", MODELS / "Qwen3-8B", "--accelerator", accelerator)
        assert values["network"] == {"interface": "auto"}
    values, _ = generated("--model-dir", MODELS / "Qwen3-8B", "--interface", "ens5f0")
    assert values["network"] == {"interface": "ens5f0"}
    out = tmp_path / "v.yaml"
    for bad in ("eth0/1", "a-much-too-long-name", "two words"):
        proc = cli("generate", "--model-dir", MODELS / "Qwen3-8B", "--interface", bad, "--output", out)
        assert proc.returncode == 2
        assert f"--interface {bad!r}: not a Linux interface name" in proc.stderr
    assert not out.exists()


def test_generated_nvidia_values_render_with_the_interface_found_at_start(tmp_path: Path, render: Renderer):
    out = tmp_path / "v.yaml"
    proc = cli("generate", "--model-dir", MODELS / "Qwen3-8B", "--accelerator", "nvidia", "--output", out)
    assert proc.returncode == 0, proc.stderr
    assert "enp23s0f3" not in render((out,)).text


LLAMA_ON_ONE_H100 = (
    *("--model-dir", str(MODELS / "Llama-3.1-8B-Instruct"), "--accelerator", "nvidia"),
    *("--prefill-tp", "1", "--prefill-dp", "1", "--decode-tp", "1", "--decode-dp", "1"),
)


def test_max_num_seqs_is_sized_by_the_expected_context_len(tmp_path: Path):
    """Llama-3.1-8B on one 80 GiB GPU holds 477,030 tokens of KV cache: sized as if every
    sequence ran at max-model-len (40000), decode got 11 sequences; at the expected 4096 it gets
    the chart's 40, and the header says what it assumed."""
    out = tmp_path / "v.yaml"
    proc = cli("generate", *LLAMA_ON_ONE_H100, "--output", out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    values = yaml.safe_load(text)
    assert (values["prefill"]["args"]["max-num-seqs"], values["decode"]["args"]["max-num-seqs"]) == (8, 40)
    assert re.search(r"# decode\s+1 x 1 .* 477,030\s+40 x 4,096\n", text), text
    assert (
        "# max-num-seqs sized for 4,096-token sequences (--expected-context-len); one max-model-len sequence "
        "(40,000 tokens) fits\n" in text
    )
    assert header.command(text)[-4:] == ["--expected-context-len", "4096", "--output", str(out)]
    for length, seqs in (("16384", 477_030 // 16384), ("40000", 11)):
        values, err = generated(*LLAMA_ON_ONE_H100, "--expected-context-len", length)
        assert values["decode"]["args"]["max-num-seqs"] == seqs
        assert (
            f"decode: max-num-seqs lowered from 40 to {seqs} so that {seqs} sequences of {int(length):,} tokens" in err
        )


def test_the_default_expected_context_len_is_at_most_max_model_len():
    values, err = generated(*LLAMA_ON_ONE_H100, "--max-model-len", "2048")
    assert "sized for 2,048-token sequences" in err
    assert values["decode"]["args"]["max-num-seqs"] == 40


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--expected-context-len", "50000"], "--expected-context-len 50000: above max-model-len 40000"),
        (["--expected-context-len", "0"], "argument --expected-context-len: 0 must be at least 1"),
        # One max-model-len sequence must still fit: R1 W8A8's prefill holds 217,467 tokens per rank.
        (
            ["--max-model-len", "300000", "--force"],
            "--max-model-len 300000: needs 300000 tokens of KV cache per DP rank, but prefill (TP 8) fits 217467",
        ),
    ],
)
def test_context_lengths_that_cannot_work_exit_2(options: list[str], message: str):
    proc = cli("generate", *R1_TOPOLOGY, "--enable-expert-parallel", *options)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_every_note_generate_writes_is_one_update_rewrites(tmp_path: Path):
    """update finds generate's notes in a header by how they begin (generate.is_note)."""
    notes = []
    compressed = quantized(tmp_path, "Qwen3-8B", {"quant_method": "compressed-tensors"})
    for args in (
        (*R1_TOPOLOGY, "--enable-expert-parallel"),
        ("--model-dir", str(compressed)),
        ("--model-dir", str(MODELS / "Qwen2.5-7B-Instruct"), "--max-model-len", "65536", "--force"),
        (*LLAMA_ON_ONE_H100, "--expected-context-len", "40000"),
    ):
        proc = cli("generate", *args)
        assert proc.returncode == 0, proc.stderr
        # Hints are printed, not written into the header: nothing for update to find there.
        notes += [line for line in proc.stderr.splitlines()[3:] if not line.startswith("hint: ")]
    assert len(notes) >= 7
    assert all(sizing.is_note(note) for note in notes), notes


# Issue #40 item 9: hints generate prints, not written into the file.
def test_decode_s_room_for_more_sequences_is_hinted_not_recorded(tmp_path: Path):
    """Llama-3.1-8B on one H100: decode's KV cache holds 116 sequences of 4,096 tokens, its
    max-num-seqs stays at the chart's 40: generate says so and how to use the room; the file's
    header (what update rewrites) does not carry the hint."""
    out = tmp_path / "v.yaml"
    proc = cli("generate", *LLAMA_ON_ONE_H100, "--output", out)
    assert proc.returncode == 0, proc.stderr
    hints = [line for line in proc.stderr.splitlines() if line.startswith("hint: ")]
    assert hints == [
        "hint: decode runs at most 40 sequences per DP rank (max-num-seqs) while its KV cache holds 116 sequences "
        "of 4,096 tokens; to run more at once (more throughput, a longer time per output token), set "
        "decode.args.max-num-seqs up to 116 in a second values file given after this one (update rewrites this "
        "file's)"
    ]
    assert "hint" not in out.read_text()
    # Sized for 40,000-token sequences, decode's max-num-seqs is what fits: no room left to hint at.
    proc = cli("generate", *LLAMA_ON_ONE_H100, "--expected-context-len", "40000")
    assert proc.returncode == 0 and "hint: " not in proc.stderr, proc.stderr


# Shaped like Qwen3-30B-A3B's config.json (huggingface.co/Qwen/Qwen3-30B-A3B): 48 layers, 128
# routed experts of 768, 8 per token.
QWEN3_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_a_moe_model_gets_a_hint_about_expert_parallelism(tmp_path: Path):
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_MOE))
    proc = cli("generate", "--model-dir", folder, "--decode-tp", "2", "--decode-dp", "1")
    assert proc.returncode == 0, proc.stderr
    (hint,) = [line for line in proc.stderr.splitlines() if "expert" in line and line.startswith("hint: ")]
    assert hint.startswith(
        "hint: Qwen3-30B-A3B is a mixture-of-experts model (128 routed experts): "
        "--enable-expert-parallel places whole experts on the TP x DP devices"
    )
    moe = model.load(folder)
    for role, tensor, data in (("prefill", 2, 4), ("decode", 2, 1)):
        before, after = (
            device_fit.device_weight_bytes(moe, tensor, data, expert_parallel=ep) / model.GIB for ep in (0, 1)
        )
        assert f"{role} TP {tensor} x DP {data}: {before:.1f} -> {after:.1f} GiB" in hint
    assert after == before, "with DP 1 the experts are split over the same devices either way"
    proc = cli("generate", "--model-dir", folder, "--enable-expert-parallel")
    assert proc.returncode == 0 and "mixture-of-experts" not in proc.stderr, proc.stderr
    dense = cli("generate", "--model-dir", MODELS / "Qwen3-8B")
    assert "mixture-of-experts" not in dense.stderr


# Issue #40 item 3: architectures as data (scripts/mooncake_pd/architectures.yaml). Each expected
# figure is worked out by hand in its comment, from the vendored config.json and vLLM's KV-cache
# specs (vllm/v1/kv_cache_interface.py at 0.13.0 and 0.23.0: AttentionSpec 2 x KV heads x head
# size x dtype bytes a token a layer; MLAAttentionSpec one latent of kv_lora_rank +
# qk_rope_head_dim; SlidingWindowSpec and ChunkedLocalAttentionSpec the same page, the window of
# tokens only under the hybrid KV cache manager; MambaSpec the gated_delta_net state).
LAYOUTS = [
    # gpt-oss-20b: 24 layers, 8 KV heads of 64, bf16: 2 x 8 x 64 x 2 = 2,048 B a layer. Without
    # the hybrid manager (PD at 0.13/0.18) every layer keeps every token: 24 x 2,048 = 49,152.
    ("gpt-oss-20b", 1, False, (49_152, (), 0)),
    # With it (0.23.0), the 12 odd layers are full (12 x 2,048 = 24,576 a token) and the 12 even
    # layers slide over sliding_window 128: (24,576 B a token, at most 128 tokens).
    ("gpt-oss-20b", 1, True, (24_576, ((24_576, 128),), 0)),
    # TP 8: one KV head a device (8 / 8): 2 x 1 x 64 x 2 = 256 B a layer; 12 x 256 = 3,072.
    ("gpt-oss-20b", 8, True, (3_072, ((3_072, 128),), 0)),
    # gpt-oss-120b: 36 layers, 18 full and 18 sliding: 18 x 2,048 = 36,864 each.
    ("gpt-oss-120b", 1, True, (36_864, ((36_864, 128),), 0)),
    ("gpt-oss-120b", 1, False, (73_728, (), 0)),
    # Qwen3-30B-A3B: 48 layers, 4 KV heads of head_dim 128 (not 2048 / 32 = 64): 2 x 4 x 128 x 2 =
    # 2,048 a layer, 98,304 a token; TP 8: one head a device, 512 a layer, 24,576.
    ("qwen3-30b-a3b", 1, False, (98_304, (), 0)),
    ("qwen3-30b-a3b", 8, False, (24_576, (), 0)),
    # Qwen3-Next-80B-A3B: 12 full layers (every 4th), 2 KV heads of 256: 2 x 2 x 256 x 2 = 2,048,
    # 12 x 2,048 = 24,576 a token. 36 linear layers, each a state per sequence: conv (4 - 1) x
    # (128 x 16 x 2 + 128 x 32) = 3 x 8,192 = 24,576 elements, temporal 32 x 128 x 128 = 524,288,
    # bf16: (24,576 + 524,288) x 2 = 1,097,728 B; x 36 = 39,518,208 B (37.7 MiB).
    ("qwen3-next-80b-a3b", 1, True, (24_576, (), 39_518_208)),
    # TP 8: KV heads 2 < 8, one a device: 12 x 2 x 1 x 256 x 2 = 12,288; state: conv 24,576 / 8 =
    # 3,072, temporal 32 / 8 = 4 x 128 x 128 = 65,536: (3,072 + 65,536) x 2 x 36 = 4,939,776.
    ("qwen3-next-80b-a3b", 8, True, (12_288, (), 4_939_776)),
    # Kimi-K2 (MLA): 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 = 70,272, the
    # latent on every TP rank, whatever num_key_value_heads (64) says.
    ("kimi-k2-instruct", 1, False, (70_272, (), 0)),
    ("kimi-k2-instruct", 16, False, (70_272, (), 0)),
    # GLM-4.5-Air: 46 layers, 8 KV heads of head_dim 128 (4096 / 96 is no integer):
    # 2 x 8 x 128 x 2 = 4,096 a layer, 188,416 a token; TP 8: 46 x 512 = 23,552.
    ("glm-4.5-air", 1, False, (188_416, (), 0)),
    ("glm-4.5-air", 8, False, (23_552, (), 0)),
    # Llama-4-Scout (text_config): 48 layers, 8 KV heads of 128: 4,096 a layer. vLLM turns the
    # hybrid manager off for chunked-local attention by default, so all 48 keep every token:
    # 196,608. Were it on: 12 NoPE global layers (every 4th) 49,152 a token, 36 chunked layers
    # 147,456 a token over at most attention_chunk_size 8,192 tokens.
    ("llama-4-scout-17b-16e-instruct", 1, False, (196_608, (), 0)),
    ("llama-4-scout-17b-16e-instruct", 1, True, (49_152, ((147_456, 8_192),), 0)),
]


@pytest.mark.parametrize(("name", "tensor", "hybrid", "expected"), LAYOUTS)
def test_kv_cache_per_layer_kind_as_vllm_allocates_it(name: str, tensor: int, hybrid: bool, expected: tuple):
    layout = kv_cache.kv_layout(model.load(ARCHITECTURES / name), tensor, hybrid=hybrid)
    assert (layout.per_token, layout.windowed, layout.per_sequence) == expected


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("gpt-oss-20b", 20.91),  # OpenAI's model card: 20.91B parameters
        ("gpt-oss-120b", 116.83),  # 116.83B
        ("qwen3-30b-a3b", 30.5),  # Qwen's model card: 30.5B
        ("qwen3-next-80b-a3b", 80.0),  # 80B
        ("kimi-k2-instruct", 1026.0),  # "1T", 1.026T as counted by the Hub
        ("glm-4.5-air", 106.0),  # 106B
        ("llama-4-scout-17b-16e-instruct", 107.8),  # 109B with the vision encoder, not counted
    ],
)
def test_parameter_count_of_current_architectures(name: str, billions: float):
    rest, experts = device_fit.parameters(model.load(ARCHITECTURES / name))
    assert (rest + experts) / 1e9 == pytest.approx(billions, rel=0.02)


def test_gpt_oss_mxfp4_experts_are_sized_at_4_25_bits():
    """20.91B parameters, 19.11B of them routed experts in MXFP4 (4-bit values and an 8-bit
    scale per 32: 4.25 bits, 0.53125 B), the rest bf16: 1.80B x 2 + 19.11B x 0.53125 = 13.75e9 B,
    12.8 GiB, the size of the published checkpoint (13.8 GB)."""
    oss = model.load(ARCHITECTURES / "gpt-oss-20b")
    rest, experts = device_fit.parameters(oss)
    assert device_fit.device_weight_bytes(oss, 1, 1, expert_parallel=False) == rest * 2 + experts * 0.53125
    assert device_fit.device_weight_bytes(oss, 1, 1, expert_parallel=False) / model.GIB == pytest.approx(12.8, abs=0.05)


def test_sequences_count_their_windows_and_states():
    """A sequence of 4,096 tokens of gpt-oss-20b at TP 8 under the hybrid manager: 3,072 x 4,096
    + 3,072 x 128 = 12,976,128 B; the longest sequence in 1 GiB: (1,073,741,824 - 393,216) /
    3,072 = 349,397 tokens. Qwen3-Next at TP 8: 12,288 x 4,096 + 4,939,776 = 55,271,424 B."""
    layout = kv_cache.kv_layout(model.load(ARCHITECTURES / "gpt-oss-20b"), 8, hybrid=True)
    assert layout.bytes_for(4096) == 12_976_128
    assert layout.bytes_for(100) == 3_072 * 100 * 2
    assert layout.tokens_in(model.GIB) == (model.GIB - 393_216) // 3_072 == 349_397
    nxt = kv_cache.kv_layout(model.load(ARCHITECTURES / "qwen3-next-80b-a3b"), 8, hybrid=True)
    assert nxt.bytes_for(4096) == 55_271_424
    fit = device_fit.fit(
        model.load(ARCHITECTURES / "qwen3-next-80b-a3b"),
        role="decode",
        tensor=8,
        data=1,
        hbm_gib=80,
        memory_utilization=0.9,
        max_num_batched_tokens=8192,
        max_num_seqs=256,
        max_model_len=32768,
        context_len=4096,
        hybrid=True,
    )
    assert fit.seqs_that_fit == int(fit.kv_bytes // 55_271_424)
    assert fit.seqs_that_fit < fit.kv_tokens_per_rank // 4096  # the states take room


def test_every_profile_family_and_engine_version_has_a_support_row():
    """Every accelerator generate writes for: each architecture says what each engine version
    of it does, and the page lists it as the data says (`make docs`)."""
    from mooncake_pd import architectures, docs, profiles

    assert architectures.check(architectures.load()) == []
    for name in architectures.names():
        spec = architectures.get(name)
        assert spec is not None
        for accelerator in topology.ACCELERATORS:
            family = topology.ACCELERATORS[accelerator].family
            missing = [v for v in profiles.versions_for(accelerator) if spec.support(family, v) is None]
            assert missing == [], (name, accelerator, missing)
    page = docs.PROFILES_PAGE.read_text()
    assert docs.architectures_table() in page, "docs/models-and-accelerators.md: run `make docs`"
    assert "| `GptOssForCausalLM` | gpt-oss-20b, gpt-oss-120b |" in page


UNSUPPORTED = [
    # gpt-oss: no Ascend attention path at v0.13.0; v0.18.0 and v0.23.0 untested (BF16 re-exports).
    (
        "gpt-oss-20b",
        ["--engine-version", "v0.13.0"],
        "GptOssForCausalLM (gpt_oss) on ascend-a3 at engine version v0.13.0: not supported: no Ascend attention "
        "path for sinks and sliding windows at v0.13.0; vllm-project/vllm-ascend commit 7221045777",
    ),
    ("gpt-oss-20b", ["--engine-version", "v0.13.0"], "give --engine-version (engine.version) v0.18.0 (untested) or "),
    (
        "gpt-oss-20b",
        ["--engine-version", "v0.13.0"],
        " or --accelerator nvidia (v0.13.0, v0.18.0, v0.23.0, v0.32.0, v0.33.0, v0.34.0)",
    ),
    # Llama 4: ❌ in vLLM-Ascend's matrix at every tag; NVIDIA runs it.
    (
        "llama-4-scout-17b-16e-instruct",
        [],
        "not supported: Llama4 ❌, vllm-ascend#1972; vllm-project/vllm-ascend v0.13.0 docs/source/user_guide/"
        "support_matrix/supported_models.md line 80; no engine version on ascend-a3 runs it; use --accelerator nvidia",
    ),
    # Qwen3-Next under PD at 0.13: the connector turns the hybrid KV cache manager off and vLLM
    # cannot place the linear-attention states.
    (
        "qwen3-next-80b-a3b",
        ["--accelerator", "nvidia", "--prefill-tp", "4", "--decode-tp", "4", "--prefill-dp", "1", "--decode-dp", "1"],
        "its linear-attention layers need vLLM's hybrid KV cache manager, which PD with NixlConnector turns off at "
        "v0.13.0",
    ),
    (
        "qwen3-next-80b-a3b",
        ["--engine-version", "v0.18.0"],
        "give --engine-version (engine.version) v0.23.0 (experimental)",
    ),
]


@pytest.mark.parametrize(("name", "options", "message"), UNSUPPORTED)
def test_an_engine_version_that_does_not_run_the_architecture_is_refused(
    tmp_path: Path, name: str, options: list[str], message: str
):
    out = tmp_path / "values.yaml"
    proc = cli("generate", "--model-dir", ARCHITECTURES / name, *options, "--output", out)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert not out.exists()


def test_uncertain_support_is_a_warning_in_the_header(tmp_path: Path):
    """Qwen3-Next at vLLM-Ascend v0.23.0 is experimental (🔵, its support matrix line 44), Qwen2-MoE
    untested there: both generate, and say so."""
    options = ["--prefill-tp", "8", "--prefill-dp", "1", "--decode-tp", "8", "--decode-dp", "1"]
    text = cli(
        "generate", "--model-dir", ARCHITECTURES / "qwen3-next-80b-a3b", "--engine-version", "v0.23.0", *options
    ).stdout
    assert (
        "# WARNING: Qwen3NextForCausalLM (qwen3_next) on ascend-a3 at v0.23.0: experimental: PD column empty; "
        "vllm-project/vllm-ascend v0.23.0 docs/source/user_guide/support_matrix/supported_models.md line 44"
    ) in text
    assert "# KV cache: 36 linear-attention layers hold a fixed state per sequence" in text
    # Qwen2-MoE is not in vLLM-Ascend's support matrix: untested.
    config = json.loads((ARCHITECTURES / "qwen3-30b-a3b" / "config.json").read_text())
    (tmp_path / "moe").mkdir()
    (tmp_path / "moe" / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2MoeForCausalLM"]}))
    proc = cli("generate", "--model-dir", tmp_path / "moe", *options)
    assert proc.returncode == 0, proc.stderr
    assert (
        "WARNING: Qwen2MoeForCausalLM (qwen3_moe) on ascend-a3 at v0.13.0: untested: not in the support matrix; "
        "vllm-project/vllm-ascend v0.13.0 docs/source/user_guide/support_matrix/supported_models.md"
    ) in proc.stderr


def test_sliding_window_layers_keep_every_token_where_pd_turns_the_hybrid_manager_off():
    """gpt-oss-20b on NVIDIA at TP 8: 6,144 B a token at 0.13.0 (24 x 256), 3,072 at 0.23.0,
    where NIXL supports the hybrid manager (12 x 256 plus 128 tokens of the sliding layers)."""
    options = ["--accelerator", "nvidia", "--prefill-tp", "8", "--prefill-dp", "1", "--decode-tp", "8"]
    old = cli("generate", "--model-dir", ARCHITECTURES / "gpt-oss-20b", *options, "--decode-dp", "1")
    new = cli(
        "generate",
        "--model-dir",
        ARCHITECTURES / "gpt-oss-20b",
        *options,
        "--decode-dp",
        "1",
        "--engine-version",
        "v0.23.0",
    )
    assert old.returncode == new.returncode == 0, old.stderr + new.stderr
    assert re.search(r"^decode +8 x 1 +6,144 ", old.stderr, re.M)
    assert "12 sliding-window layers keep every token (PD with NixlConnector turns" in old.stderr
    assert re.search(r"^decode +8 x 1 +3,072 ", new.stderr, re.M)
    assert "12 sliding-window layers keep at most 128 tokens of a sequence" in new.stderr
    # gpt-oss's MXFP4 is sized (no warning that the estimate guessed).
    assert "does not know its bytes per weight" not in old.stderr


def test_an_unknown_architecture_has_a_way_forward(tmp_path: Path):
    """MambaForCausalLM is not in the table: --architecture estimates it as a known one, or the
    two figures are given; update reads them back from the header and is clean."""
    unknown = BROKEN / "unknown-arch"
    as_qwen2 = tmp_path / "as-qwen2.yaml"
    proc = cli("generate", "--model-dir", unknown, "--architecture", "Qwen2ForCausalLM", "-o", as_qwen2)
    assert proc.returncode == 0, proc.stderr
    # 28 layers x 2 KV heads of 1536 / 12 = 128 over TP 2: 2 x 28 x 1 x 128 x 2 = 14,336.
    assert re.search(r"^prefill +2 x 4 +14,336 ", proc.stderr, re.M)
    # The stand-in's own support is not the model's: the header says what was estimated as what.
    said = "MambaForCausalLM is estimated as Qwen2ForCausalLM (--architecture); whether vLLM-Ascend runs"
    assert said in proc.stderr and said in as_qwen2.read_text()
    assert "support not recorded" in proc.stderr
    by_hand = tmp_path / "by-hand.yaml"
    figures = ["--kv-bytes-per-token", "40000", "--weights-gib", "20"]
    proc = cli("generate", "--model-dir", unknown, *figures, "-o", by_hand)
    assert proc.returncode == 0, proc.stderr
    # 40,000 / TP 2 = 20,000 B a token; 20 GiB / TP 2 = 10.0 GiB a device.
    assert re.search(r"^prefill +2 x 4 +20,000 +10\.0 ", proc.stderr, re.M)
    assert "WARNING: MambaForCausalLM on ascend-a3 at v0.13.0: support not recorded" in proc.stderr
    for path in (as_qwen2, by_hand):
        check = cli("update", path, "--model-dir", unknown, "--check")
        assert check.returncode == 0, check.stdout + check.stderr
    bad = cli("generate", "--model-dir", unknown, "--architecture", "Mamba")
    assert bad.returncode == 2
    assert "--architecture Mamba: not one the estimate knows; known: Qwen2ForCausalLM" in bad.stderr


def test_kimi_k2_needs_remote_code_and_is_mla():
    """Kimi-K2's config.json names its own classes (auto_map), which vLLM 0.13 needs for
    model_type kimi_k2; it is MLA (no head_dim override) and MoE (384 routed experts)."""
    kimi = model.load(ARCHITECTURES / "kimi-k2-instruct")
    assert (kimi.is_mla, kimi.is_moe, kimi.experts, kimi.needs_head_dim_override) == (True, True, 384, False)
    values, _ = generated(
        "--model-dir",
        ARCHITECTURES / "kimi-k2-instruct",
        "--accelerator",
        "nvidia",
        "--gpu",
        "h200",
        "--prefill-tp",
        "8",
        "--prefill-dp",
        "2",
        "--prefill-nodes",
        "2",
        "--decode-tp",
        "8",
        "--decode-dp",
        "2",
        "--decode-nodes",
        "2",
        "--enable-expert-parallel",
        "--max-model-len",
        "8192",
    )
    assert values["engine"]["args"]["trust-remote-code"] is True
    assert values["model"]["mla"] is True


@pytest.mark.parametrize(
    ("architecture", "message"),
    [
        ("DeepseekV3ForCausalLM", "kv_lora_rank: missing, which DeepseekV3ForCausalLM reads"),
        ("GptOssForCausalLM", "sliding_window: missing, which GptOssForCausalLM reads"),
        ("Qwen3NextForCausalLM", "linear_conv_kernel_dim: missing, which Qwen3NextForCausalLM reads"),
    ],
)
def test_an_architecture_that_does_not_fit_the_config_is_refused_naming_the_field(architecture: str, message: str):
    """--architecture names a known architecture whose fields Qwen3-8B's config.json lacks: exit
    2 naming them, not a KeyError traceback."""
    proc = cli("generate", "--model-dir", MODELS / "Qwen3-8B", "--architecture", architecture)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr


# MiniMax-M2.5's config.json as it names its sizes (MiniMaxM2ForCausalLM; the public config's
# keys): experts are num_local_experts, the expert MLP intermediate_size. Estimated as
# Qwen3MoeForCausalLM it was sized as a dense model of intermediate_size 1536 (~50x too small).
MINIMAX_M2_5 = {
    "architectures": ["MiniMaxM2ForCausalLM"],
    "model_type": "minimax_m2",
    "hidden_size": 3072,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 62,
    "intermediate_size": 1536,
    "num_local_experts": 256,
    "num_experts_per_tok": 8,
    "max_position_embeddings": 196608,
    "vocab_size": 200064,
    "torch_dtype": "bfloat16",
}


def test_a_stand_in_architecture_is_refused_where_it_would_size_the_model_wrong(tmp_path: Path):
    """--architecture X sizes the model as X reads it: a field X reads that the config lacks, or
    one the config sets that X ignores and that changes the size, is refused by name (exit 2);
    the figures by hand stay the way forward."""
    folder = tmp_path / "MiniMax-M2.5"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MINIMAX_M2_5))
    proc = cli("generate", "--model-dir", folder, "--architecture", "Qwen3MoeForCausalLM")
    assert proc.returncode == 2, proc.stderr
    assert "num_experts: missing, which Qwen3MoeForCausalLM reads" in proc.stderr
    assert "num_local_experts: set (256), which Qwen3MoeForCausalLM ignores" in proc.stderr
    assert "--kv-bytes-per-token and --weights-gib" in proc.stderr
    # A dense stand-in ignores the experts just the same.
    dense = cli("generate", "--model-dir", folder, "--architecture", "Qwen2ForCausalLM")
    assert dense.returncode == 2 and "num_local_experts: set (256), which Qwen2ForCausalLM ignores" in dense.stderr


def test_multi_node_nvidia_says_what_moves_over_tcp_without_rdma(tmp_path: Path):
    """Issue 52 item 5: a role over two NVIDIA nodes with accelerator.rdma off runs NCCL and NIXL's
    UCX backend over TCP sockets between them; the header says so and names the key. Not on one
    node, not with RDMA on (update drops the note), not on Ascend (HCCL over the NPUs' links)."""
    two_nodes = ("--prefill-tp", "8", "--prefill-dp", "2", "--prefill-nodes", "2", "--decode-tp", "8")
    out = tmp_path / "nvidia.yaml"
    proc = cli(
        "generate",
        "--model-dir",
        MODELS / "Llama-3.1-8B-Instruct",
        "--accelerator",
        "nvidia",
        *two_nodes,
        "--decode-dp",
        "1",
        "--output",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    note = "RDMA: prefill (2 nodes) span nodes with accelerator.rdma off: NCCL (TP, DP and expert parallel"
    assert note in proc.stderr and f"# {note}" in out.read_text()
    assert "set accelerator.rdma.enabled: true" in proc.stderr
    single = cli("generate", "--model-dir", MODELS / "Llama-3.1-8B-Instruct", "--accelerator", "nvidia")
    assert single.returncode == 0 and "RDMA: " not in single.stderr
    out.write_text(
        out.read_text().replace(
            "accelerator:\n  type: nvidia\n", "accelerator:\n  type: nvidia\n  rdma:\n    enabled: true\n"
        )
    )
    assert cli("update", out, "--model-dir", MODELS / "Llama-3.1-8B-Instruct").returncode == 0
    assert "RDMA: " not in out.read_text()
    ascend = cli(
        "generate", "--model-dir", MODELS / "Qwen3-8B", "--accelerator", "ascend-a2", *two_nodes, "--decode-dp", "1"
    )
    assert ascend.returncode == 0 and "RDMA: " not in ascend.stderr, ascend.stderr


def test_a_release_schema_url_says_when_it_resolves():
    """Issue 52 item 5: a file an installed tool writes points its schema line at the chart
    version's release tag, made only at release: the next line says so; a checkout's relative
    schema path needs no such line."""
    url = "https://raw.githubusercontent.com/mooncake-pd/mooncake-pd/v9.8.7/chart/values.schema.json"
    text = dump_new({"a": 1}, ["title"], url)
    assert text.splitlines()[:3] == [
        f"{MODELINE}{url}",
        "# The schema above is chart 9.8.7's, at its release tag v9.8.7: it resolves once 9.8.7 is released; "
        "before that, point it at chart/values.schema.json of a checkout.",
        "# title",
    ]
    assert dump_new({"a": 1}, ["title"], "../chart/values.schema.json").splitlines()[1] == "# title"
