"""A model's config.json, read and checked, and what it implies for serving it: head_dim, MLA,
weights and KV-cache bytes per device, and how many tokens of KV cache fit.

The estimate (README, `generate --help`):
  KV bytes per token per device
    standard attention: 2 x layers x KV heads on the device x head_dim x dtype bytes, where a
    device holds ceil(KV heads / TP) heads, at least 1 (KV heads are replicated when fewer than TP)
    MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes (the latent is replicated per TP rank)
  weights per device: parameters counted from config.json x bytes per weight / TP; routed experts
    / (TP x DP) with --enable-expert-parallel
  memory for KV per device: HBM x gpu-memory-utilization - weights - activations, activations
    estimated (not profiled) as 2 GiB + max-num-batched-tokens x hidden_size x 12 bytes
  KV tokens per DP rank: that memory / KV bytes per token per device; each DP rank has its own cache.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mooncake_pd.errors import MooncakePdError

GIB = 1024**3

# Architectures whose config fields the estimate understands.
KNOWN_ARCHITECTURES = (
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class EngineQuantization:
    """What the engine of an accelerator family loads from config.json's quantization_config."""

    engine: str
    # vLLM's Platform.device_name, as its refusal at start names it.
    device: str
    # The quant_method values it loads; None: every method vLLM registers.
    methods: frozenset[str] | None
    # What to use instead of a checkpoint it does not load.
    fix: str = ""


# Per accelerator family (chart/files/profiles.yaml families): EngineQuantization.
# vLLM's ModelConfig._verify_quantization takes quant_method from config.json and passes it to
# current_platform.verify_quantization, which refuses a method outside the platform's
# supported_quantization at start ("fp8 quantization is currently not supported in npu.").
# Kept here, not as a field of profiles.yaml families: only generate and update read it (whether
# a checkpoint starts at all, its bytes per weight in the estimate); the chart never reads a
# model's config.json and passes engine.args.quantization through, and the cpu family, whose
# values are written by hand, would carry a row nothing reads. test_generate checks that every
# family generate writes for has a row.
ENGINE_QUANTIZATION: dict[str, EngineQuantization] = {
    # Upstream vLLM on CUDA: Platform.supported_quantization is empty (vllm 0.13.0,
    # vllm/platforms/interface.py), so every method loads where the GPU's compute capability
    # allows; FP8 (Fp8Config.get_min_capability 80) stores one byte per weight, natively on
    # H100/H200/H20/L40S, as FP8 Marlin weight-only on A100.
    "nvidia": EngineQuantization("vLLM", "cuda", None),
    # vLLM-Ascend v0.13.0 (github.com/vllm-project/vllm-ascend, tag v0.13.0,
    # vllm_ascend/platform.py): NPUPlatform.supported_quantization = [ASCEND_QUANTIZATION_METHOD
    # ("ascend"), COMPRESSED_TENSORS_METHOD ("compressed-tensors")] (vllm_ascend/utils.py); the
    # "ascend" method is msModelSlim's (vllm_ascend/quantization/quant_config.py reads
    # quant_model_description.json; quantization/utils.py maps W8A8, W8A8_DYNAMIC, W4A8_DYNAMIC,
    # W8A16, W4A16, ...), set by engine.args.quantization ascend, not by config.json. Unchanged at
    # v0.18.0. v0.23.0 adds fp8 (quantization/fp8_config.py) for Ascend 950 (A5) only ("FP8
    # quantization is only supported on Ascend A5 devices", vllm-ascend#12826): the A2 and A3
    # profiles have no FP8, so an FP8 checkpoint (DeepSeek-V3/R1 as published) is refused here.
    "ascend": EngineQuantization(
        "vLLM-Ascend",
        "npu",
        frozenset({"compressed-tensors"}),
        "use the BF16 checkpoint or an msModelSlim W8A8 one (quant_model_description.json beside config.json, "
        "which generate writes as engine.args.quantization: ascend)",
    ),
}


class ModelError(MooncakePdError):
    """config.json is missing, unreadable or lacks a field; the message names file and field."""


