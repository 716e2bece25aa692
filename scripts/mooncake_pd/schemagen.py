"""The machine-derived parts of chart/values.schema.json, written by `mooncake-pd schema`.

values.schema.json is edited by hand for its keys, types and descriptions. This module adds
what must not be written by hand, and a test fails when the file differs from its output:
- each pass-through Kubernetes field (resources, probes, security contexts, tolerations,
  affinity, NetworkPolicy peers, ...) is typed with the definition of the chart's kubeVersion
  floor (1.27), taken from the OpenAPI schemas kubernetes-validate ships, unknown fields refused;
  Kthena's own fields (networkTopology, parentRefs) from the vendored CRDs;
- what OpenAPI leaves out: the quantity grammar, int32/int64 bounds, toleration operators and
  effects, label keys and values;
- every key required unless listed in NULLABLE (null there means "off" or "the default"), so a
  section set to null is refused naming it instead of crashing a template;
- no control characters in any string (they break the YAML and the start scripts).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from mooncake_pd import paths

KUBERNETES_FLOOR = "1.27.0"
DEFS = "$defs"
PREFIX = "io.k8s."

# values path (dots; [] for list items) -> Kubernetes definition (or a local one below).
K8S_FIELDS = {
    "imagePullSecrets[]": "io.k8s.api.core.v1.LocalObjectReference",
    "model.download.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "engine.startupProbe": "mooncake-pd.ProbeTimings",
    "engine.livenessProbe": "mooncake-pd.ProbeTimings",
    "engine.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "engine.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "networkTopology": "kthena.NetworkTopology",
    "networkPolicy.extraIngress[]": "io.k8s.api.networking.v1.NetworkPolicyPeer",
    "networkPolicy.proxyFrom[]": "io.k8s.api.networking.v1.NetworkPolicyPeer",
    "router.kthena.parentRefs[]": "kthena.ParentReference",
    "proxy.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "proxy.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "proxy.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "proxy.tolerations[]": "io.k8s.api.core.v1.Toleration",
    "proxy.affinity": "io.k8s.api.core.v1.Affinity",
    "test.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "test.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "test.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "benchmark.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "benchmark.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "benchmark.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "benchmark.tolerations[]": "io.k8s.api.core.v1.Toleration",
    **{
        f"{role}.{key}": definition
        for role in ("prefill", "decode")
        for key, definition in (
            ("resources", "io.k8s.api.core.v1.ResourceRequirements"),
            ("readinessProbe", "mooncake-pd.ProbeTimings"),
            ("tolerations[]", "io.k8s.api.core.v1.Toleration"),
            ("affinity", "io.k8s.api.core.v1.Affinity"),
        )
    },
}
# Maps of Kubernetes labels (keys and values checked).
LABEL_MAPS = (
    "prefill.nodeSelector",
    "decode.nodeSelector",
    "proxy.nodeSelector",
    "benchmark.nodeSelector",
    "metrics.podMonitor.labels",
    "metrics.dashboard.labels",
)
# Keys whose null is documented: "off", or "leave it to vLLM / the default".
NULLABLE = {
    "fullnameOverride",
    "engine.startupProbe",
    "engine.livenessProbe",
    "prefill.readinessProbe",
    "decode.readinessProbe",
    "prefill.parallelism.dataLocal",
    "decode.parallelism.dataLocal",
    "proxy.maxRetries",
    "proxy.retryDelay",
    "benchmark.workload.maxConcurrency",
    "model.hfOverrides.head_dim",
}
# Strings where a newline or tab is content, not a fault.
MULTILINE = {"test.prompt"}

QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
# C0 and C1 control characters (YAML refuses them in a stream; the scripts must not get them).
NO_CONTROL = "^[^\\x00-\\x1f\\x7f-\\x9f]*$"
NO_CONTROL_MULTILINE = "^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]*$"
# Label keys: an optional DNS-1123 subdomain prefix and a name; values: a name or empty.
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$"
LABEL_VALUE = rf"^({LABEL_NAME})?$"
INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
PROBE_HANDLERS = ("exec", "grpc", "httpGet", "tcpSocket")


@cache
def kubernetes_definitions(version: str = KUBERNETES_FLOOR) -> dict[str, Any]:
    """The strict OpenAPI definitions kubernetes-validate ships for `version`."""
    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    return json.loads((folder / "_definitions.json").read_text())[DEFS]


def _crd_schema(file: str, *path: str) -> dict[str, Any]:
    crd = yaml.safe_load((paths.KTHENA_CRDS / file).read_text())
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    return node


def _local_definitions() -> dict[str, Any]:
    probe = copy.deepcopy(kubernetes_definitions()["io.k8s.api.core.v1.Probe"])
    for handler in PROBE_HANDLERS:
        probe["properties"].pop(handler, None)
    probe["description"] = "Probe timings; the chart sets the handler (httpGet /health on the role's port)."
    return {
        "mooncake-pd.ProbeTimings": probe,
        "kthena.NetworkTopology": _crd_schema(
            "workload.serving.volcano.sh_modelservings.yaml", "spec", "template", "networkTopology"
        ),
        "kthena.ParentReference": _crd_schema(
            "networking.serving.volcano.sh_modelroutes.yaml", "spec", "parentRefs", "[]"
        ),
    }


def _refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for value in node.values():
            found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def _fix(node: Any) -> Any:
    """A definition as values.schema.json holds it: local refs, the quantity grammar, integer
    bounds, toleration enums, CRD extensions dropped."""
    if isinstance(node, list):
        return [_fix(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "$ref":
            out[key] = f"#/{DEFS}/{value.rsplit('/', 1)[-1]}"
        else:
            out[key] = _fix(value)
    # Kubernetes' "or null" means "may be left out"; in values an explicit null item or field
    # would be rendered as null, which the API server refuses in lists.
    if isinstance(out.get("type"), list) and "null" in out["type"]:
        kinds = [t for t in out["type"] if t != "null"]
        out["type"] = kinds[0] if len(kinds) == 1 else kinds
    if out.get("format") in INT_BOUNDS:
        out["minimum"], out["maximum"] = INT_BOUNDS[out["format"]]
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def definitions(names: set[str]) -> dict[str, Any]:
    """The named definitions and every one they refer to, fixed."""
    source = {**kubernetes_definitions(), **_local_definitions()}
    wanted, todo = {}, sorted(names)
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted[name] = _fix(source[name])
        todo += sorted(_refs(source[name]) - set(wanted))
    quantity = "io.k8s.apimachinery.pkg.api.resource.Quantity"
    if quantity in wanted:
        wanted[quantity] = {
            "description": "A Kubernetes quantity: a number with an optional suffix (Ki, Mi, Gi, m, k, M, G, e3 ...).",
            "oneOf": [{"type": "string", "pattern": QUANTITY}, {"type": "number"}],
        }
    toleration = wanted.get("io.k8s.api.core.v1.Toleration")
    if toleration:
        toleration["properties"]["operator"]["enum"] = ["Exists", "Equal", None]
        toleration["properties"]["effect"]["enum"] = ["NoSchedule", "PreferNoSchedule", "NoExecute", "", None]
    return dict(sorted(wanted.items()))


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.replace("[]", ".[]").split("."):
        node = node.setdefault("items", {}) if part == "[]" else node["properties"][part]
    return node


def _strings(node: dict[str, Any], path: str, visit) -> None:
    """Call visit(node, path) for every string-typed value schema the values schema declares."""
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "string" in kinds and "enum" not in node:
        visit(node, path)
    for key, sub in (node.get("properties") or {}).items():
        _strings(sub, f"{path}.{key}" if path else key, visit)
    if isinstance(node.get("additionalProperties"), dict):
        _strings(node["additionalProperties"], f"{path}.*", visit)
    if isinstance(node.get("items"), dict):
        _strings(node["items"], f"{path}[]", visit)


def _required(node: dict[str, Any], path: str) -> None:
    if "properties" in node:
        keys = [k for k in node["properties"] if (f"{path}.{k}" if path else k) not in NULLABLE]
        if keys:
            node["required"] = keys
        else:
            node.pop("required", None)
        for key, sub in node["properties"].items():
            _required(sub, f"{path}.{key}" if path else key)


def generate(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its machine-derived parts (re)written; idempotent."""
    out = copy.deepcopy(schema)
    out.pop(DEFS, None)
    for path, definition in K8S_FIELDS.items():
        node = _node(out, path)
        node["allOf"] = [{"$ref": f"#/{DEFS}/{definition}"}]
    for path in LABEL_MAPS:
        node = _node(out, path)
        # patternProperties rather than propertyNames: helm 4 then names the map in its error.
        node.pop("propertyNames", None)
        node["patternProperties"] = {LABEL_KEY: {"type": "string", "pattern": LABEL_VALUE}}
        node["additionalProperties"] = False

    def no_control(node: dict[str, Any], path: str) -> None:
        rule = {"pattern": NO_CONTROL_MULTILINE if path in MULTILINE else NO_CONTROL}
        # Keep the node's other rules; an earlier no-control rule is replaced.
        others = [
            r for r in node.get("allOf", []) if not (set(r) == {"pattern"} and r["pattern"].startswith("^[^\\x00-"))
        ]
        node["allOf"] = [*others, rule]

    _strings(out, "", no_control)
    _required(out, "")
    out[DEFS] = definitions({d for d in K8S_FIELDS.values()})
    for definition in out[DEFS].values():
        _strings(definition, "", no_control)
    return out


def schema_path() -> Path:
    return paths.CHART / "values.schema.json"


def dump(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"
