"""Every estimate generate prints for today's models is within 5% of the figure computed here by
hand, from the engines' own formulas (issue 52 item 6): KV-cache bytes per token per layer for
GQA, MLA and DeepSeek-V3.2's indexer, per engine; parameters per module as vLLM builds the model;
bytes per weight of each quantization. The hand arithmetic below is written from the cited
sources, not from mooncake_pd.model, so a rule of the estimate that drifts from them fails here.

Sources (wheels and tags as architectures.yaml `sources` names them):
- KV per token per layer, full attention: vllm v0.13.0 vllm/v1/kv_cache_interface.py 65-78
  AttentionSpec.page_size_bytes = 2 x block_size x num_kv_heads x head_size x dtype bytes, with
  num_kv_heads per rank max(1, total // TP) (vllm/config/model.py get_num_kv_heads ~1237-1248).
- MLA: kv_cache_interface.py 162-177 MLAAttentionSpec.page_size_bytes = block_size x 1 x
  (kv_lora_rank + qk_rope_head_dim) x dtype bytes, the same on every TP rank.
- DeepSeek-V3.2's indexer: vllm v0.13.0 vllm/model_executor/models/deepseek_v2.py 846-854,
  DeepseekV32IndexerCache(head_dim + head_dim // 128 * 4, uint8); vLLM-Ascend v0.13.0
  vllm_ascend/worker/model_runner_v1.py ~2531-2537 (FullAttentionSpec of the latent: twice it),
  v0.18.0 patch/platform/patch_kv_cache_interface.py 14-62 (kv_lora_rank + qk_rope_head_dim +
  index_head_dim in the model dtype).
- Parameters: the Linear and embedding shapes of vllm v0.13.0 llama.py / qwen3.py (q, k, v, o,
  gate, up, down), deepseek_v2.py (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj;
  FusedMoE w13 and w2 of each expert; the router gate of hidden x experts; Indexer wq_b, wk,
  weights_proj), qwen3_moe.py, minimax_m2.py, qwen3_vl.py Qwen3_VisionTransformer (patch
  embedding, pos_embed, blocks, merger and deepstack mergers), gemma3_mm.py (SigLIP tower and the
  projector).
- Bytes per weight: compressed-tensors int4 group 32 (vllm v0.13.0
  compressed_tensors/schemes/compressed_tensors_wNa16.py create_weights: num_bits / 8 and a scale
  of the model dtype per group); FP8 block 128 x 128 (quantization/fp8.py: 1 byte and a float32
  scale per block; embeddings and lm_head unquantized); msModelSlim W8A8 (vllm-ascend v0.13.0
  vllm_ascend/quantization/w8a8.py get_weight int8; FLOAT weights in the model dtype).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mooncake_pd import device_fit, kv_cache
from mooncake_pd import model as modelmod
from test_todays_models_are_sized_or_refused import ARCHITECTURES, GEMMA3_27B, kimi_k2_thinking_int4

WITHIN = 0.05


def write(tmp_path: Path, name: str, config: dict, description: dict | None = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    if description is not None:
        (folder / "quant_model_description.json").write_text(json.dumps(description))
    return folder


def vendored(name: str) -> dict:
    return json.loads((ARCHITECTURES / name / "config.json").read_text())


# --- KV cache per token per layer -------------------------------------------------------------


def gqa_kv(layers: int, kv_heads: int, head_dim: int, tp: int, dtype: int = 2) -> int:
    return layers * 2 * max(1, kv_heads // tp) * head_dim * dtype


def mla_kv(layers: int, kv_lora_rank: int, rope: int, dtype: int = 2) -> int:
    return layers * (kv_lora_rank + rope) * dtype


@pytest.mark.parametrize(
    ("name", "tp", "hand"),
    [
        ("llama-3.3-70b-instruct", 8, gqa_kv(80, 8, 128, 8)),
        ("qwen3-32b", 4, gqa_kv(64, 8, 128, 4)),
        ("qwen3-vl-235b-a22b-instruct", 16, gqa_kv(94, 4, 128, 16)),
        ("minimax-m2.5", 8, gqa_kv(62, 8, 128, 8)),
        ("qwen3-vl-32b-instruct", 8, gqa_kv(64, 8, 128, 8)),
    ],
)
def test_gqa_kv_bytes_per_token(name: str, tp: int, hand: int):
    estimate = kv_cache.kv_bytes_per_token(modelmod.load(ARCHITECTURES / name), tp)
    assert estimate == pytest.approx(hand, rel=WITHIN)


def test_gemma3_sliding_layers_keep_every_token_without_the_hybrid_manager(tmp_path):
    """PD turns vLLM's hybrid KV cache manager off at v0.13.0 and v0.18.0: the 52 sliding layers
    (every 6th of 62 is global) become full attention (vllm v0.13.0 vllm/v1/core/kv_cache_utils.py
    unify_hybrid_kv_cache_specs); with it they keep 1,024 tokens (SlidingWindowSpec)."""
    gemma = modelmod.load(write(tmp_path, "gemma-3-27b-it", GEMMA3_27B))
    assert kv_cache.kv_bytes_per_token(gemma, 2) == pytest.approx(gqa_kv(62, 16, 128, 2), rel=WITHIN)
    layout = kv_cache.kv_layout(gemma, 2, hybrid=True)
    global_layers = sum(1 for i in range(62) if (i + 1) % 6 == 0)
    assert global_layers == 10
    assert layout.per_token == pytest.approx(gqa_kv(global_layers, 16, 128, 2), rel=WITHIN)
    assert layout.windowed == ((gqa_kv(52, 16, 128, 2), 1024),)


def test_mla_kv_bytes_per_token_is_not_split_over_tp():
    kimi = modelmod.load(ARCHITECTURES / "kimi-k2-instruct")
    for tp in (1, 8, 16):
        assert kv_cache.kv_bytes_per_token(kimi, tp) == pytest.approx(mla_kv(61, 512, 64), rel=WITHIN)


@pytest.mark.parametrize(
    ("engine", "per_layer"),
    [
        # vLLM: the bf16 latent and the indexer's FP8 keys with a float32 scale per 128.
        (("nvidia", "v0.13.0"), (512 + 64) * 2 + 128 + 128 // 128 * 4),
        (None, (512 + 64) * 2 + 128 + 128 // 128 * 4),
        # vLLM-Ascend v0.13.0: a FullAttentionSpec of the latent, K and V: twice the latent.
        (("ascend", "v0.13.0"), 2 * (512 + 64) * 2),
        # vLLM-Ascend v0.18.0 and v0.23.0: latent, rope and the indexer's key in bf16.
        (("ascend", "v0.18.0"), (512 + 64 + 128) * 2),
        (("ascend", "v0.23.0"), (512 + 64 + 128) * 2),
    ],
)
def test_deepseek_v32_indexer_cache_beside_mla(engine, per_layer: int):
    v32 = modelmod.load(ARCHITECTURES / "deepseek-v3.2")
    for tp in (1, 8):
        assert kv_cache.kv_bytes_per_token(v32, tp, engine=engine) == pytest.approx(61 * per_layer, rel=WITHIN)
    # Without the indexer (DeepSeek-V3's MLA alone) the estimate would be this much lower.
    assert 61 * per_layer > mla_kv(61, 512, 64)


# --- Parameters, counted by hand per module ------------------------------------------------------


def dense_attention(h: int, heads: int, kv: int, d: int) -> int:
    return h * heads * d + 2 * h * kv * d + heads * d * h  # q, k, v, o


def mla_attention(c: dict) -> int:
    h, heads, rope, nope, v = (
        c["hidden_size"],
        c["num_attention_heads"],
        c["qk_rope_head_dim"],
        c["qk_nope_head_dim"],
        c["v_head_dim"],
    )
    q_rank, kv_rank = c["q_lora_rank"], c["kv_lora_rank"]
    q = h * q_rank + q_rank * heads * (nope + rope)  # q_a_proj, q_b_proj
    kv = h * (kv_rank + rope) + kv_rank * heads * (nope + v)  # kv_a_proj_with_mqa, kv_b_proj
    return q + kv + heads * v * h  # o_proj


def deepseek_groups(c: dict, *, indexer: bool = False) -> dict[str, int]:
    """DeepSeek-V3 / Kimi-K2 / V3.2 (deepseek_v2.py): the first first_k_dense_replace layers dense
    (intermediate_size), the others n_routed_experts experts and n_shared_experts shared ones of
    moe_intermediate_size, with a router of hidden x experts."""
    h, layers, dense = c["hidden_size"], c["num_hidden_layers"], c["first_k_dense_replace"]
    experts, inner = c["n_routed_experts"], c["moe_intermediate_size"]
    attention = mla_attention(c)
    if indexer:
        attention += c["q_lora_rank"] * c["index_n_heads"] * c["index_head_dim"]  # wq_b
        attention += h * c["index_head_dim"] + h * c["index_n_heads"]  # wk, weights_proj
    moe_layers = layers - dense
    return {
        "embed": c["vocab_size"] * h,
        "lm_head": c["vocab_size"] * h,
        "attention": layers * attention,
        "dense": dense * 3 * h * c["intermediate_size"],
        "shared": moe_layers * (c["n_shared_experts"] * 3 * h * inner + h * experts),
        "routed": moe_layers * experts * 3 * h * inner,
    }


def qwen3_vl_vision(v: dict) -> int:
    """qwen3_vl.py Qwen3_VisionTransformer: patch embedding, pos_embed, depth blocks (qkv, proj,
    fc1, fc2), the merger and one deepstack merger per index (fc1 of merged x merged, fc2 of
    merged x out_hidden_size)."""
    h, merged = v["hidden_size"], v["hidden_size"] * v["spatial_merge_size"] ** 2
    blocks = v["depth"] * (3 * h * h + h * h + 2 * h * v["intermediate_size"])
    patch = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2 * h
    mergers = (1 + len(v["deepstack_visual_indexes"])) * (merged * merged + merged * v["out_hidden_size"])
    return blocks + patch + v["num_position_embeddings"] * h + mergers


def hand_parameters(name: str, c: dict) -> int:
    t = c.get("text_config", c)
    h, layers = t["hidden_size"], t["num_hidden_layers"]
    embeddings = t["vocab_size"] * h * (1 if t.get("tie_word_embeddings", c.get("tie_word_embeddings")) else 2)
    attention = layers * dense_attention(
        h, t["num_attention_heads"], t["num_key_value_heads"], t.get("head_dim") or h // t["num_attention_heads"]
    )
    if name in ("llama-3.3-70b-instruct", "qwen3-32b", "qwen3-vl-32b-instruct"):
        total = embeddings + attention + layers * 3 * h * t["intermediate_size"]
    elif name == "qwen3-vl-235b-a22b-instruct":
        experts, inner = t["num_experts"], t["moe_intermediate_size"]
        total = embeddings + attention + layers * (experts * 3 * h * inner + h * experts)
    elif name == "minimax-m2.5":
        experts, inner = t["num_local_experts"], t["intermediate_size"]
        total = embeddings + attention + layers * (experts * 3 * h * inner + h * experts)
    else:
        raise AssertionError(name)
    return total + (qwen3_vl_vision(c["vision_config"]) if "vision_config" in c else 0)


# Published totals (model cards), an independent check of the hand counts above.
PUBLISHED = {
    "llama-3.3-70b-instruct": 70.6e9,
    "qwen3-32b": 32.8e9,
    "qwen3-vl-32b-instruct": 33e9,
    "qwen3-vl-235b-a22b-instruct": 235e9,
    "minimax-m2.5": 229e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_bf16_weights(name: str):
    """Unquantized (BF16) weights: 2 bytes a parameter; MiniMax-M2.5 as published is FP8 (below)."""
    config = vendored(name)
    hand = hand_parameters(name, config)
    assert hand == pytest.approx(PUBLISHED[name], rel=WITHIN)
    loaded = modelmod.load(ARCHITECTURES / name)
    rest, experts = device_fit.parameters(loaded)
    assert rest + experts == pytest.approx(hand, rel=WITHIN)
    if loaded.quantization is None:
        assert device_fit.device_weight_bytes(loaded, 1, 1, expert_parallel=False) == pytest.approx(
            2 * hand, rel=WITHIN
        )


def test_gemma3_weights_count_the_vision_tower(tmp_path):
    """gemma3_mm.py: the language model (tied embeddings), SigLIP's 27 blocks, patch and
    position embeddings and the projector into the text hidden size; 27.4B as published."""
    t, v = GEMMA3_27B["text_config"], GEMMA3_27B["vision_config"]
    h, vh = t["hidden_size"], v["hidden_size"]
    text = t["vocab_size"] * h + 62 * (dense_attention(h, 32, 16, 128) + 3 * h * t["intermediate_size"])
    vision = 27 * (4 * vh * vh + 2 * vh * v["intermediate_size"]) + 3 * 14 * 14 * vh + (896 // 14) ** 2 * vh
    hand = text + vision + vh * h
    assert hand == pytest.approx(27.4e9, rel=WITHIN)
    gemma = modelmod.load(write(tmp_path, "gemma-3-27b-it", GEMMA3_27B))
    assert device_fit.device_weight_bytes(gemma, 1, 1, expert_parallel=False) == pytest.approx(2 * hand, rel=WITHIN)
    assert device_fit.parameter_groups(gemma)["vision"] == pytest.approx(vision + vh * h, rel=WITHIN)


def test_kimi_k2_thinking_int4_weights(tmp_path):
    """compressed-tensors int4, group 32, symmetric: the routed experts at 4 bits plus a bf16 scale
    per 32 weights; ignore leaves attention (self_attn), the shared experts, the dense MLP and
    lm_head in bf16; embeddings are no Linear. About 594 GB, the size of the published weights."""
    text = kimi_k2_thinking_int4()
    groups = deepseek_groups(text)
    assert sum(groups.values()) == pytest.approx(1.04e12, rel=WITHIN)
    hand = groups["routed"] * (4 / 8 + 2 / 32) + (sum(groups.values()) - groups["routed"]) * 2
    kimi = modelmod.load(write(tmp_path, "kimi-k2-thinking", text))
    assert kimi.unknown_quantization is None
    assert device_fit.device_weight_bytes(kimi, 1, 1, expert_parallel=False) == pytest.approx(hand, rel=WITHIN)
    assert hand == pytest.approx(594e9, rel=WITHIN)
    # At BF16, as the estimate counted it before (a warning only), it would be 3.5 times as much.
    assert sum(groups.values()) * 2 / hand > 3.4
    # Over TP 8 x DP 2 with expert parallelism: the experts over 16 devices, the rest over 8.
    ep = device_fit.device_weight_bytes(kimi, 8, 2, expert_parallel=True)
    rest = hand - groups["routed"] * (4 / 8 + 2 / 32)
    assert ep == pytest.approx(rest / 8 + groups["routed"] * (4 / 8 + 2 / 32) / 16, rel=WITHIN)


def test_compressed_tensors_groups_each_size_their_targets(tmp_path):
    """Two config groups, as llm-compressor writes a mixed recipe: the routed experts int4 group 32
    by a name target, every other Linear int8 per channel by the class target "Linear", which vLLM
    v0.13.0 matches after the names (compressed_tensors/utils.py find_matched_target) whatever the
    groups' order. lm_head is no LinearBase: bf16 though `ignore` does not name it."""
    text = kimi_k2_thinking_int4()
    int4 = text["quantization_config"]["config_groups"]["group_0"]["weights"]
    int8 = {**int4, "num_bits": 8, "strategy": "channel", "group_size": None}
    text["quantization_config"]["ignore"] = []
    text["quantization_config"]["config_groups"] = {
        "group_0": {"targets": ["Linear"], "weights": int8},
        "group_1": {"targets": ["re:.*mlp\\.experts\\..*"], "weights": int4},
    }
    groups = deepseek_groups(text)
    routed = groups["routed"] * (4 / 8 + 2 / 32)
    rest = groups["attention"] + groups["dense"] + groups["shared"]
    hand = routed + rest * 1 + (groups["embed"] + groups["lm_head"]) * 2
    kimi = modelmod.load(write(tmp_path, "kimi-mixed", text))
    assert kimi.unknown_quantization is None
    assert device_fit.device_weight_bytes(kimi, 1, 1, expert_parallel=False) == pytest.approx(hand, rel=WITHIN)
    # With "Linear" alone, the experts take it too (FusedMoE stands in for Linear).
    text["quantization_config"]["config_groups"] = {"group_0": {"targets": ["Linear"], "weights": int8}}
    int8_all = modelmod.load(write(tmp_path, "kimi-int8", text))
    hand_int8 = (groups["routed"] + rest) * 1 + (groups["embed"] + groups["lm_head"]) * 2
    assert device_fit.device_weight_bytes(int8_all, 1, 1, expert_parallel=False) == pytest.approx(hand_int8, rel=WITHIN)


