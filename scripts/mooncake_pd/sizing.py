"""The model-derived keys of a values set (derived): max-model-len, max-num-seqs and memory from
the fit estimate, with the notes and hints generate prints and update rewrites."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from mooncake_pd import chartfiles, device_fit, kv_cache, profiles
from mooncake_pd import model as modelmod
from mooncake_pd.model_support import check_support, connector_of, hybrid_kv_cache
from mooncake_pd.topology import (
    ACCELERATORS,
    HAND_WRITTEN,
    ROLES,
    GenerateError,
    RoleTopology,
    check_quantization,
)
from mooncake_pd.values_file import REMOVE, merged

# The tokens (prompt plus output) a sequence is expected to hold where --expected-context-len is
# not given, at most max-model-len: `generate --help` says why.
DEFAULT_CONTEXT_LEN = 4096


# How the notes under the header's KV-cache estimate begin (derived() writes them; update finds
# and rewrites them by these, keeping every other comment line); see is_note.
NOTE_PREFIXES = (
    "WARNING: ",
    "rope scaling ",
    "Ascend quantized weights ",
    "max-num-seqs sized for ",
    "KV cache: ",
    "weights: ",
    "RDMA: ",
)


# What a layer kind keeps, in the notes (architectures.yaml layers).
KIND_WORDS = {"sliding": "sliding-window", "chunked": "chunked-local", "linear": "linear-attention"}


@dataclass
class Result:
    values: dict[str, Any]
    fits: list[device_fit.RoleFit]
    notes: list[str] = field(default_factory=list)
    # The expected tokens of a sequence that max-num-seqs is sized by.
    context_len: int = 0
    # Printed, not written into the header: choices the estimate suggests (room_hint,
    # expert_parallel_hint).
    hints: list[str] = field(default_factory=list)


def kv_notes(
    model: modelmod.Model, fits: list[device_fit.RoleFit], hybrid: bool | None, effective: dict[str, Any]
) -> list[str]:
    """What the KV-cache estimate assumed of layers that do not keep every token."""
    if model.unknown_problem() is not None or model.kv_bytes_override:
        return []
    kinds = kv_cache.layer_kinds(model)
    version = profiles.engine_version(effective)
    connector = connector_of(effective, version)
    notes = []
    family = ACCELERATORS[effective["accelerator"]["type"]].family
    cache = kv_cache.indexer_cache(model.spec, (family, version))
    if cache is not None and model.spec is not None:
        head = int(model.text[str(model.spec.row["indexer"]["head"])])
        latent = (int(model.text["kv_lora_rank"]) + int(model.text.get("qk_rope_head_dim", 0))) * model.dtype_bytes
        extra = int(kv_cache.INDEXER_CACHE[str(cache["kind"])](head, latent, model.dtype_bytes))
        notes.append(
            f"KV cache: each of {len(kinds)} layers' sparse-attention indexer keeps {extra:,} bytes a token beside "
            f"MLA's {latent:,} ({cache['source']})"
        )
    for kind in ("sliding", "chunked"):
        count = kinds.count(kind)
        if not count or model.spec is None:
            continue
        field = model.spec.field(kind, "window" if kind == "sliding" else "chunk")
        window = int(model.text[field])
        if hybrid:
            notes.append(
                f"KV cache: {count} {KIND_WORDS[kind]} layers keep at most {window:,} tokens of a sequence ({field}; "
                f"vLLM's hybrid KV cache manager runs at {version} with {connector}); the others every token"
            )
        else:
            why = (
                "vLLM turns its hybrid KV cache manager off for chunked-local attention"
                if kind == "chunked"
                else f"PD with {connector} turns vLLM's hybrid KV cache manager off at {version}"
            )
            notes.append(f"KV cache: {count} {KIND_WORDS[kind]} layers keep every token ({why})")
    count = kinds.count("linear")
    if count:
        states = ", ".join(
            f"{f.role} TP {f.tensor}: {(f.layout.per_sequence if f.layout else 0) / 2**20:.1f} MiB" for f in fits
        )
        notes.append(
            f"KV cache: {count} {KIND_WORDS['linear']} layers hold a fixed state per sequence ({states} a device)"
        )
    return notes


def number(value: Any, key: str, *, minimum: float, integer: bool = True, maximum: float | None = None) -> Any:
    """A number the estimate reads from values (a file update edits), or GenerateError naming the
    key: a 0 or a word there would divide by zero or stop in a traceback. A vLLM flag in args may
    be a string (the chart passes it as a word): one that reads as the number is taken."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, str) and ".args." in key:
        with contextlib.suppress(ValueError):
            value = int(value) if integer else float(value)
    ok = isinstance(value, int if integer else (int, float)) and not isinstance(value, bool)
    if not ok or value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum:g}" if maximum is not None else ""
        raise GenerateError(f"{key}: {value!r}: must be {kind} of at least {minimum:g}{upper}; correct it in the file")
    return value


