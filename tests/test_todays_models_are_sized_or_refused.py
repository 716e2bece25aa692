"""Issue 52's "Done when": the six models a platform engineer tried on 2026-12-07 (DeepSeek-V3.2,
Qwen3-VL-235B-A22B, MiniMax-M2.5, Kimi-K2-Thinking, Qwen3-32B, Llama-3.3-70B) and Gemma 3 are
generated on A3, A2 and NVIDIA, and each is either rendered and started by the engines' preflight
(the rendered entry script of both roles run on a node holding the model's config.json, as the
other tests run it), or refused naming the field and the fix; none is sized from a field it lacks.

Where the models come from (tests/fixtures/architectures/*/SOURCE.md, tests/fixtures/quantization/
SOURCE.md): real config.json files vendored from ai-dynamo/aiconfigurator. Kimi-K2-Thinking's own
published config.json was not found in a public repository: its int4 checkpoint is the language
model of Kimi-K2.5's config.json (text_config, the same shape as aiconfigurator's Kimi-K2-Thinking
file, which the first test holds, with the same compressed-tensors int4 quantization_config).
No verbatim Gemma 3 config.json was found either (tests/fixtures/architectures/gemma-3-27b-it/
SOURCE.md): GEMMA3_27B below gives the fields google/gemma-3-27b-it publishes.

Cost (2-core machine shared with other runs): see the commit; the render and the two preflight
runs of each generated case dominate (about 1 s a case)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from mooncake_pd import architectures, cli, device_fit, engines, manifests, scriptrun
from mooncake_pd import model as modelmod

FIXTURES = Path(__file__).parent / "fixtures"
ARCHITECTURES = FIXTURES / "architectures"
QUANTIZATION = FIXTURES / "quantization"

# google/gemma-3-27b-it's config.json fields (transformers 4.50 wrote no layer_types and no
# tie_word_embeddings: Gemma3TextConfig's defaults, every 6th layer global and tied embeddings).
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "image_token_index": 262144,
    "mm_tokens_per_image": 256,
    "text_config": {
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "model_type": "gemma3_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
        "max_position_embeddings": 131072,
        "vocab_size": 262208,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}


def kimi_k2_thinking_int4() -> dict:
    """Kimi-K2's language model with the int4 compressed-tensors quantization Moonshot publishes
    (Kimi-K2.5's text_config, vendored verbatim)."""
    return json.loads((QUANTIZATION / "kimi-k2.5.config.json").read_text())["text_config"]


def model_dir(tmp_path: Path, name: str) -> Path:
    """The model folder of `name`: a vendored one, or one written here from a config above."""
    made = {"kimi-k2-thinking": kimi_k2_thinking_int4, "gemma-3-27b-it": lambda: GEMMA3_27B}
    if name not in made:
        return ARCHITECTURES / name
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(made[name]()))
    return folder


def test_kimi_k2_thinking_is_the_shape_of_the_int4_checkpoint_used():
    """aiconfigurator's Kimi-K2-Thinking file (its shape, without quantization_config) agrees with
    Kimi-K2.5's language model, whose int4 quantization_config stands in for Kimi-K2-Thinking's."""
    thinking = json.loads((QUANTIZATION / "kimi-k2-thinking.aiconfigurator.json").read_text())
    text = kimi_k2_thinking_int4()
    shared = {k for k in thinking if k in text}
    assert {"num_hidden_layers", "n_routed_experts", "moe_intermediate_size", "kv_lora_rank", "vocab_size"} <= shared
    assert {k: thinking[k] for k in shared} == {k: text[k] for k in shared}
    weights = text["quantization_config"]["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"], weights["type"]) == (4, 32, "int")