def test_deepseek_v32_fp8_block_weights():
    """fp8 with weight_block_size 128 x 128: 1 byte and a float32 scale per 16,384 weights for
    every Linear (the indexer's included), embeddings and lm_head bf16; 671B parameters without
    the MTP layer."""
    c = vendored("deepseek-v3.2")
    groups = deepseek_groups(c, indexer=True)
    assert sum(groups.values()) == pytest.approx(671e9, rel=WITHIN)
    unquantized = groups["embed"] + groups["lm_head"]
    hand = (sum(groups.values()) - unquantized) * (1 + 4 / 128**2) + unquantized * 2
    v32 = modelmod.load(ARCHITECTURES / "deepseek-v3.2")
    assert device_fit.device_weight_bytes(v32, 1, 1, expert_parallel=False) == pytest.approx(hand, rel=WITHIN)


def test_minimax_m25_fp8_block_weights():
    c = vendored("minimax-m2.5")
    params = hand_parameters("minimax-m2.5", c)
    unquantized = 2 * c["vocab_size"] * c["hidden_size"]
    hand = (params - unquantized) * (1 + 4 / 128**2) + unquantized * 2
    loaded = modelmod.load(ARCHITECTURES / "minimax-m2.5")
    assert device_fit.device_weight_bytes(loaded, 1, 1, expert_parallel=False) == pytest.approx(hand, rel=WITHIN)


