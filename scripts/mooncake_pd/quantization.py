"""Bytes per weight of a quantized checkpoint, per group of weights, as the engine allocates them.

A checkpoint says how its weights are stored in one of four places, each read here the way the
engine that loads it reads it (versions: vLLM v0.13.0 wheel, vLLM-Ascend tag v0.13.0; the files
named are unchanged in what is read here through v0.33.0 / v0.23.0):

- compressed-tensors (quantization_config.quant_method compressed-tensors, e.g. Kimi-K2-Thinking's
  int4): `config_groups.*.weights` gives num_bits, type and strategy (group, channel, tensor,
  block) with group_size or block_structure; `ignore` names the layers left unquantized, a
  "re:" entry a regular expression matched from the start of the layer name, any other entry the
  exact name (vllm v0.13.0 vllm/model_executor/layers/quantization/compressed_tensors/utils.py
  _is_equal_or_regex_match). Each config group names its `targets`; a layer takes the scheme of
  the first target, over all groups in order, that its name matches, else the first whose text its
  module class's name contains ("Linear" in QKVParallelLinear; a "Linear" target also stands for
  FusedMoE, the routed experts) (compressed_tensors/utils.py find_matched_target,
  compressed_tensors.py _quantization_scheme_map_from_config, _add_fused_moe_to_target_scheme_map).
  Only Linear layers and FusedMoE take a scheme: embeddings and lm_head (ParallelLMHead is no
  LinearBase) stay in the model dtype (compressed_tensors.py get_quant_method). A group of weights
  here is matched by its example layer names, as a checkpoint names them, and its layers' class.
  A group-quantized weight stores num_bits / 8 bytes plus one scale of the model dtype per group
  (compressed_tensors/schemes/compressed_tensors_wNa16.py create_weights: weight_packed int32 of
  32 / num_bits values, weight_scale params_dtype of input_size / group_size per output row), and
  a zero point of num_bits per group where not symmetric.
- FP8 (quant_method fp8, DeepSeek-V3/R1/V3.2, MiniMax-M2): one byte per Linear weight, plus one
  float32 scale per block of weight_block_size (vllm v0.13.0 quantization/fp8.py Fp8LinearMethod
  create_weights, weight_scale_inv); embeddings and lm_head (ParallelLMHead is no LinearBase) in
  the model dtype; modules_to_not_convert are left unquantized.
- bits (AWQ, GPTQ): quantization_config.bits / 8 for every weight (scales not counted).
- msModelSlim (quant_model_description.json beside config.json, what vLLM-Ascend loads with
  --quantization ascend: vllm-ascend v0.13.0 vllm_ascend/quantization/quant_config.py
  AscendQuantConfig.get_config_filenames, and is_layer_skipped_ascend: a layer whose
  "<prefix>.weight" is "FLOAT" is left unquantized): each weight's type; W8A8, W8A8_DYNAMIC,
  W8A16, W8A8_MIX store int8 (w8a8.py, w8a8_dynamic.py, w8a16.py get_weight), W4A8_DYNAMIC int8
  holding one int4 per byte, or two where the description's version is "1.0.0"
  (w4a8_dynamic.py AscendW4A8DynamicLinearMethod.get_weight), W4A16 two int4 per byte (w4a16.py).
  A description without per-weight entries (model_quant_type alone) sizes every weight at that
  type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The groups of weights the estimate counts (model.parameter_groups), and a layer name of each as
# a DeepSeek/Qwen-style checkpoint names it: what an `ignore` rule or a description entry of the
# group looks like.
GROUPS = ("embeddings", "attention", "denseMlp", "sharedExperts", "routedExperts", "lmHead", "vision")
EXAMPLES: dict[str, tuple[str, ...]] = {
    "embeddings": ("model.embed_tokens",),
    "attention": (
        "model.layers.1.self_attn.q_proj",
        "model.layers.1.self_attn.o_proj",
        "model.layers.1.self_attn.kv_a_proj_with_mqa",
    ),
    "denseMlp": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"),
    "sharedExperts": ("model.layers.1.mlp.shared_experts.gate_proj", "model.layers.1.mlp.shared_expert.gate_proj"),
    "routedExperts": ("model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.block_sparse_moe.experts.0.w1"),
    "lmHead": ("lm_head",),
    "vision": ("visual.blocks.0.attn.qkv", "vision_tower.vision_model.encoder.layers.0.self_attn.q_proj"),
}
# The module class vLLM builds for each group's layers (vllm v0.13.0 model_executor/layers/linear.py,
# fused_moe/layer.py), which a compressed-tensors class-name target is matched against; embeddings
# and lm_head take no compressed-tensors scheme.
CLASSES = {
    "attention": "QKVParallelLinear",
    "denseMlp": "MergedColumnParallelLinear",
    "sharedExperts": "MergedColumnParallelLinear",
    "routedExperts": "FusedMoE",
    "vision": "QKVParallelLinear",
}
# Which weights of a msModelSlim description belong to which group (its keys are the checkpoint's
# tensor names): the first pattern that matches decides; a key none matches is not counted. A
# group's size is the mean of its weights' types, each weight counting once whatever its shape (an
# approximation where one group mixes types).
DESCRIPTION_GROUPS = (
    # A MoE router (mlp.gate) is counted with the shared experts' group but is tiny: its entry,
    # FLOAT in msModelSlim's output, would weigh as much as a projection in the mean.
    ("", re.compile(r"\.(mlp|block_sparse_moe)\.gate\.weight$")),
    # Norms (layernorms, Qwen3's q_norm and k_norm): FLOAT vectors, no Linear weights.
    ("", re.compile(r"norm\.weight$")),
    ("embeddings", re.compile(r"(^|\.)embed_tokens\.weight$")),
    ("lmHead", re.compile(r"(^|\.)lm_head\.weight$")),
    ("vision", re.compile(r"^(visual|vision_tower|vision_model|model\.visual)\.")),
    ("sharedExperts", re.compile(r"\.shared_experts?\.")),
    ("routedExperts", re.compile(r"\.experts\.\d+\.")),
    ("attention", re.compile(r"\.(self_attn|attn|attention)\.")),
    ("denseMlp", re.compile(r"\.mlp\.")),
)
# Bytes of a compressed-tensors scale_dtype (torch's names).
SCALE_BYTES = {
    "torch.uint8": 1.0,
    "torch.float8_e4m3fn": 1.0,
    "torch.float8_e8m0fnu": 1.0,
    "torch.float16": 2.0,
    "torch.bfloat16": 2.0,
    "torch.float32": 4.0,
}
# Bytes per weight of a msModelSlim type (vLLM-Ascend v0.13.0 vllm_ascend/quantization/*.py
# get_weight, above); W4A8_DYNAMIC depends on the description's version.
MODELSLIM_BYTES = {"W8A8": 1.0, "W8A8_DYNAMIC": 1.0, "W8A16": 1.0, "W8A8_MIX": 1.0, "W4A16": 0.5}


@dataclass(frozen=True)
class WeightSizes:
    """Bytes per weight of each group (GROUPS), what the checkpoint's quantization stores."""

    method: str
    sizes: dict[str, float]
    # Where the sizes come from, for notes.
    source: str

    def bytes(self, group: str) -> float:
        return self.sizes[group]


