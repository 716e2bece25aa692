"""Run in an engine image's Python (tests/test_conformance.py): the rendered --kv-transfer-config
of each role through that version's own code, as vLLM and vLLM-Ascend check it at start.

- vLLM's KVTransferConfig built from it (pydantic: from vLLM 0.18 an unknown key is refused);
- the connector found in vLLM's registry once vLLM-Ascend has registered its connectors, and a
  kv_connector_module_path, where written, a module of that vLLM-Ascend;
- vLLM-Ascend's check_kv_extra_config (utils.py), executed from the installed source (it cannot
  be imported: vllm_ascend.utils imports torch_npu, which needs the Ascend driver), against the
  role's tensor and data parallel sizes.

argv[1]: JSON [{"role", "config", "tensor", "data"}]. Prints one JSON line per role:
{"role", "problem"} ("" where every check passed).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def pin_cpu_platform() -> None:
    """No accelerator here: vLLM would otherwise resolve vLLM-Ascend's platform plugin, and
    transformers (which vllm.config imports) loads torch_npu wherever it is installed; torch_npu
    needs CANN and the driver. Hidden, both take the no-NPU path; the checks below read configs only."""
    sys.modules["torch_npu"] = None  # type: ignore[assignment]
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()


def ascend_function(name: str, relative: str, namespace: dict[str, Any] | None = None) -> Any:
    """A function of the installed vllm_ascend (`relative` under its folder), compiled from its
    source alone into `namespace` (the names it needs from its module)."""
    spec = importlib.util.find_spec("vllm_ascend")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vllm_ascend is not installed in this Python")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope: dict[str, Any] = dict(namespace or {})
    exec(compile(ast.Module([node], type_ignores=[]), str(path), "exec"), scope)
    return scope[name]


def register_ascend_connectors() -> None:
    """vLLM-Ascend's own register_connector (vllm_ascend/distributed/kv_transfer/__init__.py from
    v0.18.0, vllm_ascend/distributed/__init__.py at v0.13.0), run from its source: importing those
    packages imports torch_npu. The registry keeps module paths, so nothing more is imported."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    for relative in ("distributed/kv_transfer/__init__.py", "distributed/__init__.py"):
        try:
            register = ascend_function("register_connector", relative, {"KVConnectorFactory": KVConnectorFactory})
        except (FileNotFoundError, StopIteration):
            continue
        register()
        return
    raise RuntimeError("no register_connector in vllm_ascend.distributed")


def check(role: str, config: dict[str, Any], tensor: int, data: int) -> str:
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    try:
        kv = KVTransferConfig(**config)
    except Exception as e:  # pydantic's ValidationError, or a dataclass TypeError
        return f"KVTransferConfig refuses it: {str(e).splitlines()[0]} {e}"[:600]
    if config["kv_connector"] not in KVConnectorFactory._registry:
        return f"{config['kv_connector']} is not in vLLM's connector registry"
    module = config.get("kv_connector_module_path")
    if module and importlib.util.find_spec(module) is None:
        return f"kv_connector_module_path {module} is not a module here (ModuleNotFoundError at start)"
    parallel = SimpleNamespace(tensor_parallel_size=tensor, data_parallel_size=data)
    try:
        check_sizes = ascend_function("check_kv_extra_config", "utils.py")
        check_sizes(SimpleNamespace(kv_transfer_config=kv, parallel_config=parallel))
    except ValueError as e:
        return f"check_kv_extra_config: {e}"
    return ""


def main() -> int:
    pin_cpu_platform()
    register_ascend_connectors()
    for row in json.loads(sys.argv[1]):
        problem = check(row["role"], row["config"], int(row["tensor"]), int(row["data"]))
        print(json.dumps({"role": row["role"], "problem": problem}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