def run(*args: str | Path) -> tuple[int, str]:
    """The CLI in this process, (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as e:
            code = int(e.code or 0)
    return code, err.getvalue()


def both(*options: str) -> list[str]:
    """The same parallelism for prefill and decode."""
    return [
        f"--{role}-{option}" if i % 2 == 0 else option
        for role in ("prefill", "decode")
        for i, option in enumerate(options)
    ]


# What the published checkpoints need on each accelerator (weights and KV cache per device).
A2_EP = [*both("tp", "8", "dp", "2", "nodes", "2"), "--enable-expert-parallel"]
TOPOLOGY = {
    "deepseek-v3.2": {"nvidia": [*both("tp", "8", "dp", "1"), "--gpu", "h200"]},
    "qwen3-vl-235b-a22b-instruct": {
        "ascend-a3": both("tp", "16", "dp", "1"),
        "ascend-a2": A2_EP,
        "nvidia": both("tp", "8", "dp", "1"),
    },
    "minimax-m2.5": {"nvidia": both("tp", "8", "dp", "1")},
    "kimi-k2-thinking": {
        "ascend-a3": both("tp", "16", "dp", "1"),
        "ascend-a2": A2_EP,
        "nvidia": [*both("tp", "8", "dp", "1"), "--gpu", "h200"],
    },
    "qwen3-32b": dict.fromkeys(("ascend-a3", "ascend-a2", "nvidia"), both("tp", "4", "dp", "1")),
    "llama-3.3-70b-instruct": dict.fromkeys(("ascend-a3", "ascend-a2", "nvidia"), both("tp", "8", "dp", "1")),
    "gemma-3-27b-it": dict.fromkeys(("ascend-a3", "ascend-a2", "nvidia"), both("tp", "2", "dp", "1")),
}
# The refusals: vLLM-Ascend (v0.13.0 vllm_ascend/platform.py supported_quantization) does not load
# the FP8 checkpoints DeepSeek and MiniMax publish; the message names the field and the fix.
REFUSED = {
    (name, accelerator): [
        "config.json has quantization_config quant_method fp8, which vLLM-Ascend does not run",
        "use the BF16 checkpoint or an msModelSlim W8A8 one",
        "or --accelerator nvidia",
    ]
    for name in ("deepseek-v3.2", "minimax-m2.5")
    for accelerator in ("ascend-a3", "ascend-a2")
}
# In the gate: the refusals (a generate each) and one rendered and started case per accelerator,
# each a new kind of estimate (int4 MLA; multi-node expert parallel with a vision tower; the V3.2
# indexer). The other 14 (about 1 s of CPU each: a helm render and two preflight runs) run in
# `make test-all` (marker full): they catch a model generate sizes but render or the preflight
# refuses.
GATE = {("kimi-k2-thinking", "ascend-a3"), ("qwen3-vl-235b-a22b-instruct", "ascend-a2"), ("deepseek-v3.2", "nvidia")}
CASES = [
    pytest.param(n, a, id=f"{n}-{a}", marks=() if (n, a) in GATE or (n, a) in REFUSED else pytest.mark.full)
    for n, a in sorted({(n, a) for n, rows in TOPOLOGY.items() for a in rows} | set(REFUSED))
]


@pytest.mark.parametrize(("name", "accelerator"), CASES)
def test_generated_renders_and_starts_the_preflight_or_is_refused_by_name(tmp_path, name, accelerator):
    folder = model_dir(tmp_path, name)
    values = tmp_path / "values.yaml"
    options = TOPOLOGY.get(name, {}).get(accelerator, both("tp", "8", "dp", "1"))
    code, err = run("generate", "--model-dir", folder, "--accelerator", accelerator, *options, "--output", values)
    if (name, accelerator) in REFUSED:
        assert code == 2 and not values.exists(), err
        for words in REFUSED[name, accelerator]:
            assert words in err, err
        return
    assert code == 0, err
    out = tmp_path / "rendered.yaml"
    code, err = run("render", "-f", values, "--out", out)
    assert code == 0, err
    objects = manifests.parse(out.read_text())
    config = (folder / "config.json").read_text()
    for started in engines.entry_runs(objects, engines.Node(model_config=config)):
        # Passed every check and reached `vllm serve` with the generated flags.
        assert isinstance(started.run, scriptrun.Run) and started.serve, started.role
    code, err = run("update", values, "--model-dir", folder, "--check")
    assert code == 0, err


@pytest.mark.parametrize("name", sorted(TOPOLOGY))
def test_none_is_sized_from_a_field_it_lacks(tmp_path, name):
    """Every field the architecture's estimate reads (architectures.yaml fields, the vision
    tower's under vision_config) is in the model's config.json."""
    loaded = modelmod.load(model_dir(tmp_path, name))
    spec = architectures.require(loaded.architecture)
    for entry in spec.row["fields"]:
        if " (else" in str(entry) or entry == "torch_dtype":
            continue  # derived where absent (head_dim from hidden_size), or defaulted
        where, _, key = str(entry).rpartition(".")
        config = loaded.raw.get(where) if where == "vision_config" else loaded.text
        assert isinstance(config, dict) and key in config, f"{name}: {entry}"
    assert device_fit.parameters(loaded)[0] > 0 and loaded.unknown_quantization is None


@pytest.mark.parametrize(("version", "per_layer"), [("v0.13.0", 2 * 576 * 2), ("v0.23.0", (576 + 128) * 2)])
def test_deepseek_v32_w8a8_on_ascend_takes_vllm_ascends_indexer_layout(tmp_path, version: str, per_layer: int):
    """DeepSeek-V3.2 as an msModelSlim W8A8 checkpoint (its config.json without the FP8
    quantization_config, and a description) starts on A3; its KV column is vLLM-Ascend's layout at
    the engine version, not vLLM's (61 x 1,284), and the header says where the indexer's bytes
    come from."""
    config = json.loads((ARCHITECTURES / "deepseek-v3.2" / "config.json").read_text())
    config.pop("quantization_config")
    folder = tmp_path / "DeepSeek-V3.2-W8A8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "quant_model_description.json").write_text(json.dumps({"model_quant_type": "W8A8_DYNAMIC"}))
    options = [*both("tp", "16", "dp", "1"), "--engine-version", version]
    code, err = run(
        "generate", "--model-dir", folder, "--accelerator", "ascend-a3", *options, "--output", tmp_path / "v.yaml"
    )
    assert code == 0, err
    assert re.search(rf"^decode +16 x 1 +{61 * per_layer:,} ", err, re.M), err
    assert "sparse-attention indexer keeps" in err and f"vllm-ascend {version}" in err
