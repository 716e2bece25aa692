"""Values from a model's config.json: the topology the user asks for, checked, plus the keys
derived from the model (MLA, quantization, max-num-seqs that fit; head_dim only on request, since
the engines' preflight derives it from the mounted model at start)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mooncake_pd import architectures, chartfiles, docs, paths, profiles
from mooncake_pd import model as modelmod
from mooncake_pd.errors import MooncakePdError

ROLES = ("prefill", "decode")
# A derived key that must be absent from the values file (None, by contrast, writes null,
# which makes helm drop the chart's default: `head_dim: null` means "no head_dim override").
REMOVE = "<remove>"
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


@dataclass(frozen=True)
class Accelerator:
    type: str
    devices_per_node: int
    hbm_gib: float
    family: str
    # --additional-config is read there (vLLM-Ascend); elsewhere generate drops the default's.
    additional_config: bool = True
    # Devices of this type with other memory sizes (`--gpu`): name -> GiB.
    variants: dict[str, float] = field(default_factory=dict)
    # The profile's default KV connector and its rule between prefill and decode TP
    # (chart/files/profiles.yaml tensorRule: prefillMultiple, equal or any).
    connector: str = "MooncakeConnectorV1"
    tensor_rule: str = "prefillMultiple"


# The chart's profiles (chart/files/profiles.yaml), but those whose values are written by hand
# (the cpu profile has no device memory to estimate: its KV cache is a size in host memory).
_PROFILES = profiles.all_profiles()
ACCELERATORS = {
    name: Accelerator(
        name,
        p.devices_per_node,
        p.device_memory_gib,
        p.family_name,
        bool(p.family["additionalConfig"]),
        {k: float(v) for k, v in p.row["deviceVariants"].items()},
        p.connectors[0],
        str(p.connector()["tensorRule"]),
    )
    for name, p in _PROFILES.items()
    if not p.row["handWritten"]
}
HAND_WRITTEN = {name: str(p.row["handWritten"]) for name, p in _PROFILES.items() if p.row["handWritten"]}
# What a profile without additional_config drops (null) from the chart defaults' args.
ASCEND_ONLY_ARGS = ("additional-config",)


class GenerateError(MooncakePdError):
    """The options cannot work; the message names the option and the valid choices."""


@dataclass(frozen=True)
class RoleTopology:
    tensor: int
    data: int
    nodes: int = 1
    replicas: int = 1

    @property
    def data_local(self) -> int:
        return self.data // self.nodes


@dataclass
class Result:
    values: dict[str, Any]
    fits: list[modelmod.RoleFit]
    notes: list[str] = field(default_factory=list)
    # The expected tokens of a sequence that max-num-seqs is sized by.
    context_len: int = 0
    # Printed, not written into the header: choices the estimate suggests (room_hint,
    # expert_parallel_hint).
    hints: list[str] = field(default_factory=list)


def chart_defaults(chart: Path | None = None) -> dict[str, Any]:
    """The chart's values.yaml (`chart`, else the checkout's or the installed package's)."""
    return yaml.safe_load((paths.chart_dir(chart) / "values.yaml").read_text())


