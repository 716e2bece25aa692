"""Values from a model's config.json: the topology the user asks for, checked, plus the keys
derived from the model (MLA, quantization, max-num-seqs that fit; head_dim only on request, since
the engines' preflight derives it from the mounted model at start)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mooncake_pd import model as modelmod
from mooncake_pd import profiles
from mooncake_pd.model_support import check_support
from mooncake_pd.sizing import Result, default_context_len, derived, expert_parallel_hint
from mooncake_pd.topology import (
    ACCELERATORS,
    ASCEND_ONLY_ARGS,
    GenerateError,
    RoleTopology,
    _image,
    check_interface,
    check_quantization,
    check_topology,
    image_problem,
)
from mooncake_pd.values_file import REMOVE, chart_defaults, merged


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