def qwen3_w8a8_description(layers: int) -> dict[str, str]:
    """A msModelSlim W8A8 description of Qwen3-32B in the documented format (Ascend/msmodelslim
    3de0a3c docs/en/feature_guide/quick_quantization_v1/quantization_result.md: one entry per
    weight tensor, FLOAT for one left unquantized): every projection W8A8, embeddings, lm_head and
    norms FLOAT, with the scale and offset entries W8A8 quantization adds. No real description of
    a public checkpoint was found to vendor (tests/fixtures/quantization/SOURCE.md)."""
    description = {"model_quant_type": "W8A8", "model.embed_tokens.weight": "FLOAT", "lm_head.weight": "FLOAT"}
    for i in range(layers):
        for proj in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ):
            for tensor in ("weight", "input_scale", "input_offset", "deq_scale", "quant_bias"):
                description[f"model.layers.{i}.{proj}.{tensor}"] = "W8A8"
        for norm in ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"):
            description[f"model.layers.{i}.{norm}.weight"] = "FLOAT"
    return description


def test_modelslim_w8a8_weights(tmp_path):
    """msModelSlim W8A8 (vLLM-Ascend --quantization ascend): int8 projections, bf16 embeddings and
    lm_head; the description is read per weight, not as one type for the whole model."""
    c = vendored("qwen3-32b")
    params = hand_parameters("qwen3-32b", c)
    unquantized = 2 * c["vocab_size"] * c["hidden_size"]
    hand = (params - unquantized) * 1 + unquantized * 2
    folder = write(tmp_path, "Qwen3-32B-W8A8", c, qwen3_w8a8_description(c["num_hidden_layers"]))
    w8a8 = modelmod.load(folder)
    assert w8a8.ascend_quantization == "W8A8" and w8a8.unknown_quantization is None
    # Per weight: not model_quant_type for every weight (which would be within 5% here too).
    sizes = w8a8.weight_sizes
    assert sizes is not None and (sizes.bytes("attention"), sizes.bytes("denseMlp")) == (1.0, 1.0)
    assert (sizes.bytes("embeddings"), sizes.bytes("lmHead")) == (2, 2)
    assert device_fit.device_weight_bytes(w8a8, 1, 1, expert_parallel=False) == pytest.approx(hand, rel=WITHIN)
    # Half the BF16 checkpoint's, but not quite: the embeddings stay bf16.
    assert 0.5 < hand / (2 * params) < 0.53