def merged(base: Any, override: Any) -> Any:
    """override over base, maps merged key by key as helm merges values files."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merged(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def check_topology(model: modelmod.Model, accelerator: Accelerator, roles: dict[str, RoleTopology]) -> None:
    """Raise GenerateError naming the option when a role's parallelism cannot work."""
    per_node = accelerator.devices_per_node
    # The preflight's own rule, so a size generate accepts is one the pod does not refuse at start.
    rules = chartfiles.program("preflight")
    text, _ = rules.text_config(model.raw)
    for role, t in roles.items():
        valid = ", ".join(map(str, rules.valid_tensor_parallel(text, per_node)))
        problem = rules.tensor_parallel_problem(text, t.tensor)
        if problem:
            raise GenerateError(f"--{role}-tp {t.tensor}: {problem}; valid on {accelerator.type}: {valid}")
        # A TP group runs in one pod (the devices per pod are TP x DP-local): a TP above the
        # node's devices has no DP that fits, and listing the DPs that do would list none.
        if t.tensor > per_node:
            raise GenerateError(
                f"--{role}-tp {t.tensor}: above the {per_node} devices of an {accelerator.type} node, which one TP "
                f"group must fit; valid on {accelerator.type}: {valid}"
            )
        if t.data % t.nodes:
            raise GenerateError(
                f"--{role}-dp {t.data}: not divisible by --{role}-nodes {t.nodes}; valid --{role}-dp: "
                f"multiples of {t.nodes}"
            )
        devices = t.tensor * t.data_local
        if devices > per_node:
            local_ok = [d * t.nodes for d in range(1, per_node // t.tensor + 1)]
            raise GenerateError(
                f"--{role}-tp {t.tensor} x --{role}-dp {t.data} / --{role}-nodes {t.nodes} = {devices} devices per "
                f"pod, above the {per_node} of an {accelerator.type} node; valid --{role}-dp with this TP: "
                f"{', '.join(map(str, local_ok))}, or more --{role}-nodes"
            )
    check_tensor_rule(model, accelerator, roles["prefill"].tensor, roles["decode"].tensor)


def check_tensor_rule(model: modelmod.Model, accelerator: Accelerator, p: int, d: int) -> None:
    """The connector's rule between prefill TP `p` and decode TP `d` at the engine version, as the
    chart's validate.parallelism applies it (chart/templates/validate/_parallelism.tpl,
    profiles.yaml tensorRule), so generate never writes a pair render refuses."""
    rule, connector = accelerator.tensor_rule, accelerator.connector
    if rule == "equal" and p != d:
        raise GenerateError(f"--decode-tp {d}: differs from --prefill-tp {p}; {connector} needs equal TP")
    if rule == "decodeMultiple" and (d < p or d % p):
        valid = ", ".join(str(p * k) for k in range(1, accelerator.devices_per_node // p + 1))
        raise GenerateError(
            f"--decode-tp {d}: not a multiple of --prefill-tp {p}; {connector} at this engine version needs decode "
            f'TP to be a multiple of prefill TP (vLLM 0.13\'s NIXL: "Decode TP cannot be smaller than prefill TP"); '
            f"valid --decode-tp: {valid}, or --engine-version v0.18.0 or later, where either may divide the other"
        )
    if rule == "divisible" and max(p, d) % min(p, d):
        raise GenerateError(
            f"--decode-tp {d}: it and --prefill-tp {p} do not divide one another; {connector} needs the larger TP "
            "to be a multiple of the smaller"
        )
    if rule != "prefillMultiple":
        return
    if p < d:
        raise GenerateError(f"--prefill-tp {p}: below --decode-tp {d}; {connector} needs prefill TP >= decode TP")
    if not model.is_mla and p % d:
        valid = ", ".join(str(x) for x in _divisors(p, p) if model.num_attention_heads % x == 0)
        raise GenerateError(
            f"--decode-tp {d}: --prefill-tp {p} is not a multiple of it (required for non-MLA models); "
            f"valid --decode-tp: {valid}"
        )


def check_quantization(model: modelmod.Model, accelerator: Accelerator) -> None:
    """Raise GenerateError where the engine of the accelerator's family does not load the
    checkpoint's quantization_config (model.ENGINE_QUANTIZATION: an FP8 checkpoint on Ascend),
    naming the options and the fix."""
    problem = modelmod.quantization_problem(model, accelerator.family)
    if problem:
        fix = modelmod.ENGINE_QUANTIZATION[accelerator.family].fix
        others = sorted(a for a, p in ACCELERATORS.items() if not modelmod.quantization_problem(model, p.family))
        elsewhere = f", or --accelerator {' or '.join(others)}" if others else ""
        raise GenerateError(f"--model-dir {model.path.parent} on {accelerator.type}: {problem}; {fix}{elsewhere}")


@dataclass(frozen=True)
class Verdict:
    """Whether an engine version runs a model's architecture on an accelerator family:
    architectures.yaml's support status (supported, experimental, untested, unsupported), or
    unrecorded, with the reason and its source."""

    status: str
    reason: str

    @property
    def refused(self) -> bool:
        return self.status == "unsupported"


def connector_of(effective: dict[str, Any], version: str) -> str:
    """The KV connector a values set runs: kvTransfer.connector, else the profile's default."""
    name = (effective.get("kvTransfer") or {}).get("connector")
    return str(name) if name else profiles.profile(effective["accelerator"]["type"], version=version).connectors[0]


def hybrid_kv_cache(model: modelmod.Model, version: str, connector: str, args: dict[str, Any]) -> bool | None:
    """Whether vLLM's hybrid KV cache manager runs for this model under PD
    (architectures.hybrid_kv_cache); chunked-local layers turn it off at every version unless
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (vllm v0.13.0 vllm/config/vllm.py ~905-925)."""
    if model.unknown_problem() is None and "chunked" in modelmod.layer_kinds(model):
        return False
    return architectures.hybrid_kv_cache(version, connector, args)


def verdict(model: modelmod.Model, family: str, version: str, connector: str, args: dict[str, Any]) -> Verdict:
    """Whether `version` runs the model on `family` with `connector` (architectures.yaml)."""
    engine = modelmod.ENGINE_QUANTIZATION[family].engine if family in modelmod.ENGINE_QUANTIZATION else "the engine"
    spec = model.spec
    if spec is None:
        return Verdict("unrecorded", f"{model.architecture} is not in architectures.yaml; check that {engine} runs it")
    if model.stand_in:
        # --architecture sizes the model as a known one; whether the engine runs the model's own
        # architecture is what architectures.yaml does not record.
        return Verdict(
            "unrecorded",
            f"{model.architecture} is estimated as {spec.name} (--architecture); whether {engine} runs "
            f"{model.architecture} is not recorded: check it",
        )
    kinds = set(modelmod.layer_kinds(model))
    if "chunked" in kinds:
        # vLLM turns the hybrid manager off for chunked-local attention (hybrid_kv_cache).
        args = {**args, "disable-hybrid-kv-cache-manager": True}
    status, reason = architectures.verdict(spec, kinds, family, version, connector, args, model.model_type)
    return Verdict(status, reason)


def _runs_at(model: modelmod.Model, accelerator: str, args: dict[str, Any]) -> list[str]:
    """The engine versions of `accelerator` that run the model (not unsupported), with their status."""
    family = ACCELERATORS[accelerator].family
    out = []
    for version in profiles.versions_for(accelerator):
        connector = profiles.profile(accelerator, version=version).connectors[0]
        found = verdict(model, family, version, connector, args)
        if not found.refused:
            out.append(version if found.status == "supported" else f"{version} ({found.status})")
    return out


def check_support(model: modelmod.Model, effective: dict[str, Any]) -> str | None:
    """GenerateError where the engine version does not run the model's architecture on the
    accelerator (architectures.yaml), naming the versions and accelerators that do; a warning
    note where support is uncertain (experimental, untested, unrecorded); None where supported."""
    kind = effective["accelerator"]["type"]
    accelerator = ACCELERATORS[kind]
    version = profiles.engine_version(effective)
    connector = connector_of(effective, version)
    args = effective["engine"].get("args") or {}
    found = verdict(model, accelerator.family, version, connector, args)
    name = model.architecture + (f" ({model.model_type})" if model.model_type else "")
    if found.refused:
        here = _runs_at(model, kind, args)
        there = []
        for other in ACCELERATORS:
            runs = _runs_at(model, other, args) if other != kind else []
            if runs:
                there.append(f"--accelerator {other} ({', '.join(runs)})")
        fix = (
            f"give --engine-version (engine.version) {' or '.join(here)}"
            if here
            else f"no engine version on {kind} runs it"
        )
        elsewhere = (", or " if here else "; use ") + " or ".join(there) if there else ""
        raise GenerateError(
            f"--model-dir {model.path.parent}: {name} on {kind} at engine version {version}: not supported: "
            f"{found.reason}; {fix}{elsewhere}"
        )
    if found.status == "supported":
        return None
    words = {"unrecorded": "support not recorded"}
    return f"WARNING: {name} on {kind} at {version}: {words.get(found.status, found.status)}: {found.reason}"


def kv_notes(
    model: modelmod.Model, fits: list[modelmod.RoleFit], hybrid: bool | None, effective: dict[str, Any]
) -> list[str]:
    """What the KV-cache estimate assumed of layers that do not keep every token."""
    if model.unknown_problem() is not None or model.kv_bytes_override:
        return []
    kinds = modelmod.layer_kinds(model)
    version = profiles.engine_version(effective)
    connector = connector_of(effective, version)
    notes = []
    family = ACCELERATORS[effective["accelerator"]["type"]].family
    cache = modelmod.indexer_cache(model.spec, (family, version))
    if cache is not None and model.spec is not None:
        head = int(model.text[str(model.spec.row["indexer"]["head"])])
        latent = (int(model.text["kv_lora_rank"]) + int(model.text.get("qk_rope_head_dim", 0))) * model.dtype_bytes
        extra = int(modelmod.INDEXER_CACHE[str(cache["kind"])](head, latent, model.dtype_bytes))
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
        result = modelmod.fit(
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
                fix = f"raise --{role}-tp" + (" or --enable-expert-parallel" if modelmod.parameters(model)[1] else "")
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
            modelmod.device_weight_bytes(model, t.tensor, t.data, expert_parallel=ep) / modelmod.GIB
            for ep in (False, True)
        )
        changes.append(f"{role} TP {t.tensor} x DP {t.data}: {before:.1f} -> {after:.1f} GiB")
    return (
        f"hint: {model.path.parent.name} is a mixture-of-experts model ({experts} routed experts): "
        "--enable-expert-parallel places whole experts on the TP x DP devices of a role instead of splitting "
        f"each over TP, which leaves more room for the KV cache where DP > 1 (weights per device: "
        f"{'; '.join(changes)}); vLLM's guide: docs.vllm.ai, serving/expert_parallel_deployment"
    )


def set_dotted(values: dict[str, Any], key: str, value: Any) -> None:
    """Set a.b.c (REMOVE deletes it), creating maps on the way; flag names keep their dashes.
    Maps left empty by a removal are removed too."""
    parts = key.split(".")
    trail = [values]
    for part in parts[:-1]:
        if value is REMOVE and part not in trail[-1]:
            return
        trail.append(trail[-1].setdefault(part, {}))
    if value is REMOVE:
        trail[-1].pop(parts[-1], None)
        for parent, part in zip(reversed(trail[:-1]), reversed(parts[:-1]), strict=True):
            if parent[part] == {}:
                del parent[part]
    else:
        trail[-1][parts[-1]] = value


def generate(
    model: modelmod.Model,
    *,
    accelerator: str,
    roles: dict[str, RoleTopology],
    served_name: str,
    model_path: str,
    max_model_len: int | None,
    image: str | None,
    engine_version: str | None = None,
    expert_parallel: bool = False,
    force: bool = False,
    hbm_gib: float | None = None,
    fixed_head_dim: bool = False,
    context_len: int | None = None,
    interface: str = "auto",
    chart: Path | None = None,
) -> Result:
    """A values overlay for the chart: topology and model keys, checked against the model.
    context_len: the expected tokens of a sequence (default: default_context_len); interface:
    network.interface (auto: the default route's, found when the container starts)."""
    profile = ACCELERATORS[accelerator]
    if engine_version:
        # The connector's TP rule is the engine version's (NIXL: decodeMultiple at 0.13,
        # divisible from 0.18).
        try:
            row = profiles.profile(accelerator, version=engine_version).connector()
        except profiles.ProfileError as e:
            raise GenerateError(f"--engine-version {engine_version}: {e}") from None
        profile = dataclasses.replace(profile, tensor_rule=str(row["tensorRule"]))
    problem = model.unknown_problem()
    if problem:
        raise GenerateError(problem)
    # The architecture at the engine version first: where it does not run, that is the refusal
    # (gpt-oss at vLLM-Ascend v0.13.0, not its MXFP4 checkpoint).
    version_values: dict[str, Any] = {"accelerator": {"type": accelerator}, "engine": {"version": engine_version}}
    if image is not None:
        version_values["image"] = _image(image)
        # Issue #40 item 2: generate wrote an A2 image for A3, which render then refused.
        problem = image_problem(accelerator, version_values["image"]["repository"], version_values["image"]["tag"])
        if problem:
            raise GenerateError(problem)
    check_support(model, merged(chart_defaults(chart), version_values))
    check_quantization(model, profile)
    check_topology(model, profile, roles)
    check_interface(interface, chart)
    defaults = chart_defaults(chart)
    length = max_model_len or min(defaults["model"]["maxModelLen"], model.max_position_embeddings or 10**9)
    values: dict[str, Any] = {"accelerator": {"type": accelerator}}
    if image is not None:
        values["image"] = _image(image)
    if engine_version:
        try:
            profiles.profile(accelerator, version=engine_version)
        except profiles.ProfileError as e:
            raise GenerateError(f"--engine-version {engine_version}: {e}") from None
        values["engine"] = {"version": engine_version}
    values["network"] = {"interface": interface}
    values["model"] = {"path": model_path, "servedName": served_name, "maxModelLen": length}
    if expert_parallel:
        values.setdefault("engine", {})["args"] = {"enable-expert-parallel": True}
    for role, t in roles.items():
        values[role] = {
            "replicas": t.replicas,
            "workerReplicas": t.nodes - 1,
            # The guide passes --data-parallel-size-local to prefill only; a single-node decode
            # leaves it to vLLM (null), a multi-node role always sets it.
            "parallelism": {
                "tensor": t.tensor,
                "data": t.data,
                "dataLocal": t.data_local if (role == "prefill" or t.nodes > 1) else None,
            },
        }
        if not profile.additional_config:
            values[role]["args"] = {flag: None for flag in ASCEND_ONLY_ARGS}
    keys, result = derived(
        model,
        merged(defaults, values),
        force=force,
        hbm_gib=hbm_gib,
        fixed_head_dim=fixed_head_dim,
        context_len=context_len or default_context_len(length),
    )
    for key, value in keys.items():
        set_dotted(values, key, value)
    result.values = values
    if model.is_moe and not expert_parallel:
        result.hints.insert(0, expert_parallel_hint(model, roles))
    return result


def check_interface(interface: str, chart: Path | None = None) -> None:
    """Raise GenerateError unless the chart's schema accepts `interface` as network.interface."""
    schema = docs.load_schema(paths.chart_dir(chart))
    rule = schema["properties"]["network"]["properties"]["interface"]
    patterns = [rule["pattern"], *(p["pattern"] for p in rule.get("allOf", []) if "pattern" in p)]
    if not interface or not all(re.search(p, interface) for p in patterns):
        raise GenerateError(
            f"--interface {interface!r}: not a Linux interface name (at most 15 characters, no whitespace, '/' or "
            "':'); give the node's NIC as `ip route | grep default` shows it, or auto"
        )


def device_memory(accelerator: str, gpu: str | None, device_memory_gib: float | None) -> float | None:
    """Device memory for the estimate: device_memory_gib, else the `gpu` variant's where the
    accelerator has variants (NVIDIA), else None (the profile's deviceMemoryGiB)."""
    if device_memory_gib:
        return device_memory_gib
    variants = ACCELERATORS[accelerator].variants if accelerator in ACCELERATORS else {}
    if not variants or gpu is None:
        return None
    if gpu not in variants:
        raise GenerateError(f"--gpu {gpu}: not a device of {accelerator}; use one of {', '.join(sorted(variants))}")
    return variants[gpu]


def image_problem(accelerator: str, repository: str, tag: str) -> str | None:
    """Why --image is another accelerator's image, as the chart's validate.accelerator decides it
    (chart/templates/validate/_accelerator.tpl, profiles.yaml accelerators.*.imageTag): in the
    family's own repositories a tag belongs to the accelerator whose suffix it carries, else to
    the one without a suffix (quay.io/ascend/vllm-ascend:v0.23.0 is A2's); in another repository
    only a tag carrying another accelerator's suffix is. None where it is this accelerator's."""
    table = profiles.load()
    accelerators = table["accelerators"]
    row = accelerators[accelerator]
    if not tag or not row.get("imageTag"):
        return None
    family = row["family"]
    vendor = {
        image["repository"]
        for engine in table["engines"].values()
        for name, image in (engine.get("images") or {}).items()
        if (accelerators.get(name) or {}).get("family") == family
    }
    owner, plain, suffixes = "", "", []
    for name in sorted(accelerators):
        other = accelerators[name]
        if other.get("family") != family or not other.get("imageTag"):
            continue
        suffix = str(other["imageTag"].get("suffix") or "")
        if not suffix:
            plain = name
            continue
        suffixes.append(suffix)
        if f"{suffix}-" in f"-{tag}-":
            owner = name
    if not repository or repository in vendor:
        owner = owner or plain
    if not owner or owner == accelerator:
        return None
    suffix = str(row["imageTag"].get("suffix") or "")
    hint = f"a tag ending in {suffix}" if suffix else f"a tag without {' or '.join(suffixes)}"
    return (
        f"--image {repository}:{tag}: the {accelerators[owner]['imageTag']['name']}, but --accelerator is "
        f"{accelerator}; use {hint}, or leave --image out for the profile's image"
    )


def _image(image: str) -> dict[str, str]:
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        raise GenerateError(f"--image {image!r}: give repository:tag")
    return {"repository": repository, "tag": tag}


def fit_table(fits: list[modelmod.RoleFit]) -> str:
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
