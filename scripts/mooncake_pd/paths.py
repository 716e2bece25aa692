"""Where things live in the repository and in the package; KTHENA_CRDS_DIR overrides the
Kthena CRD folder."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parents[1]
# Reference data vendored into the package (each folder's SOURCE.md gives its provenance), so a
# clone or a `pip install` has it without anything beside the repository.
KTHENA_CRDS = PACKAGE / "crds" / "kthena"
PROMETHEUS_CRDS = PACKAGE / "crds" / "prometheus-operator"
CHART = REPO / "chart"
# vLLM 0.13.0's option lists: the chart checks args against them when it renders, the tooling
# for did-you-mean and the tests (chart/files/vllm/SOURCE.md).
VLLM_DATA = CHART / "files" / "vllm"
VALUES_DIR = REPO / "values"
GOLDEN_DIR = REPO / "tests" / "golden"
TOOLS_DIR = REPO / ".tools"
HELM_VERSIONS = ("3.17.2", "4.1.4")
DEFAULT_HELM_VERSION = "4.1.4"
# The release name the golden files and `make render` use: the guide's ModelServing name.
RELEASE = "deepseek-pd"
NAMESPACE = "default"


def crds_dir() -> Path:
    """The Kthena CRD folder: $KTHENA_CRDS_DIR, else the CRDs vendored in the package."""
    return Path(os.environ.get("KTHENA_CRDS_DIR") or KTHENA_CRDS)


def helm_binary(version: str = DEFAULT_HELM_VERSION) -> Path:
    """The pinned helm binary that scripts/install-helm.sh puts in .tools/helm/<version>/."""
    return TOOLS_DIR / "helm" / version / "helm"


def checkov_binary() -> Path:
    """checkov in its own venv (`make tools`): its pins clash with the test venv's."""
    return TOOLS_DIR / "checkov" / "bin" / "checkov"
