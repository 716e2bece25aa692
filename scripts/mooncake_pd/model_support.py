"""Whether an engine version runs a model's architecture on an accelerator family with a KV
connector (architectures.yaml), and the refusal naming the versions that do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mooncake_pd import architectures, engine_quantization, kv_cache, profiles
from mooncake_pd import model as modelmod
from mooncake_pd.topology import (
    ACCELERATORS,
    GenerateError,
)


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
    if model.unknown_problem() is None and "chunked" in kv_cache.layer_kinds(model):
        return False
    return architectures.hybrid_kv_cache(version, connector, args)


def verdict(model: modelmod.Model, family: str, version: str, connector: str, args: dict[str, Any]) -> Verdict:
    """Whether `version` runs the model on `family` with `connector` (architectures.yaml)."""
    engine = (
        engine_quantization.ENGINE_QUANTIZATION[family].engine
        if family in engine_quantization.ENGINE_QUANTIZATION
        else "the engine"
    )
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
    kinds = set(kv_cache.layer_kinds(model))
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
