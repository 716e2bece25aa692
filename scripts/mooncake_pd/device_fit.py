"""What one device of a role holds: the weights' parameters by group (outside and inside routed
experts, the vision tower, the indexer) and their bytes, and the sequences whose KV cache fits
beside them (fit)."""

from __future__ import annotations

from dataclasses import dataclass

from mooncake_pd import architectures
from mooncake_pd import quantization as quantmod
from mooncake_pd.kv_cache import KvLayout, kv_layout, layer_kinds
from mooncake_pd.model import GIB, Model, _require_known


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
