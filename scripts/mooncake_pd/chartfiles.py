"""The programs pods run (chart/files/*.py) as modules of the tool: a rule the tool shares with
them is then one piece of code (generate checks tensor parallel with the preflight's own rule)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from types import ModuleType

from mooncake_pd import paths
from mooncake_pd.errors import MooncakePdError


class ChartFileError(MooncakePdError):
    """A program of chart/files cannot be loaded."""


@cache
def program(name: str) -> ModuleType:
    """chart/files/<name>.py, loaded once per process."""
    path = paths.CHART / "files" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mooncake_pd_chart_{name}", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ChartFileError(f"{path}: cannot load the chart's {name} program")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import does: dataclasses look their module up there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
