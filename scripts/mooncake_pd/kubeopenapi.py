"""Kubernetes' own OpenAPI definitions, the source of the values schema's pass-through types.

The definitions come from kubernetes' api/openapi-spec/swagger.json at tag VERSION (the
k8s.io/kubernetes Go module of that version holds the tag's tree). The repository vendors an
extract of it, EXTRACT: the definitions the chart's pass-through fields name (schemagen.K8S_FIELDS)
and every definition they refer to, unchanged, so a clone regenerates the schema without the
3.8 MB file or a network. openapi/SOURCE.md gives the provenance; `mooncake-pd schema --openapi`
writes the extract again from the Go module (downloaded through the Go module proxy when the
module cache lacks it).

VERSION is the newest Kubernetes the chart supports and the one whose kube-apiserver the local
test cluster runs (cluster/components.yaml; a test keeps the two equal).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from mooncake_pd import paths
from mooncake_pd.errors import MooncakePdError

VERSION = "v1.34.2"
MODULE = "k8s.io/kubernetes"
UPSTREAM_FILE = "api/openapi-spec/swagger.json"
FOLDER = paths.PACKAGE / "openapi"
EXTRACT = FOLDER / f"kubernetes-{VERSION}.json"
DEFINITIONS = "definitions"


def minor_release(version: str = VERSION) -> str:
    """The x.y.0 release of a version (v1.34.2 -> 1.34.0): the schemas kubernetes-validate ships."""
    major, minor, _ = version.removeprefix("v").split(".")
    return f"{major}.{minor}.0"


class OpenApiError(MooncakePdError):
    """Kubernetes' OpenAPI could not be read or fetched."""


def refs(node: Any) -> set[str]:
    """The names of the definitions a node refers to ($ref's last segment)."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for value in node.values():
            found |= refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= refs(value)
    return found


def closure(definitions: dict[str, Any], roots: Iterable[str]) -> dict[str, Any]:
    """The root definitions and every one they refer to, unchanged, sorted by name."""
    wanted: dict[str, Any] = {}
    todo = sorted(roots)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in definitions:
            raise OpenApiError(f"{name}: not a definition of Kubernetes {VERSION}'s OpenAPI; fix the name")
        wanted[name] = definitions[name]
        todo += sorted(refs(definitions[name]) - set(wanted))
    return dict(sorted(wanted.items()))


def extract(swagger_text: str, roots: Iterable[str]) -> dict[str, Any]:
    """The vendored file's content: where it comes from and the definitions the roots need."""
    swagger = json.loads(swagger_text)
    return {
        "source": {
            "repository": "https://github.com/kubernetes/kubernetes",
            "tag": VERSION,
            "file": UPSTREAM_FILE,
            "sha256": hashlib.sha256(swagger_text.encode()).hexdigest(),
        },
        DEFINITIONS: closure(swagger[DEFINITIONS], roots),
    }


def dump(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@cache
def vendored() -> dict[str, Any]:
    """The vendored extract's definitions (name -> Swagger 2.0 schema)."""
    definitions: dict[str, Any] = json.loads(EXTRACT.read_text())[DEFINITIONS]
    return definitions


def module_cache_file() -> Path | None:
    """swagger.json in the Go module cache, if the module of VERSION is there (no network)."""
    go = shutil.which("go")
    if not go:
        return None
    found = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    path = Path(found) / f"{MODULE}@{VERSION}" / UPSTREAM_FILE
    return path if found and path.is_file() else None


def download() -> Path:
    """swagger.json of k8s.io/kubernetes@VERSION: from the Go module cache, else downloaded by
    `go mod download` (the Go module proxy; the module's checksum is checked against sum.golang.org)."""
    cached = module_cache_file()
    if cached:
        return cached
    go = shutil.which("go")
    if not go:
        raise OpenApiError(f"go not found: it downloads {MODULE}@{VERSION}; fix: install Go (make tools)")
    # Outside any module (a temporary folder), so the repository's go.mod files play no part.
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        proc = subprocess.run(
            [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
    try:
        found = json.loads(proc.stdout)
        folder = Path(found["Dir"])
        if proc.returncode or found.get("Error"):
            raise ValueError(found.get("Error"))
    except (ValueError, KeyError):
        raise OpenApiError(
            f"go mod download {MODULE}@{VERSION} failed: {(proc.stdout + proc.stderr).strip()[-800:]}; "
            "fix: check GOPROXY and the network"
        ) from None
    return folder / UPSTREAM_FILE
