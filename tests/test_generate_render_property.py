"""One property of `generate` (issue 40, "What to build"): what it writes, `render` accepts (the
real helm template and every validation, through the CLI's own render path) and `update --check`
finds up to date. Drawn by hypothesis over the corpus (the project's test models and the vendored
configs of current architectures), every accelerator profile generate writes for, every engine
version of it, and the parallelism, replicas, nodes, expert parallelism, context length and image
generate accepts; a draw generate refuses is rejected (the refusal is its own tests' concern), one
it accepts must render. The cases of issue 40 items 1, 2 and 4 are explicit examples.

Cost (2-core machine, 2026-12-05, `/usr/bin/time pytest tests/test_generate_render_property.py
-n 0`): a case takes about 0.1 s for generate, 0.3-0.5 s for render and 0.1 s for update; with
MAX_EXAMPLES 20 (20 drawn cases rendered, 20 refused by generate) the file took 18.7 s of CPU
(helm included) and 46 s of wall time under a load average of 7 from other runs (40 examples:
26 s CPU, 65-105 s wall under loads of 6-14). The draws are derandomized, so the gate sees the
same cases every run."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, reject, settings
from hypothesis import strategies as st

import test_estimates_match_vllm_formulas as formulas
import test_todays_models_are_sized_or_refused as today
from mooncake_pd import chartfiles, cli, profiles, topology
from mooncake_pd import model as modelmod

FIXTURES = Path(__file__).parent / "fixtures"


def _written_models() -> dict[str, Path]:
    """Models the tests write where no verbatim config.json could be vendored (their SOURCE.md
    say why): Kimi-K2-Thinking's int4 checkpoint (compressed-tensors), Gemma 3 27B (sliding
    layers, a vision tower), and Qwen3-32B with a per-weight msModelSlim W8A8 description. In a
    folder of their own, removed when the run ends."""
    folder = Path(tempfile.mkdtemp(prefix="mooncake-pd-property-models-"))
    atexit.register(shutil.rmtree, folder, True)
    qwen3 = json.loads((FIXTURES / "architectures" / "qwen3-32b" / "config.json").read_text())
    written = {
        "Kimi-K2-Thinking": (today.kimi_k2_thinking_int4(), None),
        "gemma-3-27b-it": (today.GEMMA3_27B, None),
        "Qwen3-32B-W8A8": (qwen3, formulas.qwen3_w8a8_description(qwen3["num_hidden_layers"])),
    }
    out = {}
    for name, (config, description) in written.items():
        out[name] = formulas.write(folder, name, config, description)
    return out


WRITTEN = _written_models()
# The corpus: the project's test models, the real configs of current architectures and the
# models written above.
CORPUS = sorted(
    [p for p in (FIXTURES / "models").iterdir() if (p / "config.json").is_file()]
    + [p for p in (FIXTURES / "architectures").iterdir() if (p / "config.json").is_file()]
    + list(WRITTEN.values())
)
ACCELERATORS = sorted(topology.ACCELERATORS)
# Valid draws are rendered; refused ones cost a generate only (about 0.1 s).
MAX_EXAMPLES = 20


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def run(*args: str | Path) -> Outcome:
    """The CLI in this process (no interpreter start per call), its output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as e:  # argparse's refusal of an option
            code = int(e.code or 0)
    return Outcome(code, out.getvalue(), err.getvalue())


def generated_renders_and_is_current(model_dir: Path, options: list[str]) -> Outcome:
    """generate with `options`; where it accepts them, render and update --check must pass.
    Returns generate's outcome (a refusal, exit 2, is for the caller to judge)."""
    with tempfile.TemporaryDirectory(prefix="mooncake-pd-property-") as tmp:
        values = Path(tmp) / "values.yaml"
        made = run("generate", "--model-dir", model_dir, *options, "--output", values)
        if made.code != 0:
            assert made.code == 2 and "Traceback" not in made.err, made.err
            assert not values.exists()
            return made
        rendered = run("render", "-f", values, "--out", Path(tmp) / "rendered.yaml")
        assert rendered.code == 0, f"generate {' '.join(options)} wrote values render refuses:\n{rendered.err}"
        current = run("update", values, "--model-dir", model_dir, "--check")
        assert current.code == 0, f"update --check of generate {' '.join(options)}:\n{current.out}{current.err}"
        return made


def _valid_tp(model_dir: Path, per_node: int) -> list[int]:
    rules = chartfiles.program("preflight")
    text, _ = rules.text_config(modelmod.load(model_dir).raw)
    return list(rules.valid_tensor_parallel(text, per_node))


