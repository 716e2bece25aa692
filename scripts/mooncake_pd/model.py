"""A model's config.json, read and checked (Model: the fields serving depends on, head_dim, MLA,
dtype and quantization), and the architecture the estimate reads. The estimate summed up below is
computed by kv_cache (KV-cache bytes per token and per sequence on a device) and device_fit (the
weights on a device and how many tokens of KV cache fit beside them).

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


def _json_object(file: Path) -> dict[str, Any]:
    """A JSON file whose root is an object (config.json, quant_model_description.json), or
    ModelError naming the file, and the line and column where it is not JSON."""
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise ModelError(f"{file}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{file}: (root): must be a JSON object")
    return data


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
    config = _json_object(file)
    names = config.get("architectures") or []
    architecture = str(names[0]) if isinstance(names, list) and names else ""
    nested = config.get("text_config")
    text = nested if isinstance(nested, dict) else config
    heads = _int(text, "num_attention_heads", file)
    head_dim = text.get("head_dim")
    if head_dim is not None:
        head_dim = _int(text, "head_dim", file)
    description = model / "quant_model_description.json" if model.is_dir() else None
    ascend_quantization: str | None = None
    ascend_description: dict[str, Any] | None = None
    if description and description.is_file():
        ascend_description = _json_object(description)
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
