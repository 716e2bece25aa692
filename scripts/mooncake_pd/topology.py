"""The topology the user asks for, checked: each role's parallelism, the connector's tensor-
parallel rule, the accelerator profiles, the quantization their engine loads, the network
interface and the image."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mooncake_pd import chartfiles, docs, engine_quantization, paths, profiles
from mooncake_pd import model as modelmod
from mooncake_pd.errors import MooncakePdError

ROLES = ("prefill", "decode")


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
    problem = engine_quantization.quantization_problem(model, accelerator.family)
    if problem:
        fix = engine_quantization.ENGINE_QUANTIZATION[accelerator.family].fix
        others = sorted(
            a for a, p in ACCELERATORS.items() if not engine_quantization.quantization_problem(model, p.family)
        )
        elsewhere = f", or --accelerator {' or '.join(others)}" if others else ""
        raise GenerateError(f"--model-dir {model.path.parent} on {accelerator.type}: {problem}; {fix}{elsewhere}")


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
