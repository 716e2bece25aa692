"""The KV cache one token and one sequence take on one device of a TP group, per layer kind (full,
sliding-window and chunked attention, MLA and its sparse-attention indexer, linear-attention
state), as vLLM allocates it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mooncake_pd import architectures
from mooncake_pd.model import Model, _require_known


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
