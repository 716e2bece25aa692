"""A model's config.json, read and checked, and what it implies for serving it: head_dim, MLA,
weights and KV-cache bytes per device, and how many tokens of KV cache fit.

What the estimate knows per architecture (attention kind, the kind of each layer, the MoE
layout, quantization sizes) is data: architectures.yaml (mooncake_pd.architectures).

The estimate (README, `generate --help`):
  KV bytes per token per device, per layer kind (vLLM vllm/v1/kv_cache_interface.py)
    full attention: 2 x KV heads on the device x head_dim x dtype bytes, where a device holds
    ceil(KV heads / TP) heads, at least 1 (KV heads are replicated when fewer than TP)
    MLA: (kv_lora_rank + qk_rope_head_dim) x dtype bytes (the latent is replicated per TP rank)
    sliding-window and chunked-local layers: as full attention, but a sequence keeps at most
    its window (chunk) of tokens where vLLM's hybrid KV cache manager runs; else every token
    linear attention (Gated DeltaNet): no per-token KV, a fixed state per sequence
  weights per device: parameters counted from config.json x bytes per weight / TP; routed experts
    / (TP x DP) with --enable-expert-parallel
  memory for KV per device: HBM x gpu-memory-utilization - weights - activations, activations
    estimated (not profiled) as 2 GiB + max-num-batched-tokens x hidden_size x 12 bytes
  KV tokens per DP rank: that memory / KV bytes per token per device; each DP rank has its own cache.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mooncake_pd import architectures
from mooncake_pd import quantization as quantmod
from mooncake_pd.errors import MooncakePdError

GIB = 1024**3

# Architectures whose config fields the estimate understands (architectures.yaml).
KNOWN_ARCHITECTURES = architectures.names()
# Where a refusal of an unknown architecture sends the reader.
UNKNOWN_DOC = 'docs/models-and-accelerators.md, "An architecture the estimate does not know"'
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
    # msModelSlim's quant_model_description.json beside config.json, where there is one.
    ascend_description: dict[str, Any] | None = None
    # The language model's settings: text_config of a multimodal config (Llama 4), else raw
    # (vLLM's hf_text_config).
    text: dict[str, Any] = field(default_factory=dict)
    # What the estimate knows of the architecture (architectures.yaml): config.json's, or the
    # one --architecture names; None for an architecture the table does not know.
    spec: architectures.Architecture | None = None
    # The estimate's inputs given by hand (--kv-bytes-per-token, --weights-gib) for an
    # architecture the table does not know (or to override what it estimates).
    kv_bytes_override: int | None = None
    weights_bytes_override: float | None = None

    @property
    def stand_in(self) -> bool:
        """Whether the estimate reads another architecture than config.json's (--architecture)."""
        return self.spec is not None and self.spec.name != self.architecture

    @property
    def model_type(self) -> str | None:
        kind = self.raw.get("model_type")
        return str(kind) if kind else None

    @property
    def is_mla(self) -> bool:
        if self.spec is not None:
            return self.spec.attention == "mla"
        return "kv_lora_rank" in self.text

    @property
    def experts(self) -> int:
        """Routed experts per MoE layer (the architecture's field), 0 for a dense model."""
        if self.spec is not None:
            name = self.spec.moe.get("experts")
            return int(self.text.get(name) or 0) if name else 0
        return next(
            (
                int(self.text.get(k) or 0)
                for k in ("n_routed_experts", "num_experts", "num_local_experts")
                if self.text.get(k)
            ),
            0,
        )

    @property
    def is_moe(self) -> bool:
        """Routed experts in config.json (DeepSeek-V2/V3/R1, Qwen-MoE, GLM-4.5, gpt-oss, Llama 4)."""
        return self.experts > 0

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
    def weight_sizes(self) -> quantmod.WeightSizes | None:
        """Bytes per weight of each group of weights (quantmod.GROUPS) the checkpoint stores:
        msModelSlim's quant_model_description.json, the architecture's own size of its method
        (gpt-oss's MXFP4 experts), or config.json's quantization_config; None where unquantized
        or of a method the estimate does not know (then everything counts at torch_dtype)."""
        if self.ascend_description is not None:
            return quantmod.modelslim(self.ascend_description, self.dtype_bytes)[0]
        size = self.spec.size(self.quant_method) if self.spec is not None else None
        if size:
            covered = float(size["bytesPerWeight"])
            groups = ("routedExperts",) if size.get("covers") == "routedExperts" else quantmod.GROUPS
            sizes = {g: covered if g in groups else float(self.dtype_bytes) for g in quantmod.GROUPS}
            return quantmod.WeightSizes(str(self.quant_method), sizes, f"{self.quant_method} ({', '.join(groups)})")
        return quantmod.from_config(self.quantization, self.dtype_bytes)

    @property
    def unknown_quantization(self) -> str | None:
        """What the estimate does not know of a quantized checkpoint (it then counts torch_dtype),
        or None."""
        if self.ascend_description is not None:
            unknown = quantmod.modelslim(self.ascend_description, self.dtype_bytes)[1]
            return f"quant_model_description.json has types {', '.join(unknown)}" if unknown else None
        if self.quantization and self.weight_sizes is None:
            return f"config.json has quantization_config (quant_method {self.quant_method or '?'})"
        return None

    def unknown_problem(self) -> str | None:
        """Why the estimate cannot run for this model (an architecture the table does not know,
        without the figures given by hand), naming the ways forward; None where it can."""
        if self.spec is not None or (self.kv_bytes_override and self.weights_bytes_override):
            return None
        missing = [
            option
            for option, value in (
                ("--kv-bytes-per-token", self.kv_bytes_override),
                ("--weights-gib", self.weights_bytes_override),
            )
            if not value
        ]
        return (
            f"{self.path}: architectures: {self.architecture!r} is not one the estimate knows (known: "
            f"{', '.join(KNOWN_ARCHITECTURES)}); give --architecture NAME to estimate it as a known architecture whose "
            f"config.json fields it has, or {' and '.join(missing)} (the KV cache of one token and the weights of the "
            f"whole model at TP 1); {UNKNOWN_DOC}"
        )


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
    """Read and check a model's config.json (a directory or the file itself). The language
    model's fields are read from text_config where config.json nests them (a multimodal model,
    Llama 4), as vLLM's hf_text_config does. An architecture architectures.yaml does not know
    loads (spec None): the estimate then needs configure()'s figures (Model.unknown_problem)."""
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
    names = config.get("architectures") or []
    architecture = str(names[0]) if isinstance(names, list) and names else ""
    nested = config.get("text_config")
    text = nested if isinstance(nested, dict) else config
    heads = _int(text, "num_attention_heads", file)
    head_dim = text.get("head_dim")
    if head_dim is not None:
        head_dim = _int(text, "head_dim", file)
    description = model / "quant_model_description.json" if model.is_dir() else None
    ascend_quantization, ascend_description = None, None
    if description and description.is_file():
        try:
            ascend_description = json.loads(description.read_text())
        except json.JSONDecodeError as e:
            raise ModelError(f"{description}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
        if not isinstance(ascend_description, dict):
            raise ModelError(f"{description}: (root): must be a JSON object")
        ascend_quantization = str(ascend_description.get("model_quant_type", "W8A8"))
    spec = architectures.get(architecture)
    # Where config.json does not say, the architecture's config class decides (Gemma 3: tied).
    tied = bool(spec.row.get("tiedEmbeddings")) if spec is not None else False
    return Model(
        path=file,
        architecture=architecture,
        hidden_size=_int(text, "hidden_size", file),
        num_attention_heads=heads,
        num_hidden_layers=_int(text, "num_hidden_layers", file),
        num_key_value_heads=_int(text, "num_key_value_heads", file, heads),
        head_dim_in_config=head_dim,
        max_position_embeddings=_int(text, "max_position_embeddings", file, required=False) or None,
        vocab_size=_int(text, "vocab_size", file, required=False),
        intermediate_size=_int(text, "intermediate_size", file, required=False),
        # torch_dtype, or dtype as transformers 4.56 and later write it.
        dtype=str(
            config.get("torch_dtype")
            or text.get("torch_dtype")
            or config.get("dtype")
            or text.get("dtype")
            or "bfloat16"
        ),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", tied))),
        rope_scaling=text.get("rope_scaling") or None,
        quantization=config.get("quantization_config") or text.get("quantization_config") or None,
        ascend_quantization=ascend_quantization,
        ascend_description=ascend_description,
        raw=config,
        text=text,
        spec=spec,
    )


def configure(
    model: Model,
    *,
    architecture: str | None = None,
    kv_bytes_per_token: int | None = None,
    weights_gib: float | None = None,
) -> Model:
    """The model with the estimate's inputs given by hand: --architecture (estimate it as that
    known architecture), --kv-bytes-per-token and --weights-gib (whole model, TP 1)."""
    spec = model.spec
    if architecture:
        try:
            spec = architectures.require(architecture)
        except architectures.ArchitectureError as e:
            raise ModelError(str(e)) from None
        if spec.name != model.architecture:
            problems = stand_in_problems(model.text, spec)
            if problems:
                raise ModelError(
                    f"{model.path}: --architecture {spec.name} would size {model.architecture} from fields it "
                    f"lacks or without fields that change its size: {'; '.join(problems)}; give "
                    "--kv-bytes-per-token and --weights-gib instead (the model's own figures)"
                )
    weights = weights_gib * GIB if weights_gib else None
    return replace(model, spec=spec, kv_bytes_override=kv_bytes_per_token or None, weights_bytes_override=weights)


# Fields every estimate reads or derives (hidden size, heads, the dense MLP, the dtype): a stand-in
# architecture that reads them reads the model's own. Others of architectures.yaml (experts, shared
# experts, dense layers, attention and layer kinds) change the size where a config sets them.
GENERIC_FIELDS = frozenset(
    {"num_hidden_layers", "num_key_value_heads", "head_dim", "torch_dtype", "intermediate_size", "sliding_window"}
)


def _field_name(entry: str) -> tuple[str, bool]:
    """An architectures.yaml `fields` entry as (config key, optional): 'head_dim (else ...)' is
    derived where absent; 'text_config.x' is read from the text config."""
    name = entry.split(" (else", 1)[0].strip().removeprefix("text_config.")
    # A vision_config field is the vision tower's, not the text config's (vision_parameters).
    return name, " (else" in entry or name == "torch_dtype" or name.startswith("vision_config.")


def _read_fields(spec: architectures.Architecture) -> set[str]:
    row = spec.row
    names = {_field_name(str(entry))[0] for entry in row.get("fields") or []}
    names |= {str(v) for v in (row.get("moe") or {}).values() if isinstance(v, str)}
    names |= {str(v) for v in (row.get("linear") or {}).values() if isinstance(v, str)}
    layers = row.get("layers") or {}
    if isinstance(layers.get("field"), str):
        names.add(str(layers["field"]))
    return names


def _is_set(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def stand_in_problems(text: dict[str, Any], spec: architectures.Architecture) -> list[str]:
    """Why `spec` (an --architecture the config is not) cannot size this config: a field its
    estimate reads that the config lacks, or one the config sets that changes the size and that
    `spec` would ignore (an expert count it reads under another name, shared experts, dense layers,
    attention or layer kinds), each named."""
    problems = []
    for entry in spec.row.get("fields") or []:
        name, optional = _field_name(str(entry))
        if not optional and name not in text:
            problems.append(f"{name}: missing, which {spec.name} reads")
    size_fields = set()
    for other in architectures.names():
        size_fields |= _read_fields(architectures.require(other))
    ignored = sorted((size_fields - GENERIC_FIELDS - _read_fields(spec)) & {k for k, v in text.items() if _is_set(v)})
    problems += [f"{name}: set ({text[name]!r}), which {spec.name} ignores" for name in ignored]
    return problems


def _require_known(model: Model) -> architectures.Architecture | None:
    """The architecture the estimate reads, or ModelError: unknown without the figures given by
    hand, or a config.json lacking a field the architecture's layers read (an --architecture that
    does not fit the model)."""
    problem = model.unknown_problem()
    if problem:
        raise ModelError(problem)
    spec = model.spec
    if spec is None or model.kv_bytes_override:
        return spec
    needed = ["kv_lora_rank"] if spec.attention == "mla" else []
    kinds = spec.layer_kinds(model.text, model.num_hidden_layers)
    for kind, names in (
        ("sliding", ("window",)),
        ("chunked", ("chunk",)),
        ("linear", tuple(spec.row.get("linear") or ())),
    ):
        if kind in kinds:
            needed += [spec.field(kind, name) for name in names]
    missing = [
        name for name in needed if not isinstance(model.text.get(name), int) or isinstance(model.text.get(name), bool)
    ]
    if missing:
        raise ModelError(
            f"{model.path}: {', '.join(missing)}: missing or not an integer, which {spec.name} reads "
            "(architectures.yaml); give the --architecture the model is, or --kv-bytes-per-token and --weights-gib"
        )
    return spec


@dataclass(frozen=True)
class KvLayout:
    """What the KV cache of one sequence takes on one device: bytes per token of the layers
    that keep every token, (bytes per token, window) of the layers that keep at most a window
    of tokens (sliding window, chunked local, where vLLM's hybrid KV cache manager runs), and a
    fixed state per sequence (linear attention)."""

    per_token: int
    windowed: tuple[tuple[int, int], ...] = ()
    per_sequence: int = 0

    @property
    def plain(self) -> bool:
        return not self.windowed and not self.per_sequence

    def bytes_for(self, tokens: int) -> int:
        """Bytes of one sequence of `tokens` tokens."""
        held = sum(b * min(tokens, w) for b, w in self.windowed)
        return self.per_sequence + self.per_token * tokens + held

    def tokens_in(self, memory: float) -> int:
        """The longest sequence whose cache fits in `memory` bytes."""
        if self.plain:
            return int(memory // self.per_token)
        low, high = 0, 1
        while self.bytes_for(high) <= memory and high < 10**12:
            low, high = high, high * 2
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if self.bytes_for(mid) <= memory else (low, mid)
        return low


# The indexer's cache per token per layer, per architectures.yaml indexer.cache kind, from its
# head size `head`, the MLA latent's bytes `latent` and the model dtype's bytes `dtype`.
INDEXER_CACHE = {
    # vllm v0.13.0 vllm/model_executor/models/deepseek_v2.py Indexer: DeepseekV32IndexerCache of
    # head_dim + head_dim // quant_block_size (128) * 4 uint8 (FP8 values, a float32 scale per 128).
    "fp8Scaled": lambda head, latent, dtype: head + head // 128 * 4,
    # vllm-ascend v0.18.0 AscendMLAAttentionSpec: head_size kv_lora_rank + qk_rope_head_dim +
    # index_head_dim in the model dtype (sparse C8 off).
    "modelDtype": lambda head, latent, dtype: head * dtype,
    # vllm-ascend v0.13.0 model_runner_v1.py: a FullAttentionSpec of the latent (K and V: twice
    # its bytes), the second half holding the indexer's keys.
    "latentTwice": lambda head, latent, dtype: latent,
}


def indexer_cache(spec: architectures.Architecture | None, engine: tuple[str, str] | None) -> dict[str, Any] | None:
    """The indexer cache row (kind, source) of `engine` (family, version) in architectures.yaml,
    the family's `all` row where versions do not differ; NVIDIA's (vLLM's own) where engine is
    None or not recorded; None for an architecture without an indexer."""
    rule = (spec.row.get("indexer") if spec is not None else None) or {}
    if not rule:
        return None
    family, version = engine or ("nvidia", "")
    rows = rule["cache"].get(family) or rule["cache"]["nvidia"]
    row = rows.get(version) or rows.get("all") or rule["cache"]["nvidia"]["all"]
    return dict(row)


def _attention_bytes(model: Model, tensor: int, engine: tuple[str, str] | None = None) -> int:
    """Bytes one token takes in one attention layer on one device of a TP group (vLLM
    kv_cache_interface.py AttentionSpec / MLAAttentionSpec page_size_bytes per token), with the
    sparse-attention indexer's cache beside it (DeepSeek-V3.2), which is not split over TP either."""
    if model.is_mla:
        latent = (int(model.text["kv_lora_rank"]) + int(model.text.get("qk_rope_head_dim", 0))) * model.dtype_bytes
        cache = indexer_cache(model.spec, engine)
        if cache is None or model.spec is None:
            return latent
        head = int(model.text[str(model.spec.row["indexer"]["head"])])
        return latent + int(INDEXER_CACHE[str(cache["kind"])](head, latent, model.dtype_bytes))
    heads_per_device = max(1, math.ceil(model.num_key_value_heads / tensor))
    return 2 * heads_per_device * model.head_dim * model.dtype_bytes


def linear_state_bytes(model: Model, spec: architectures.Architecture, tensor: int) -> int:
    """The state of one linear-attention (Gated DeltaNet) layer of one sequence on one device:
    vLLM's MambaStateShapeCalculator.gated_delta_net_state_shape (v0.13.0
    vllm/model_executor/layers/mamba/mamba_utils.py 170-193) in the model dtype, no speculative
    tokens. vLLM pads it to the attention layers' page size (a few per cent), not counted."""
    c = model.text

    def value(name: str) -> int:
        return int(c[spec.field("linear", name)])

    kernel, key_heads, value_heads = value("convKernel"), value("keyHeads"), value("valueHeads")
    key_dim, value_dim = value("keyDim"), value("valueDim")
    conv = (kernel - 1) * (key_dim * key_heads * 2 + value_dim * value_heads) // tensor
    temporal = value_heads // tensor * key_dim * value_dim
    return (conv + temporal) * model.dtype_bytes


def layer_kinds(model: Model) -> list[str]:
    spec = _require_known(model)
    return spec.layer_kinds(model.text, model.num_hidden_layers) if spec else ["full"] * model.num_hidden_layers


def kv_layout(model: Model, tensor: int, *, hybrid: bool = False, engine: tuple[str, str] | None = None) -> KvLayout:
    """The KV cache of one sequence on one device of a TP group, per layer kind. hybrid: vLLM's
    hybrid KV cache manager runs (architectures.hybrid_kv_cache); without it sliding-window and
    chunked-local layers keep every token (vllm/v1/core/kv_cache_utils.py
    unify_hybrid_kv_cache_specs). --kv-bytes-per-token gives the whole model's at TP 1, split
    over TP. engine: (accelerator family, engine version), where the layout differs by engine
    (an indexer's cache)."""
    spec = _require_known(model)
    if model.kv_bytes_override:
        return KvLayout(math.ceil(model.kv_bytes_override / tensor))
    per_layer = _attention_bytes(model, tensor, engine)
    per_token, per_sequence = 0, 0
    windows: dict[int, int] = {}
    for kind in layer_kinds(model):
        if kind == "linear" and spec is not None:
            per_sequence += linear_state_bytes(model, spec, tensor)
        elif kind in ("sliding", "chunked") and hybrid and spec is not None:
            window = int(model.text[spec.field(kind, "window" if kind == "sliding" else "chunk")])
            windows[window] = windows.get(window, 0) + per_layer
        elif kind != "linear":
            per_token += per_layer
    return KvLayout(per_token, tuple(sorted((b, w) for w, b in windows.items())), per_sequence)


def kv_bytes_per_token(
    model: Model, tensor: int, *, hybrid: bool = False, engine: tuple[str, str] | None = None
) -> int:
    """KV-cache bytes one token takes on one device of a TP group, in the layers that keep every token."""
    return kv_layout(model, tensor, hybrid=hybrid, engine=engine).per_token


def _attention_parameters(model: Model, kind: str, spec: architectures.Architecture | None) -> int:
    c, h = model.text, model.hidden_size
    heads, kv, hd = model.num_attention_heads, model.num_key_value_heads, model.head_dim
    if kind == "linear" and spec is not None:
        key = int(c[spec.field("linear", "keyDim")]) * int(c[spec.field("linear", "keyHeads")])
        value_heads = int(c[spec.field("linear", "valueHeads")])
        value = int(c[spec.field("linear", "valueDim")]) * value_heads
        # in_proj_qkvz, in_proj_ba, out_proj of Gated DeltaNet.
        return h * (2 * key + 2 * value) + h * 2 * value_heads + value * h
    if model.is_mla:
        rope, nope = int(c.get("qk_rope_head_dim", 0)), int(c.get("qk_nope_head_dim", hd))
        v, latent, q_rank = int(c.get("v_head_dim", hd)), int(c["kv_lora_rank"]), c.get("q_lora_rank")
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        return q + h * (latent + rope) + latent * heads * (nope + v) + heads * v * h
    return 2 * h * heads * hd + 2 * h * kv * hd


def vision_parameters(model: Model, spec: architectures.Architecture | None) -> int:
    """Parameters of the vision tower of a multimodal model (architectures.yaml vision), which
    vLLM loads beside the language model: its transformer blocks (attention 4 x hidden^2, MLP
    2 x hidden x intermediate), the patch and position embeddings, and the mergers or projector
    into the language model's hidden size. Biases and norms are not counted (under 0.1%)."""
    rule = (spec.row.get("vision") if spec is not None else None) or {}
    config = model.raw.get(str(rule.get("config", "vision_config")))
    if not rule or not isinstance(config, dict):
        return 0

    def value(key: str, default: int = 0) -> int:
        field = rule.get(key)
        found = config.get(field) if isinstance(field, str) else None
        return int(found) if isinstance(found, int) and not isinstance(found, bool) else default

    h, layers, inner = value("hidden"), value("layers"), value("intermediate")
    patch, channels, temporal = value("patch", 1), value("channels", 3), value("temporal", 1)
    total = layers * (4 * h * h + 2 * h * inner) + channels * temporal * patch * patch * h
    positions = value("positions") or (value("image") // patch) ** 2
    total += positions * h
    merger = rule.get("merger") or {}
    if merger:
        merged = h * int(config.get(str(merger["spatialMerge"])) or 1) ** 2
        extra = config.get(str(merger.get("extra", ""))) or []
        count = 1 + (len(extra) if isinstance(extra, list) else 0)
        total += count * (merged * merged + merged * int(config.get(str(merger["out"])) or model.hidden_size))
    if rule.get("projector"):
        total += h * model.hidden_size
    return total


def _indexer_parameters(model: Model, spec: architectures.Architecture | None) -> int:
    """Parameters of one layer's sparse-attention indexer (DeepSeek-V3.2: wq_b, wk, weights_proj;
    vllm v0.13.0 vllm/model_executor/models/deepseek_v2.py Indexer)."""
    rule = (spec.row.get("indexer") if spec is not None else None) or {}
    if not rule:
        return 0
    c, h = model.text, model.hidden_size
    head, heads = int(c[str(rule["head"])]), int(c[str(rule["heads"])])
    q_rank = int(c.get("q_lora_rank") or h)
    return q_rank * heads * head + h * head + h * heads


def parameter_groups(model: Model) -> dict[str, int]:
    """Parameters per group of weights (quantmod.GROUPS), counted from config.json with the
    architecture's MoE layout (architectures.yaml moe), its indexer and its vision tower."""
    spec = _require_known(model)
    c, h, layers = model.text, model.hidden_size, model.num_hidden_layers
    kinds = layer_kinds(model)
    groups = dict.fromkeys(quantmod.GROUPS, 0)
    groups["embeddings"] = model.vocab_size * h
    groups["lmHead"] = 0 if model.tie_word_embeddings else model.vocab_size * h
    groups["attention"] = sum(_attention_parameters(model, kind, spec) for kind in kinds)
    groups["attention"] += layers * _indexer_parameters(model, spec)
    groups["vision"] = vision_parameters(model, spec)
    experts = model.experts
    dense_mlp = 3 * h * model.intermediate_size
    if not experts:
        groups["denseMlp"] = layers * dense_mlp
        return groups
    moe = spec.moe if spec else {}
    intermediate = int(c.get(moe.get("intermediate", "moe_intermediate_size")) or model.intermediate_size)
    expert_size = 3 * h * intermediate
    dense_layers = int(c.get(moe.get("denseLayers", "first_k_dense_replace")) or 0)
    step = int(c.get(moe["every"]) or 1) if moe.get("every") else 1
    # Llama 4: a layer is MoE where (index + 1) % interleave_moe_layer_step == 0, the others dense
    # with intermediate_size_mlp (vllm v0.13.0 llama4.py 343-355).
    moe_layers = sum(1 for i in range(dense_layers, layers) if (i + 1) % step == 0) if step > 0 else 0
    dense_layers = layers - moe_layers
    if moe.get("denseIntermediate") and c.get(moe["denseIntermediate"]):
        dense_mlp = 3 * h * int(c[moe["denseIntermediate"]])
    shared_count = moe.get("shared", "n_shared_experts")
    shared_experts = shared_count if isinstance(shared_count, int) else int(c.get(shared_count) or 0)
    shared_intermediate = int(c.get(moe.get("sharedIntermediate", "")) or intermediate)
    groups["denseMlp"] = dense_layers * dense_mlp
    # The router (hidden x experts) counts with the shared experts: unquantized or small.
    groups["sharedExperts"] = moe_layers * (shared_experts * 3 * h * shared_intermediate + h * experts)
    groups["routedExperts"] = moe_layers * experts * expert_size
    return groups


def parameters(model: Model) -> tuple[int, int]:
    """(parameters outside routed experts, parameters of routed experts)."""
    groups = parameter_groups(model)
    return sum(groups.values()) - groups["routedExperts"], groups["routedExperts"]


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
    # The KV cache of a sequence per layer kind; kv_tokens_per_rank is then the longest sequence
    # that fits, and sequences are counted by their bytes (windows and states included).
    layout: KvLayout | None = None
    kv_bytes: float = 0.0

    @property
    def _plain(self) -> bool:
        return self.layout is None or self.layout.plain

    @property
    def fits(self) -> bool:
        """max-num-seqs sequences of the expected length fit, and so does one max-model-len sequence."""
        if self._plain or self.layout is None:
            return (
                self.max_model_len <= self.kv_tokens_per_rank
                and self.max_num_seqs * self.context_len <= self.kv_tokens_per_rank
            )
        return (
            self.max_model_len <= self.kv_tokens_per_rank
            and self.max_num_seqs * self.layout.bytes_for(self.context_len) <= self.kv_bytes
        )

    @property
    def seqs_that_fit(self) -> int:
        """Sequences of the expected length the KV cache of a DP rank holds."""
        if not self.context_len:
            return 0
        if self._plain or self.layout is None:
            return self.kv_tokens_per_rank // self.context_len
        return int(self.kv_bytes // self.layout.bytes_for(self.context_len))


def device_weight_bytes(model: Model, tensor: int, data: int, *, expert_parallel: bool) -> float:
    """Bytes of weights on one device: everything but the routed experts split over TP; the
    routed experts over TP, or with expert parallelism over TP x DP (vLLM's EP size: docs.vllm.ai,
    serving/expert_parallel_deployment, "EP_SIZE = TP_SIZE x DP_SIZE"). Each group of weights
    counts at its quantization's bytes (Model.weight_sizes), else at torch_dtype. --weights-gib
    gives the whole model's, split over TP."""
    if model.weights_bytes_override:
        return model.weights_bytes_override / tensor
    groups = parameter_groups(model)
    sizes = model.weight_sizes
    expert_shards = tensor * data if expert_parallel else tensor
    total = 0.0
    for group, count in groups.items():
        size = sizes.bytes(group) if sizes is not None else float(model.dtype_bytes)
        total += count * size / (expert_shards if group == "routedExperts" else tensor)
    return total


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
    hybrid: bool = False,
    engine: tuple[str, str] | None = None,
) -> RoleFit:
    """What fits on one device of a role; context_len (the expected tokens of a sequence)
    defaults to max_model_len, sizing for sequences that all reach it; hybrid: vLLM's hybrid KV
    cache manager runs (kv_layout)."""
    weights = device_weight_bytes(model, tensor, data, expert_parallel=expert_parallel)
    activations = 2 * GIB + max_num_batched_tokens * model.hidden_size * 12
    usable = hbm_gib * GIB * memory_utilization
    kv = max(0.0, usable - weights - activations)
    layout = kv_layout(model, tensor, hybrid=hybrid, engine=engine)
    return RoleFit(
        role=role,
        tensor=tensor,
        data=data,
        kv_bytes_per_token=layout.per_token,
        weights_gib=weights / GIB,
        activations_gib=activations / GIB,
        usable_gib=usable / GIB,
        kv_gib=kv / GIB,
        kv_tokens_per_rank=layout.tokens_in(kv),
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        context_len=context_len or max_model_len,
        layout=layout,
        kv_bytes=kv,
    )