def test_modelslim_w4a8_version_decides_the_packing(tmp_path):
    """W4A8_DYNAMIC weights are int8 holding one int4 each, or two where the description's version
    is 1.0.0 (vllm-ascend v0.13.0 vllm_ascend/quantization/w4a8_dynamic.py get_weight)."""
    c = vendored("qwen3-32b")
    sizes = {}
    for version in ("0", "1.0.0"):
        description = {
            k: ("W4A8_DYNAMIC" if v == "W8A8" else v) for k, v in qwen3_w8a8_description(c["num_hidden_layers"]).items()
        }
        description["version"] = version
        folder = write(tmp_path, f"w4a8-{version}", c, description)
        sizes[version] = device_fit.device_weight_bytes(modelmod.load(folder), 1, 1, expert_parallel=False)
    params = hand_parameters("qwen3-32b", c)
    unquantized = 2 * c["vocab_size"] * c["hidden_size"]
    assert sizes["1.0.0"] == pytest.approx((params - unquantized) * 0.5 + unquantized * 2, rel=WITHIN)
    assert sizes["0"] == pytest.approx((params - unquantized) * 1 + unquantized * 2, rel=WITHIN)


def test_an_unknown_modelslim_type_is_warned_not_guessed(tmp_path):
    c = vendored("qwen3-32b")
    folder = write(
        tmp_path, "odd", c, {"model_quant_type": "W2A2_NEW", "model.layers.0.mlp.up_proj.weight": "W2A2_NEW"}
    )
    odd = modelmod.load(folder)
    assert odd.weight_sizes is None
    assert odd.unknown_quantization == "quant_model_description.json has types W2A2_NEW"