@st.composite
def cases(draw: st.DrawFn) -> tuple[Path, list[str]]:
    """A model of the corpus and generate options for it: an accelerator, an engine version of
    it (by --engine-version, or the version an --image tag names), each role's TP among those its
    heads allow, DP, nodes and replicas within the node, and sometimes expert parallelism, a
    max-model-len and an expected context length."""
    model_dir = draw(st.sampled_from(CORPUS))
    accelerator = draw(st.sampled_from(ACCELERATORS))
    version = draw(st.sampled_from(profiles.versions_for(accelerator)))
    per_node = topology.ACCELERATORS[accelerator].devices_per_node
    options = ["--accelerator", accelerator]
    if draw(st.booleans()):
        # The engine version through its image (the profile's own repository and tag).
        options += ["--image", profiles.profile(accelerator, version=version).image]
    else:
        options += ["--engine-version", version]
    tps = _valid_tp(model_dir, per_node)
    for role in topology.ROLES:
        tp = draw(st.sampled_from(tps))
        nodes = draw(st.sampled_from([1, 1, 2]))
        local = draw(st.integers(1, max(1, per_node // tp)))
        options += [f"--{role}-tp", str(tp), f"--{role}-dp", str(local * nodes), f"--{role}-nodes", str(nodes)]
        options += [f"--{role}-replicas", str(draw(st.sampled_from([1, 1, 2])))]
    if modelmod.load(model_dir).is_moe and draw(st.booleans()):
        options.append("--enable-expert-parallel")
    length = draw(st.sampled_from([None, 4096, 8192, 32768]))
    if length:
        options += ["--max-model-len", str(length)]
        if draw(st.booleans()):
            options += ["--expected-context-len", str(length // 2)]
    if accelerator == "nvidia":
        options += ["--gpu", draw(st.sampled_from(sorted(topology.ACCELERATORS["nvidia"].variants)))]
    return model_dir, options


MODELS = FIXTURES / "models"
ISSUE_ITEM_1 = [
    # Decode TP 8 x DP 1 and DP 3 kept the guide's lmhead_tensor_parallel_size 2, which does not
    # divide decode's DP: render refused what generate wrote.
    (MODELS / "Qwen3-8B", ["--prefill-tp", "8", "--prefill-dp", "1", "--decode-tp", "8", "--decode-dp", "1"]),
    (MODELS / "Qwen3-8B", ["--prefill-tp", "4", "--prefill-dp", "2", "--decode-tp", "4", "--decode-dp", "3"]),
    (MODELS / "Qwen3-8B", ["--prefill-tp", "8", "--prefill-dp", "1", "--decode-tp", "4", "--decode-dp", "3"]),
    # The same at v0.23.0, where finegrained TP is refused on a dense model.
    (
        MODELS / "Qwen3-8B",
        [
            "--engine-version",
            "v0.23.0",
            "--prefill-tp",
            "8",
            "--prefill-dp",
            "1",
            "--decode-tp",
            "8",
            "--decode-dp",
            "1",
        ],
    ),
    # NIXL from vLLM 0.18 takes either TP dividing the other: prefill 4, decode 2 renders.
    (
        MODELS / "Llama-3.1-8B-Instruct",
        [
            *("--accelerator", "nvidia", "--engine-version", "v0.18.0"),
            *("--prefill-tp", "4", "--prefill-dp", "1", "--decode-tp", "2", "--decode-dp", "2"),
        ],
    ),
]


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(case=cases())
@example(case=ISSUE_ITEM_1[0])
@example(case=ISSUE_ITEM_1[1])
@example(case=ISSUE_ITEM_1[2])
@example(case=ISSUE_ITEM_1[3])
@example(case=ISSUE_ITEM_1[4])
# Issue 40 item 2, the image that matches: the A3 image of v0.23.0 on A3, the A2 one on A2.
@example(case=(MODELS / "Qwen3-8B", ["--accelerator", "ascend-a3", "--image", "quay.io/ascend/vllm-ascend:v0.23.0-a3"]))
@example(case=(MODELS / "Qwen3-8B", ["--accelerator", "ascend-a2", "--image", "quay.io/ascend/vllm-ascend:v0.23.0"]))
# Issue 52: the quantizations and architectures of today, one explicit draw each.
@example(case=(WRITTEN["Kimi-K2-Thinking"], ["--accelerator", "ascend-a3", "--prefill-tp", "16", "--decode-tp", "16"]))
@example(case=(WRITTEN["Qwen3-32B-W8A8"], ["--accelerator", "ascend-a2", "--prefill-tp", "4", "--decode-tp", "4"]))
@example(case=(WRITTEN["gemma-3-27b-it"], ["--accelerator", "nvidia", "--engine-version", "v0.23.0"]))
@example(
    case=(
        FIXTURES / "architectures" / "deepseek-v3.2",
        ["--accelerator", "nvidia", "--gpu", "h200", "--prefill-tp", "8", "--decode-tp", "8"],
    )
)
def test_what_generate_writes_renders_and_is_up_to_date(case: tuple[Path, list[str]]):
    model_dir, options = case
    made = generated_renders_and_is_current(model_dir, options)
    if made.code != 0:
        reject()


# Issue 40 items 1 (NIXL at vLLM 0.13), 2 and 4: generate refuses, naming the option, and
# writes nothing (these rendered, or refused in render, or ended in a traceback before).
REFUSED = [
    (
        MODELS / "Llama-3.1-8B-Instruct",
        ["--accelerator", "nvidia", "--prefill-tp", "4", "--prefill-dp", "1", "--decode-tp", "2", "--decode-dp", "1"],
        "--decode-tp 2: not a multiple of --prefill-tp 4; NixlConnector at this engine version needs decode TP",
    ),
    (
        MODELS / "Qwen3-8B",
        ["--accelerator", "ascend-a3", "--image", "quay.io/ascend/vllm-ascend:v0.23.0"],
        "--image quay.io/ascend/vllm-ascend:v0.23.0: the vLLM-Ascend image for A2, but --accelerator is ascend-a3; "
        "use a tag ending in -a3",
    ),
    (
        MODELS / "Qwen3-8B",
        ["--accelerator", "ascend-a2", "--image", "quay.io/ascend/vllm-ascend:v0.23.0-a3"],
        "the vLLM-Ascend image for A3, but --accelerator is ascend-a2; use a tag without -a3",
    ),
    (MODELS / "Qwen3-8B", ["--prefill-tp", "0"], "argument --prefill-tp: 0 must be at least 1"),
    (MODELS / "Qwen3-8B", ["--prefill-nodes", "0"], "argument --prefill-nodes: 0 must be at least 1"),
    (MODELS / "Qwen3-8B", ["--prefill-dp", "0"], "argument --prefill-dp: 0 must be at least 1"),
    (MODELS / "Qwen3-8B", ["--decode-tp", "-2"], "argument --decode-tp: -2 must be at least 1"),
    (MODELS / "Qwen3-8B", ["--max-model-len", "0"], "argument --max-model-len: 0 must be at least 1"),
    (
        MODELS / "Qwen3-8B",
        ["--prefill-tp", "32"],
        "--prefill-tp 32: above the 16 devices of an ascend-a3 node, which one TP group must fit; "
        "valid on ascend-a3: 1, 2, 4, 8, 16",
    ),
]


@pytest.mark.parametrize(("model_dir", "options", "message"), REFUSED, ids=[" ".join(o) for _, o, _ in REFUSED])
def test_what_render_would_refuse_generate_refuses(model_dir: Path, options: list[str], message: str):
    made = generated_renders_and_is_current(model_dir, options)
    assert made.code == 2
    assert message in made.err


@pytest.mark.parametrize(
    ("accelerator", "version"),
    [(a, v) for a in ACCELERATORS for v in profiles.versions_for(a)],
)
def test_every_engine_version_of_every_profile_renders_what_generate_writes(accelerator: str, version: str):
    """Whatever the draws above reach, each accelerator's every engine version is rendered once
    (a dense model every version runs, its smallest topology)."""
    options = ["--accelerator", accelerator, "--engine-version", version]
    options += ["--prefill-tp", "1", "--prefill-dp", "1", "--decode-tp", "1", "--decode-dp", "1"]
    made = generated_renders_and_is_current(MODELS / "Qwen3-8B", options)
    assert made.code == 0, made.err


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_an_override_in_the_file_renders_and_is_up_to_date(tmp_path: Path, accelerator: str):
    """The overrides are the model (issue 52 item 2), in the property's terms: Qwen3-32B's YaRN
    extension written into a generated file as model.hfOverrides with max-model-len 131,072,
    then `update` (which reads the file's overrides), renders and is up to date."""
    folder = FIXTURES / "architectures" / "qwen3-32b"
    values = tmp_path / "values.yaml"
    made = run(
        "generate",
        "--model-dir",
        folder,
        "--accelerator",
        accelerator,
        "--prefill-tp",
        "4",
        "--prefill-dp",
        "1",
        "--decode-tp",
        "4",
        "--decode-dp",
        "1",
        "--output",
        values,
    )
    assert made.code == 0, made.err
    yarn = (
        "  maxModelLen: 131072\n  hfOverrides:\n    rope_scaling:\n      rope_type: yarn\n      factor: 4.0\n"
        "      original_max_position_embeddings: 32768\n"
    )
    text = re.sub(r"^  maxModelLen: \d+\n", yarn, values.read_text(), count=1, flags=re.M)
    assert "131072" in text
    values.write_text(text)
    updated = run("update", values, "--model-dir", folder)
    assert updated.code == 0, updated.err
    assert "rope scaling yarn (factor 4.0): applied by vLLM from model.hfOverrides" in values.read_text()
    rendered = run("render", "-f", values, "--out", tmp_path / "rendered.yaml")
    assert rendered.code == 0, rendered.err
    current = run("update", values, "--model-dir", folder, "--check")
    assert current.code == 0, current.out + current.err
