"""The Argo CD examples (examples/argocd/) point at values files that render and validate, sync
with server-side apply, and run no helm-test pod."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import Renderer, assert_valid
from mooncake_pd import paths

ARGO = sorted((paths.REPO / "examples" / "argocd").glob("application*.yaml"))


def argo_value_files(app: dict) -> list[Path]:
    """The values files an Application uses, as paths in this repository."""
    sources = app["spec"].get("sources") or [app["spec"]["source"]]
    chart = next(s for s in sources if "path" in s)
    files = []
    for entry in chart["helm"].get("valueFiles", []):
        if entry.startswith("$values/"):
            files.append(paths.REPO / entry.removeprefix("$values/"))
        else:
            files.append((paths.REPO / chart["path"] / entry).resolve())
    return files


@pytest.mark.parametrize("path", ARGO, ids=[p.stem for p in ARGO])
def test_argocd_examples_point_at_files_that_render(render: Renderer, crds, path: Path):
    app = yaml.safe_load(path.read_text())
    assert app["kind"] == "Application"
    sources = app["spec"].get("sources") or [app["spec"]["source"]]
    chart = next(s for s in sources if "path" in s)
    assert (paths.REPO / chart["path"] / "Chart.yaml").exists()
    if any("ref" in s for s in sources):
        assert any(v.startswith("$values/") for v in chart["helm"]["valueFiles"])
    files = argo_value_files(app)
    assert files and all(f.is_file() for f in files), files
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
    overrides = chart["helm"].get("valuesObject")
    rendered = render(tuple(files), overrides)
    assert_valid(rendered, crds)
    assert rendered.find("Pod") == [], "Argo CD does not run helm test hooks: the test pod is off"