@dataclass(frozen=True)
class Model:
    """The fields of config.json that serving depends on."""

    path: Path
    architecture: str
    hidden_size: int
    num_attention_heads: int
    num_hidden_layers: int
    num_key_value_heads: int
    head_dim_in_config: int | None
    max_position_embeddings: int | None
    vocab_size: int
    intermediate_size: int
    dtype: str
    tie_word_embeddings: bool
    rope_scaling: dict[str, Any] | None
    quantization: dict[str, Any] | None
    ascend_quantization: str | None
    raw: dict[str, Any]

    @property
    def is_mla(self) -> bool:
        return "kv_lora_rank" in self.raw

    @property
    def is_moe(self) -> bool:
        """Routed experts in config.json (DeepSeek-V2/V3/R1, Qwen-MoE, Mixtral)."""
        return any(int(self.raw.get(k) or 0) > 0 for k in ("n_routed_experts", "num_experts", "num_local_experts"))

    @property
    def head_dim(self) -> int:
        """head_dim from config.json, else hidden_size // num_attention_heads (what vLLM's Qwen2 uses)."""
        return self.head_dim_in_config or self.hidden_size // self.num_attention_heads

    @property
    def needs_head_dim_override(self) -> bool:
        """vLLM-Ascend's decode reads hf_text_config.head_dim: config.json must have it (facts.md)."""
        return self.head_dim_in_config is None and not self.is_mla

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    @property
    def quant_method(self) -> str | None:
        """quantization_config.quant_method of config.json, lower-cased as vLLM reads it."""
        method = (self.quantization or {}).get("quant_method")
        return str(method).lower().replace("compressed_tensors", "compressed-tensors") if method else None

    @property
    def quantized_weight_bytes(self) -> float | None:
        """Bytes per weight the checkpoint's quantization gives: 1 for Ascend W8A8 (msModelSlim)
        and FP8, bits/8 from quantization_config; None where it gives none (no quantization, or
        a method whose size the estimate does not know)."""
        if self.ascend_quantization:
            return 1.0
        bits = (self.quantization or {}).get("bits")
        if isinstance(bits, int) and not isinstance(bits, bool):
            return bits / 8
        if self.quant_method == "fp8":
            return 1.0
        return None

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight: the quantization's, else the dtype's."""
        quantized = self.quantized_weight_bytes
        return float(self.dtype_bytes) if quantized is None else quantized


def quantization_problem(model: Model, family: str) -> str | None:
    """Why the engine of an accelerator family (ENGINE_QUANTIZATION) does not load the model's
    quantization_config, or None where it does (or the model has none)."""
    method, engine = model.quant_method, ENGINE_QUANTIZATION[family]
    # msModelSlim's output (quant_model_description.json) is what engine.args.quantization ascend
    # loads, whatever quantization_config the original config.json carried over.
    if method is None or engine.methods is None or method in engine.methods or model.ascend_quantization:
        return None
    return (
        f"config.json has quantization_config quant_method {method}, which {engine.engine} does not run "
        f"(from config.json it loads {', '.join(sorted(engine.methods))}; at start vLLM stops with "
        f'"{method} quantization is currently not supported in {engine.device}.")'
    )


def _int(config: dict[str, Any], field: str, file: Path, default: int | None = None, *, required: bool = True) -> int:
    value = config.get(field, default)
    if value is None:
        if required:
            raise ModelError(f"{file}: {field}: missing; config.json must give it as an integer")
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelError(f"{file}: {field}: {value!r} is not an integer")
    if value <= 0:
        raise ModelError(f"{file}: {field}: {value} must be positive")
    return value


def config_path(model: Path) -> Path:
    """config.json of a model directory, or the path itself when it names a file."""
    return model / "config.json" if model.is_dir() else model


def load(model: Path) -> Model:
    """Read and check a model's config.json (a directory or the file itself)."""
    file = config_path(model)
    if not model.exists():
        raise ModelError(f"{model}: no such directory or file")
    if not file.is_file():
        raise ModelError(f"{file}: missing; point --model-dir at a directory holding config.json")
    try:
        config = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ModelError(f"{file}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(config, dict):
        raise ModelError(f"{file}: (root): must be a JSON object")
    architectures = config.get("architectures") or []
    architecture = architectures[0] if isinstance(architectures, list) and architectures else None
    if architecture not in KNOWN_ARCHITECTURES:
        raise ModelError(
            f"{file}: architectures: {architecture!r} is not one the estimate knows; known: "
            + ", ".join(KNOWN_ARCHITECTURES)
        )
    heads = _int(config, "num_attention_heads", file)
    head_dim = config.get("head_dim")
    if head_dim is not None:
        head_dim = _int(config, "head_dim", file)
    description = model / "quant_model_description.json" if model.is_dir() else None
    ascend_quantization = None
    if description and description.is_file():
        ascend_quantization = str(json.loads(description.read_text()).get("model_quant_type", "W8A8"))
    return Model(
        path=file,
        architecture=architecture,
        hidden_size=_int(config, "hidden_size", file),
        num_attention_heads=heads,
        num_hidden_layers=_int(config, "num_hidden_layers", file),
        num_key_value_heads=_int(config, "num_key_value_heads", file, heads),
        head_dim_in_config=head_dim,
        max_position_embeddings=_int(config, "max_position_embeddings", file, required=False) or None,
        vocab_size=_int(config, "vocab_size", file, required=False),
        intermediate_size=_int(config, "intermediate_size", file, required=False),
        dtype=str(config.get("torch_dtype") or "bfloat16"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        rope_scaling=config.get("rope_scaling") or None,
        quantization=config.get("quantization_config") or None,
        ascend_quantization=ascend_quantization,
        raw=config,
    )


def kv_bytes_per_token(model: Model, tensor: int) -> int:
    """KV-cache bytes one token takes on one device of a TP group."""
    if model.is_mla:
        latent = int(model.raw["kv_lora_rank"]) + int(model.raw.get("qk_rope_head_dim", 0))
        return model.num_hidden_layers * latent * model.dtype_bytes
    heads_per_device = max(1, math.ceil(model.num_key_value_heads / tensor))
    return 2 * model.num_hidden_layers * heads_per_device * model.head_dim * model.dtype_bytes


def parameters(model: Model) -> tuple[int, int]:
    """(parameters outside routed experts, parameters of routed experts), counted from config.json."""
    c, h, layers = model.raw, model.hidden_size, model.num_hidden_layers
    heads, kv, hd = model.num_attention_heads, model.num_key_value_heads, model.head_dim
    embeddings = model.vocab_size * h * (1 if model.tie_word_embeddings else 2)
    if model.is_mla:
        rope, nope = int(c.get("qk_rope_head_dim", 0)), int(c.get("qk_nope_head_dim", hd))
        v, latent, q_rank = int(c.get("v_head_dim", hd)), int(c["kv_lora_rank"]), c.get("q_lora_rank")
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        attention = q + h * (latent + rope) + latent * heads * (nope + v) + heads * v * h
    else:
        attention = 2 * h * heads * hd + 2 * h * kv * hd
    experts = int(c.get("n_routed_experts") or c.get("num_experts") or 0)
    dense_mlp = 3 * h * model.intermediate_size
    if not experts:
        return embeddings + layers * (attention + dense_mlp), 0
    expert_size = 3 * h * int(c.get("moe_intermediate_size") or model.intermediate_size)
    dense_layers = int(c.get("first_k_dense_replace", 0))
    moe_layers = layers - dense_layers
    shared = int(c.get("n_shared_experts") or 0) * expert_size + h * experts
    rest = embeddings + layers * attention + dense_layers * dense_mlp + moe_layers * shared
    return rest, moe_layers * experts * expert_size


@dataclass(frozen=True)
class RoleFit:
    """What fits on one device of a role, and hence per DP rank."""

    role: str
    tensor: int
    data: int
    kv_bytes_per_token: int
    weights_gib: float
    activations_gib: float
    usable_gib: float
    kv_gib: float
    kv_tokens_per_rank: int
    max_num_seqs: int
    max_model_len: int
    # The tokens (prompt plus output) a sequence is expected to hold: what max-num-seqs is sized by.
    context_len: int

    @property
    def fits(self) -> bool:
        """max-num-seqs sequences of the expected length fit, and so does one max-model-len sequence."""
        return (
            self.max_model_len <= self.kv_tokens_per_rank
            and self.max_num_seqs * self.context_len <= self.kv_tokens_per_rank
        )

    @property
    def seqs_that_fit(self) -> int:
        """Sequences of the expected length the KV cache of a DP rank holds."""
        return self.kv_tokens_per_rank // self.context_len if self.context_len else 0


def device_weight_bytes(model: Model, tensor: int, data: int, *, expert_parallel: bool) -> float:
    """Bytes of weights on one device: everything but the routed experts split over TP; the
    routed experts over TP, or with expert parallelism over TP x DP (vLLM's EP size: docs.vllm.ai,
    serving/expert_parallel_deployment, "EP_SIZE = TP_SIZE x DP_SIZE")."""
    rest, experts = parameters(model)
    expert_shards = tensor * data if expert_parallel else tensor
    return (rest / tensor + experts / expert_shards) * model.weight_bytes


def fit(
    model: Model,
    *,
    role: str,
    tensor: int,
    data: int,
    hbm_gib: float,
    memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    context_len: int | None = None,
    expert_parallel: bool = False,
) -> RoleFit:
    """What fits on one device of a role; context_len (the expected tokens of a sequence)
    defaults to max_model_len, sizing for sequences that all reach it."""
    weights = device_weight_bytes(model, tensor, data, expert_parallel=expert_parallel)
    activations = 2 * GIB + max_num_batched_tokens * model.hidden_size * 12
    usable = hbm_gib * GIB * memory_utilization
    kv = max(0.0, usable - weights - activations)
    per_token = kv_bytes_per_token(model, tensor)
    return RoleFit(
        role=role,
        tensor=tensor,
        data=data,
        kv_bytes_per_token=per_token,
        weights_gib=weights / GIB,
        activations_gib=activations / GIB,
        usable_gib=usable / GIB,
        kv_gib=kv / GIB,
        kv_tokens_per_rank=int(kv // per_token),
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        context_len=context_len or max_model_len,
    )
