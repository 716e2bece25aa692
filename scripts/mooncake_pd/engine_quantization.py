"""What the engine of each accelerator family loads from config.json's quantization_config, and why
it refuses a model's (vLLM's platform supported_quantization, per family)."""

from __future__ import annotations

from dataclasses import dataclass

from mooncake_pd.model import Model


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