def seq_caps(values: dict[str, Any]) -> dict[str, int]:
    """Each role's max-num-seqs in `values` (engine.args under the role's args; vLLM's 256 where
    neither sets it): the most that generate writes, lowered where the KV cache holds fewer."""
    caps = {}
    for role in ROLES:
        args = merged(values["engine"].get("args") or {}, values[role].get("args") or {})
        caps[role] = number(args.get("max-num-seqs") or 256, f"{role}.args.max-num-seqs", minimum=1)
    return caps


def default_context_len(max_model_len: int) -> int:
    """The expected tokens of a sequence where --expected-context-len is not given."""
    return min(DEFAULT_CONTEXT_LEN, max_model_len)


def is_note(line: str) -> bool:
    """A line of the notes generate writes under the KV-cache estimate (update rewrites them)."""
    return line.startswith(NOTE_PREFIXES) or bool(re.match(r"(prefill|decode): max-num-seqs ", line))


def derived(
    model: modelmod.Model,
    effective: dict[str, Any],
    *,
    force: bool = False,
    hbm_gib: float | None = None,
    fixed_head_dim: bool = False,
    context_len: int | None = None,
    caps: dict[str, int] | None = None,
) -> tuple[dict[str, Any], Result]:
    """The model-derived keys for a values set (`effective`: chart defaults merged with the
    file), as {dotted key: value, None for null, REMOVE to delete}, and the fit estimate behind
    them. hbm_gib overrides the accelerator's device memory (NVIDIA GPUs differ). head_dim is
    written only with fixed_head_dim (where config.json is not read at start): otherwise the
    preflight derives it from the mounted model, and a fixed one is removed.

    max-num-seqs is each role's cap (`caps`, else the values' own: seq_caps) lowered to the
    sequences of context_len tokens (default: max-model-len) the KV cache of a DP rank holds;
    the cache must hold one max-model-len sequence, or GenerateError."""
    kind = effective["accelerator"]["type"]
    if kind in HAND_WRITTEN:
        raise GenerateError(f"accelerator.type {kind!r}: {HAND_WRITTEN[kind]}")
    accelerator = ACCELERATORS.get(kind)
    if accelerator is None:
        raise GenerateError(f"accelerator.type {kind!r}: use one of {', '.join(ACCELERATORS)}")
    problem = model.unknown_problem()
    if problem:
        raise GenerateError(problem)
    # Whether the engine version runs the architecture there (architectures.yaml): refused,
    # or a warning where support is uncertain.
    warning = check_support(model, effective)
    # The checkpoint's quantization as the family's engine reads it: refused where the engine
    # does not load it (FP8 on Ascend; also here for update, which does not call generate).
    check_quantization(model, accelerator)
    hbm = hbm_gib or accelerator.hbm_gib
    notes: list[str] = [warning] if warning else []
    version = profiles.engine_version(effective)
    hybrid = hybrid_kv_cache(model, version, connector_of(effective, version), effective["engine"].get("args") or {})
    max_model_len = number(effective["model"]["maxModelLen"], "model.maxModelLen", minimum=1)
    expected = context_len or max_model_len
    if expected > max_model_len:
        raise GenerateError(
            f"--expected-context-len {expected}: above max-model-len {max_model_len}; use at most {max_model_len}"
        )
    # The longest context as vLLM derives it from config.json with model.hfOverrides applied (a
    # YaRN extension is given there): the engines' preflight's own rule, one source of truth.
    preflight = chartfiles.program("preflight")
    overrides = effective["model"].get("hfOverrides") or {}
    text, _ = preflight.text_config(preflight.with_overrides(model.raw, overrides))
    reached = preflight.rope_limit(text)
    limit = int(reached[0]) if reached else None
    if reached and limit and max_model_len > limit:
        scaled = reached[1] not in preflight.UNSCALED_ROPE
        reach = (
            f"the {limit} tokens its {reached[1]} RoPE scaling reaches"
            if scaled
            else f"max_position_embeddings ({limit})"
        )
        if not force:
            raise GenerateError(
                f"--max-model-len {max_model_len}: above {reach} of {model.path}; use at most {limit}, "
                "extend it with model.hfOverrides.rope_scaling where the model supports it, or --force"
            )
        notes.append(f"WARNING: max-model-len {max_model_len} is above {reach} (--force)")
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    # Qwen3-VL's M-RoPE says rope_type default: no scaling, no note.
    if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) not in (None, "default"):
        kind = rope.get("rope_type") or rope.get("type")
        source = "model.hfOverrides" if "rope_scaling" in overrides else "config.json"
        notes.append(f"rope scaling {kind} (factor {rope.get('factor')}): applied by vLLM from {source}")
    # Sized at the quantization's bytes per weight where known (quantization.WeightSizes: FP8 on
    # NVIDIA, compressed-tensors, msModelSlim); a warning only where the estimate must guess.
    unknown = model.unknown_quantization
    if unknown:
        notes.append(
            f"WARNING: {unknown}: the estimate does not know its bytes per weight and counts {model.dtype_bytes} "
            f"(torch_dtype {model.dtype}); check that the weights fit"
        )
    sizes = model.weight_sizes
    if sizes is not None and (sizes.method == "compressed-tensors" or "per weight" in sizes.source):
        notes.append(f"weights: {sizes.source}")
    if model.ascend_quantization:
        notes.append(f"Ascend quantized weights ({model.ascend_quantization}): engine.args.quantization: ascend")
    notes.append(
        f"max-num-seqs sized for {expected:,}-token sequences (--expected-context-len); one max-model-len "
        f"sequence ({max_model_len:,} tokens) fits"
    )

    keys: dict[str, Any] = {
        "model.mla": model.is_mla,
        "model.moe": True if model.is_moe else REMOVE,
        "model.hfOverrides.head_dim": (model.head_dim if fixed_head_dim and model.needs_head_dim_override else REMOVE),
        "engine.args.quantization": "ascend" if model.ascend_quantization else REMOVE,
        # Remote code runs from the model folder in a root, host-network pod: only for a model
        # whose config.json names its own classes (auto_map); null drops the chart default (the
        # guide's true, kept for seed parity).
        "engine.args.trust-remote-code": True if "auto_map" in model.raw else None,
    }
    # From vLLM-Ascend v0.23.0 finegrained_tp_config sizes stop a dense model at start
    # (profiles.yaml finegrainedTpModels): null drops the chart default's (the guide's decode
    # lmhead_tensor_parallel_size) where the engine version says so.
    engine = profiles.profile(effective["accelerator"]["type"], version=profiles.engine_version(effective)).engine
    if accelerator.additional_config and engine["finegrainedTpModels"] == "moe" and not model.is_moe:
        for role in ROLES:
            args = merged(effective["engine"].get("args") or {}, effective[role].get("args") or {})
            if isinstance(args.get("additional-config"), dict) and "finegrained_tp_config" in args["additional-config"]:
                keys[f"{role}.args.additional-config.finegrained_tp_config"] = None
    caps = caps or seq_caps(effective)
    fits = []
    hints = []
    for role in ROLES:
        v = effective[role]
        args = merged(effective["engine"].get("args") or {}, v.get("args") or {})
        par = v["parallelism"]
        result = device_fit.fit(
            model,
            role=role,
            tensor=number(par["tensor"], f"{role}.parallelism.tensor", minimum=1),
            data=number(par["data"], f"{role}.parallelism.data", minimum=1),
            hbm_gib=hbm,
            memory_utilization=number(
                args.get("gpu-memory-utilization", 0.9),
                f"{role}.args.gpu-memory-utilization",
                minimum=0.01,
                maximum=1,
                integer=False,
            ),
            max_num_batched_tokens=number(
                args.get("max-num-batched-tokens", 8192), f"{role}.args.max-num-batched-tokens", minimum=1
            ),
            max_num_seqs=caps[role],
            max_model_len=max_model_len,
            context_len=expected,
            expert_parallel=bool(args.get("enable-expert-parallel")),
            hybrid=bool(hybrid),
            engine=(accelerator.family, version),
        )
        if result.kv_gib <= 0:
            # The fix that works: with expert parallel already on, the experts are spread over the
            # role's TP x DP devices, so only more of them (or more nodes) make room.
            if args.get("enable-expert-parallel"):
                fix = f"raise --{role}-tp or --{role}-dp (or --{role}-nodes): experts are spread over more devices"
            else:
                fix = f"raise --{role}-tp" + (" or --enable-expert-parallel" if device_fit.parameters(model)[1] else "")
            raise GenerateError(
                f"--{role}-tp {result.tensor}: {result.weights_gib:.1f} GiB of weights and "
                f"{result.activations_gib:.1f} GiB of activations per device leave no room for the KV cache "
                f"in {result.usable_gib:.1f} GiB; {fix}"
            )
        if result.kv_tokens_per_rank < max_model_len:
            raise GenerateError(
                f"--max-model-len {max_model_len}: needs {max_model_len} tokens of KV cache per DP rank, but "
                f"{role} (TP {result.tensor}) fits {result.kv_tokens_per_rank}; lower --max-model-len or raise "
                f"--{role}-tp"
            )
        # At least 1: the check above leaves room for one max-model-len sequence, hence for one
        # of the expected length.
        seqs = max(1, min(result.max_num_seqs, result.seqs_that_fit))
        if seqs < result.max_num_seqs:
            notes.append(
                f"{role}: max-num-seqs lowered from {result.max_num_seqs} to {seqs} so that {seqs} sequences of "
                f"{expected:,} tokens fit the KV cache"
            )
            result = dataclasses.replace(result, max_num_seqs=seqs)
        keys[f"{role}.args.max-num-seqs"] = seqs
        fits.append(result)
        if role == "decode" and result.seqs_that_fit > seqs:
            hints.append(room_hint(seqs, result.seqs_that_fit, expected))
    notes.extend(kv_notes(model, fits, hybrid, effective))
    rdma = rdma_note(effective)
    if rdma:
        notes.append(rdma)
    return keys, Result(values={}, fits=fits, notes=notes, context_len=expected, hints=hints)