def _ignored(name: str, rules: list[str]) -> bool:
    """Whether compressed-tensors' `ignore` (or FP8's modules_to_not_convert) leaves `name` out."""
    for rule in rules:
        if rule.startswith("re:"):
            if re.match(rule[3:], name):
                return True
        elif rule == name:
            return True
    return False


def _group_ignored(group: str, rules: list[str]) -> bool:
    """Whether the rules leave a group unquantized: a rule matching any of its example names (a
    checkpoint names its layers one way; an ignore rule written for one of the group's layers,
    e.g. only kv_a_proj_with_mqa, counts the whole group unquantized, which overstates it)."""
    return any(_ignored(name, rules) for name in EXAMPLES[group])


def _target_weights(config: dict[str, Any]) -> dict[str, Any]:
    """compressed-tensors' targets in the order vLLM matches them, each with its group's weights:
    over config_groups in order, a target named again taking the later group's weights in its first
    place; FusedMoE after them with Linear's weights where Linear is a target and FusedMoE is not."""
    targets: dict[str, Any] = {}
    for group in (config.get("config_groups") or {}).values():
        if isinstance(group, dict):
            for target in group.get("targets") or []:
                targets[str(target)] = group.get("weights")
    if "Linear" in targets and "FusedMoE" not in targets:
        targets["FusedMoE"] = targets["Linear"]
    return targets


