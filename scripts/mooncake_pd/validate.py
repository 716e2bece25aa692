"""Validate rendered objects: core kinds against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict), Kthena and Prometheus Operator kinds against their real CRDs
(vendored in the package) including the CRDs' CEL rules (mooncake_pd.cel), and the pod
templates inside a ModelServing as Pods."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

from mooncake_pd import cel, kubeopenapi, manifests, paths
from mooncake_pd.manifests import Manifest, ident

# Rendered objects are checked against the Kubernetes whose OpenAPI types the values schema's
# pass-through fields (kubeopenapi.VERSION's minor release: kubernetes-validate ships x.y.0
# schemas), so a field valid there renders, and the newest schemas kubernetes-validate ships.
# The chart's own objects are also held to its kubeVersion floor (Chart.yaml; in
# tests/test_schema_types_from_kubernetes.py): a field a user passes through beyond it is that
# cluster's API server's to judge.
KUBERNETES_VERSIONS = (kubeopenapi.minor_release(), kubernetes_validate.utils.latest_version())
KTHENA_GROUPS = ("workload.serving.volcano.sh", "networking.serving.volcano.sh")
PROMETHEUS_GROUPS = ("monitoring.coreos.com",)

# kubernetes-validate opens and parses its schema files, the shared definitions (~1 MB of JSON)
# among them, on every call: half the time of validating an object. They never change.
if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = cache(kubernetes_validate.utils.schema_contents)


class CrdsMissing(paths.Missing):
    """The Kthena CRD folder is absent."""


def _strict(schema: Any) -> Any:
    """A copy of a CRD schema that rejects unknown fields, as `kubectl apply --validate=strict`
    does (the API server would silently prune them)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def _crd_versions(folder: Path) -> tuple[tuple[str, str, dict[str, Any], dict[str, Any]], ...]:
    """(apiVersion, kind, CRD, version entry) of every CRD version in the folder, each file read
    once a process (the ModelServing CRD is large; the schemas and the CEL rules both need it)."""
    found = []
    for path in sorted(folder.glob("*.yaml")):
        crd = manifests.load(path.read_text())
        if crd and crd.get("kind") == "CustomResourceDefinition":
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            found += [(f"{group}/{version['name']}", kind, crd, version) for version in crd["spec"]["versions"]]
    return tuple(found)