def rdma_note(effective: dict[str, Any]) -> str | None:
    """Where a role spans nodes on a family that offers RDMA between them (profiles.yaml
    families.<family>.rdma without a refusal: NVIDIA) and accelerator.rdma is off: what moves
    over TCP then, and the key that changes it. None otherwise."""
    accelerator = ACCELERATORS[effective["accelerator"]["type"]]
    family = profiles.load()["families"][accelerator.family]
    if (family.get("rdma") or {}).get("refusal", "") != "" or (effective["accelerator"].get("rdma") or {}).get(
        "enabled"
    ):
        return None
    spread = [
        f"{role} ({int(effective[role].get('workerReplicas') or 0) + 1} nodes)"
        for role in ROLES
        if int(effective[role].get("workerReplicas") or 0) > 0
    ]
    if not spread:
        return None
    return (
        f"RDMA: {' and '.join(spread)} span nodes with accelerator.rdma off: NCCL (TP, DP and expert parallel "
        "between nodes) and NIXL's UCX backend (the KV cache) use TCP sockets there; on an InfiniBand or RoCE fabric "
        'set accelerator.rdma.enabled: true (docs/deployment.md, "Multi-node on NVIDIA: RDMA")'
    )


def room_hint(seqs: int, room: int, context_len: int) -> str:
    """What to do where decode's max-num-seqs stays below what its KV cache holds. Only decode's:
    decode keeps a sequence for its whole answer, so the KV cache bounds how many it runs at
    once; prefill keeps one only while it computes the prompt and hands the cache over, and its
    max-num-seqs batches prompts. generate writes at most the chart's cap (and update rewrites a
    generated file's back to it), so the way to use the room is a values file layered after."""
    return (
        f"hint: decode runs at most {seqs} sequences per DP rank (max-num-seqs) while its KV cache holds {room:,} "
        f"sequences of {context_len:,} tokens; to run more at once (more throughput, a longer time per output "
        f"token), set decode.args.max-num-seqs up to {room} in a second values file given after this one (update "
        "rewrites this file's)"
    )


