"""Where things live in the repository; KTHENA_CRDS_DIR overrides the CRD folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
VALUES_DIR = REPO / "values"
GOLDEN_DIR = REPO / "tests" / "golden"
TOOLS_DIR = REPO / ".tools"
HELM_VERSIONS = ("3.17.2", "4.1.4")
DEFAULT_HELM_VERSION = "4.1.4"
# The release name the golden files and `make render` use: the guide's ModelServing name.
RELEASE = "deepseek-pd"
NAMESPACE = "default"


def crds_dir() -> Path:
    """The Kthena CRD folder: $KTHENA_CRDS_DIR, else ../shared/kthena-crds beside the repo."""
    return Path(os.environ.get("KTHENA_CRDS_DIR", REPO.parent / "shared" / "kthena-crds"))


def helm_binary(version: str = DEFAULT_HELM_VERSION) -> Path:
    """The pinned helm binary that scripts/install-helm.sh puts in .tools/helm/<version>/."""
    return TOOLS_DIR / "helm" / version / "helm"


def checkov_binary() -> Path:
    """checkov in its own venv (`make tools`): its pins clash with the test venv's."""
    return TOOLS_DIR / "checkov" / "bin" / "checkov"