@cache
def crd_schemas(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict openAPIV3Schema of every CRD in the folder."""
    if not folder.is_dir():
        raise CrdsMissing(f"CRDs not found at {folder} (KTHENA_CRDS_DIR must name a folder of CRD files)")
    return {
        (api_version, kind): _strict(version["schema"]["openAPIV3Schema"])
        for api_version, kind, _, version in _crd_versions(folder)
    }


@cache
def crd_documents(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the whole CRD, for its CEL rules."""
    return {(api_version, kind): crd for api_version, kind, crd, _ in _crd_versions(folder)}


def validate_cel(obj: Manifest, folder: Path | None = None) -> list[str]:
    """The CRD's CEL rules (x-kubernetes-validations) that the object breaks, as the API server
    would evaluate them on a create; a rule the evaluator cannot run is reported, not passed."""
    return list(_validate_cel(json.dumps(obj, sort_keys=True), folder or paths.crds_dir()))


@cache
def _validate_cel(canonical: str, folder: Path) -> tuple[str, ...]:
    obj = json.loads(canonical)
    crd = crd_documents(folder).get((obj["apiVersion"], obj["kind"]))
    if crd is None:
        return (f"{ident(obj)}: no CRD for {obj['apiVersion']} {obj['kind']}",)
    try:
        return tuple(f"{ident(obj)} (CEL): {e}" for e in cel.errors(crd, obj))
    except cel.CelError as e:
        return (f"{ident(obj)} (CEL): not evaluated: {e}",)


def crd_schema(api_version: str, kind: str, folder: Path | None = None) -> dict[str, Any]:
    schemas = crd_schemas(folder or paths.crds_dir())
    try:
        return schemas[(api_version, kind)]
    except KeyError:
        raise LookupError(f"no CRD for {api_version} {kind}") from None


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(root)"


def validate_crd_object(obj: Manifest, folder: Path | None = None) -> list[str]:
    schema = crd_schema(obj["apiVersion"], obj["kind"], folder)
    validator = jsonschema.Draft7Validator(schema)
    return [f"{ident(obj)}: {_path(e)}: {e.message}" for e in validator.iter_errors(obj)]


def validate_core_object(obj: Manifest, versions: Iterable[str] = KUBERNETES_VERSIONS) -> list[str]:
    return list(_validate_core(json.dumps(obj, sort_keys=True), tuple(versions)))


@cache
def _validate_core(canonical: str, versions: tuple[str, ...]) -> tuple[str, ...]:
    """Validation of one object (as canonical JSON), remembered: renders repeat many objects."""
    obj = json.loads(canonical)
    errors = []
    for version in versions:
        try:
            kubernetes_validate.validate(copy.deepcopy(obj), version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{ident(obj)} (Kubernetes {version}): {_path(e)}: {e.message}")
    return tuple(errors)


def pod_templates(modelserving: Manifest) -> list[tuple[str, Manifest]]:
    """(label, Pod) for every entry and worker template of a ModelServing."""
    pods = []
    for role in modelserving["spec"]["template"]["roles"]:
        for key in ("entryTemplate", "workerTemplate"):
            template = role.get(key)
            if template:
                metadata = {"name": f"{role['name']}-{key}", **template.get("metadata", {})}
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
                pods.append((f"{ident(modelserving)} role {role['name']} {key}", pod))
    return pods


KTHENA_VERSION_ANNOTATION = "mooncake-pd/kthena-version"


def kthena_version(objects: Iterable[Manifest]) -> str | None:
    """The Kthena version a render is written for: its ModelServing's annotation (None without)."""
    for obj in objects:
        if obj.get("kind") == "ModelServing":
            version = (obj.get("metadata", {}).get("annotations") or {}).get(KTHENA_VERSION_ANNOTATION)
            return str(version) if version else None
    return None


def validate(objects: Iterable[Manifest], crds: Path | None = None) -> list[str]:
    """Every problem found in the objects, as human-readable lines; empty when all are valid.
    `crds`: the Kthena CRD folder; by default that of the Kthena the ModelServing names
    (kthena_version), $KTHENA_CRDS_DIR when set."""
    objects = list(objects)
    crds = crds or paths.crds_dir(kthena_version(objects))
    errors: list[str] = []
    for obj in objects:
        group = obj.get("apiVersion", "").split("/")[0]
        if group in PROMETHEUS_GROUPS:
            errors += validate_crd_object(obj, paths.PROMETHEUS_CRDS)
        elif group in KTHENA_GROUPS:
            errors += validate_crd_object(obj, crds)
            errors += validate_cel(obj, crds)
            if obj["kind"] == "ModelServing":
                for label, pod in pod_templates(obj):
                    errors += [f"{label}: {e}" for e in validate_core_object(pod)]
        else:
            errors += validate_core_object(obj)
    return errors


def missing_crd_defaults(obj: Manifest, folder: Path | None = None) -> list[str]:
    """Fields the CRD would default that the object leaves out: each is a diff that Argo CD
    shows after the API server fills it in. Empty when every defaulted field is explicit."""
    schema = crd_schema(obj["apiVersion"], obj["kind"], folder)
    found: list[str] = []

    def walk(node: Any, sch: dict[str, Any], path: str) -> None:
        if isinstance(node, dict):
            for key, sub in sch.get("properties", {}).items():
                if key in node:
                    walk(node[key], sub, f"{path}.{key}")
                elif "default" in sub:
                    found.append(f"{path}.{key} (default {sub['default']!r})")
        elif isinstance(node, list) and "items" in sch:
            for i, item in enumerate(node):
                walk(item, sch["items"], f"{path}[{i}]")

    walk(obj, schema, ident(obj))
    return found