def expert_parallel_hint(model: modelmod.Model, roles: dict[str, RoleTopology]) -> str:
    """For a mixture-of-experts model without --enable-expert-parallel: what expert parallelism
    would change in the estimate (weights per device, per role)."""
    experts = model.experts
    changes = []
    for role, t in roles.items():
        before, after = (
            device_fit.device_weight_bytes(model, t.tensor, t.data, expert_parallel=ep) / modelmod.GIB
            for ep in (False, True)
        )
        changes.append(f"{role} TP {t.tensor} x DP {t.data}: {before:.1f} -> {after:.1f} GiB")
    return (
        f"hint: {model.path.parent.name} is a mixture-of-experts model ({experts} routed experts): "
        "--enable-expert-parallel places whole experts on the TP x DP devices of a role instead of splitting "
        f"each over TP, which leaves more room for the KV cache where DP > 1 (weights per device: "
        f"{'; '.join(changes)}); vLLM's guide: docs.vllm.ai, serving/expert_parallel_deployment"
    )


def fit_table(fits: list[device_fit.RoleFit]) -> str:
    header = (
        "role",
        "TP x DP",
        "KV B/token/dev",
        "weights GiB/dev",
        "activ. GiB",
        "KV GiB/dev",
        "KV tokens/rank",
        "seqs x tokens",
    )
    rows = [header]
    for f in fits:
        rows.append(
            (
                f.role,
                f"{f.tensor} x {f.data}",
                f"{f.kv_bytes_per_token:,}",
                f"{f.weights_gib:.1f}",
                f"{f.activations_gib:.1f}",
                f"{f.kv_gib:.1f}",
                f"{f.kv_tokens_per_rank:,}",
                f"{f.max_num_seqs} x {f.context_len:,}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
