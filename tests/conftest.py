"""Shared fixtures: one render per (helm version, values set) for the whole session."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import engines, helm, manifests, paths, validate
from support import nodes, teardown

# SIGTERM tears the run down like Ctrl-C: the fixtures stop what they started (support/teardown.py).
teardown.install()

# The suite starts helm over a thousand times, each a process that lives ~0.2 s: collecting its
# garbage less often (Go's default is 100) takes ~15% off its CPU time and changes no output.
os.environ.setdefault("GOGC", "400")


@dataclass(frozen=True)
class Rendered:
    text: str
    objects: list[dict[str, Any]]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        return manifests.one(self.objects, kind, name)

    def find(self, kind: str) -> list[dict[str, Any]]:
        return manifests.find(self.objects, kind)

    @property
    def modelserving(self) -> dict[str, Any]:
        return self.one("ModelServing")

    def role(self, name: str) -> dict[str, Any]:
        return manifests.role(self.modelserving, name)

    def container(self, role: str) -> dict[str, Any]:
        return self.role(role)["entryTemplate"]["spec"]["containers"][0]


class Renderer:
    """Renders the chart through a pinned helm, caching each (values files, overrides) result
    so every test shares one render per values set and helm version."""

    def __init__(self, version: str):
        self.version = version
        self.binary = paths.helm_binary(version)
        self._cache: dict[str, Rendered | helm.HelmError] = {}

    def _key(self, values_files: tuple[Path, ...], overrides: dict[str, Any] | None) -> str:
        return json.dumps([[str(p) for p in values_files], overrides or {}], sort_keys=True)

    def _get(self, values_files: tuple[Path, ...], overrides: dict[str, Any] | None):
        key = self._key(values_files, overrides)
        if key not in self._cache:
            try:
                text = helm.template(self.binary, values_files, overrides)
                self._cache[key] = Rendered(text, manifests.parse(text))
            except helm.HelmError as e:
                self._cache[key] = e
        return self._cache[key]

    def __call__(self, values_files: tuple[Path, ...] = (), overrides: dict[str, Any] | None = None) -> Rendered:
        result = self._get(tuple(values_files), overrides)
        if isinstance(result, helm.HelmError):
            raise result
        return result

    def error(self, values_files: tuple[Path, ...] = (), overrides: dict[str, Any] | None = None) -> str:
        """helm's error message for values that must fail; fails the test if they render."""
        result = self._get(tuple(values_files), overrides)
        if not isinstance(result, helm.HelmError):
            pytest.fail(f"helm {self.version} rendered values that should fail: {overrides or values_files}")
        return str(result)


_renderers: dict[str, Renderer] = {}


@pytest.fixture(scope="session", params=paths.HELM_VERSIONS, ids=lambda v: f"helm{v.split('.')[0]}")
def render(request) -> Renderer:
    version = request.param
    if not paths.helm_binary(version).exists():
        pytest.fail(f"helm {version} missing: run `make tools`")
    return _renderers.setdefault(version, Renderer(version))


@pytest.fixture(scope="session")
def defaults(render: Renderer) -> Rendered:
    return render()


@pytest.fixture(scope="session")
def crds() -> Path:
    folder = paths.crds_dir()
    assert folder.is_dir(), f"Kthena CRDs not found at {folder}: KTHENA_CRDS_DIR names no folder"
    return folder


@pytest.fixture(scope="session")
def entry_runs(defaults: Rendered) -> dict[str, engines.EngineRun]:
    return {run.role: run for run in engines.entry_runs(defaults.objects, nodes.for_objects(defaults.objects))}


def assert_valid(rendered: Rendered, crds: Path | None = None) -> None:
    """Valid against the CRDs of the Kthena the render names (or `crds`), and Kubernetes'."""
    errors = validate.validate(rendered.objects, crds)
    assert errors == [], "\n".join(errors)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """The local cluster (tests/support/kube), one per session: built or reused, brought up in a
    temp folder, stopped by PID at the end, also when a test fails. Only the `cluster` tests
    use it; `make test` runs them in one process of their own."""
    from support.kube import build
    from support.kube.cluster import Cluster

    try:
        build.build_all(log=lambda _: None)
    except build.BuildError as e:
        pytest.fail(f"cluster: {e}")
    instance = Cluster(tmp_path_factory.mktemp("cluster"))
    instance.up()
    try:
        yield instance
    finally:
        instance.down()


@pytest.fixture(scope="session")
def references():
    """The e2e's tiny models and plain reference engines (tests/support/reference.py): each made
    or started once per session where the e2e modules share a model and flags, and stopped by PID
    at the end, also when a test fails."""
    from support.reference import References

    instance = References()
    try:
        yield instance
    finally:
        instance.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The conformance module first: it runs real programs for over a minute in one process
    (`make test` keeps each module on one worker), so it should not be the last to start."""
    items.sort(key=lambda item: item.get_closest_marker("conformance") is None)