def _matches(value: str, target: str, contains: bool) -> bool:
    """compressed-tensors' _is_equal_or_regex_match: "re:" a regular expression matched from the
    start, else equal, or (for a class name) contained, case aside."""
    if target.startswith("re:"):
        return re.match(target[3:], value) is not None
    return target.lower() in value.lower() if contains else target == value


def _matched_target(group: str, targets: dict[str, Any]) -> str | None:
    """The target whose scheme a group's layers take: the first matching one of its example names,
    else the first its module class contains; None where none does (vLLM refuses such a Linear
    layer at load: "Unable to find matching target")."""
    for name in EXAMPLES[group]:
        hit = next((t for t in targets if _matches(name, t, contains=False)), None)
        if hit is not None:
            return hit
    return next((t for t in targets if _matches(CLASSES[group], t, contains=True)), None)


def _weight_bytes(weights: Any, dtype_bytes: float) -> tuple[float, str] | None:
    """Bytes per weight of one compressed-tensors `weights` entry and its shape in words; None
    where it gives no num_bits."""
    if not isinstance(weights, dict) or not isinstance(weights.get("num_bits"), int):
        return None
    bits = int(weights["num_bits"])
    per_weight = bits / 8
    strategy = str(weights.get("strategy") or "tensor")
    kind = weights.get("type") or "int"
    # A scale is stored in the model dtype unless the group names its own (MXFP4's torch.uint8).
    scale_bytes = SCALE_BYTES.get(str(weights.get("scale_dtype") or ""), dtype_bytes)
    if strategy == "group" and isinstance(weights.get("group_size"), int) and weights["group_size"] > 0:
        size = int(weights["group_size"])
        per_weight += scale_bytes / size
        if weights.get("symmetric") is False:
            per_weight += bits / 8 / size
        return per_weight, f"{bits}-bit {kind}, group {size}"
    if strategy == "block" and isinstance(weights.get("block_structure"), list):
        rows, cols = (int(v) for v in weights["block_structure"][:2])
        return per_weight + 4 / (rows * cols), f"{bits}-bit {kind}, block {rows}x{cols}"
    return per_weight, f"{bits}-bit {kind}, per {strategy}"


def compressed_tensors(config: dict[str, Any], dtype_bytes: float) -> WeightSizes | None:
    """Sizes of a compressed-tensors checkpoint: each group of weights at the scheme of the config
    group whose target it matches, unless `ignore` leaves it out; None where no config group gives
    num_bits."""
    targets = _target_weights(config)
    if not any(_weight_bytes(w, dtype_bytes) for w in targets.values()):
        return None
    rules = [str(r) for r in config.get("ignore") or []]
    sizes = dict.fromkeys(GROUPS, dtype_bytes)
    shapes: dict[str, list[str]] = {}
    for group in CLASSES:
        target = _matched_target(group, targets)
        scheme = _weight_bytes(targets[target], dtype_bytes) if target is not None else None
        if scheme is None or _group_ignored(group, rules):
            continue
        sizes[group] = scheme[0]
        shapes.setdefault(f"{scheme[1]} ({scheme[0]:.4g} bytes a weight)", []).append(group)
    kept = "; ".join(f"{shape} for {', '.join(groups)}" for shape, groups in shapes.items())
    return WeightSizes(
        "compressed-tensors",
        sizes,
        f"compressed-tensors {kept or 'for no weights'}; the rest at the model dtype",
    )


def fp8(config: dict[str, Any], dtype_bytes: float) -> WeightSizes:
    """Sizes of an FP8 checkpoint (quant_method fp8): one byte and the block scales per Linear
    weight, embeddings and lm_head at the model dtype."""
    block = config.get("weight_block_size")
    per_weight = 1.0
    if isinstance(block, list) and len(block) == 2 and all(isinstance(v, int) and v > 0 for v in block):
        per_weight += 4 / (block[0] * block[1])
    rules = [str(r) for r in config.get("modules_to_not_convert") or config.get("ignored_layers") or []]
    sizes = {
        group: dtype_bytes if group in ("embeddings", "lmHead") or _group_ignored(group, rules) else per_weight
        for group in GROUPS
    }
    shape = f"block {block[0]}x{block[1]}" if isinstance(block, list) and len(block) == 2 else "per tensor"
    return WeightSizes(
        "fp8", sizes, f"fp8 {shape} ({per_weight:.5g} bytes a weight); embeddings and lm_head unquantized"
    )


def modelslim(description: dict[str, Any], dtype_bytes: float) -> tuple[WeightSizes | None, list[str]]:
    """Sizes from a msModelSlim quant_model_description.json: per group, the mean bytes of its
    weights' types (FLOAT at the model dtype); with no per-weight entries, every weight at
    model_quant_type. Also the types it does not know (then None)."""
    model_type = str(description.get("model_quant_type") or "W8A8")
    four_bit = 0.5 if str(description.get("version") or "") == "1.0.0" else 1.0

    def size(kind: str) -> float | None:
        if kind == "FLOAT":
            return dtype_bytes
        if kind == "W4A8_DYNAMIC":
            return four_bit
        return MODELSLIM_BYTES.get(kind)

    entries = {
        k: str(v) for k, v in description.items() if isinstance(k, str) and k.endswith(".weight") and isinstance(v, str)
    }
    unknown = sorted({v for v in [*entries.values(), model_type] if size(v) is None})
    if unknown:
        return None, unknown
    if not entries:
        whole = size(model_type) or 1.0
        return WeightSizes("ascend", dict.fromkeys(GROUPS, whole), f"msModelSlim {model_type}, every weight"), []
    counted: dict[str, list[float]] = {g: [] for g in GROUPS}
    for key, kind in entries.items():
        group = next((g for g, pattern in DESCRIPTION_GROUPS if pattern.search(key)), "")
        if group:
            counted[group].append(size(kind) or dtype_bytes)
    sizes = {g: (sum(v) / len(v) if v else dtype_bytes) for g, v in counted.items()}
    return (
        WeightSizes(
            "ascend",
            sizes,
            f"msModelSlim {model_type}, per weight from quant_model_description.json "
            f"({len(entries)} weights; FLOAT ones at the model dtype)",
        ),
        [],
    )


def from_config(config: dict[str, Any] | None, dtype_bytes: float) -> WeightSizes | None:
    """Sizes of config.json's quantization_config, or None where it has none the estimate knows."""
    if not config:
        return None
    method = str(config.get("quant_method") or "").lower().replace("compressed_tensors", "compressed-tensors")
    if method == "compressed-tensors":
        return compressed_tensors(config, dtype_bytes)
    if method == "fp8":
        return fp8(config, dtype_bytes)
    bits = config.get("bits")
    if isinstance(bits, int) and not isinstance(bits, bool):
        return WeightSizes(method or "bits", dict.fromkeys(GROUPS, bits / 8), f"{method or 'quantized'} {bits}-bit")
    return None
