"""The machine-derived parts of chart/values.schema.json, written by `mooncake-pd schema`.

values.schema.json is edited by hand for its keys, types and descriptions. This module adds
what must not be written by hand, and a test fails when the file differs from its output:
- each pass-through Kubernetes field (containers, volumes and mounts, resources, probes, security
  contexts, lifecycle, tolerations, affinity, NetworkPolicy peers, ...) is typed with Kubernetes'
  own definition, unknown fields refused: from kubernetes' api/openapi-spec/swagger.json at
  v1.34.2, the newest release the chart supports (Chart.yaml kubeVersion >=1.27) and the one whose
  API server the local test cluster runs, vendored as an extract (mooncake_pd/openapi/SOURCE.md;
  `mooncake-pd schema --openapi` extracts it again). The newest rather than the floor: a field
  valid in 1.34 is accepted (preStop sleep, matchLabelKeys in pod affinity, ...); one an older
  cluster lacks is that API server's to refuse, at install for the engine pods (the pod-template
  hook, chart/templates/validate-podtemplates.yaml). Kthena's own fields (networkTopology,
  parentRefs) from the vendored CRDs;
- what OpenAPI leaves out: the quantity grammar, int32/int64 bounds, toleration operators and
  effects, label keys and values; and the API server's own field rules (mooncake_pd.schemarules):
  CIDRs, probe timings, quantities >= 0, resource names, selector keys and operators, enums, the
  fields a 1.34 API server drops unsaid with its default feature gates;
- every key required unless listed in NULLABLE (null there means "off" or "the default"), so a
  section set to null is refused naming it instead of crashing a template;
- no control characters in any string (they break the YAML and the start scripts).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mooncake_pd import kubeopenapi, manifests, paths, profiles
from mooncake_pd.schemarules import LABEL_KEY, LABEL_VALUE, api_server_rules

DEFS = "$defs"
PREFIX = "io.k8s."
PROBE = "io.k8s.api.core.v1.Probe"

# values path (dots; [] for list items) -> Kubernetes definition (or a local one below).
K8S_FIELDS = {
    "imagePullSecrets[]": "io.k8s.api.core.v1.LocalObjectReference",
    "model.download.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "engine.startupProbe": "mooncake-pd.SingleSuccessProbeTimings",
    "engine.livenessProbe": "mooncake-pd.SingleSuccessProbeTimings",
    "engine.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "engine.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "engine.extraVolumes[]": "io.k8s.api.core.v1.Volume",
    "engine.extraVolumeMounts[]": "io.k8s.api.core.v1.VolumeMount",
    "engine.extraContainers[]": "io.k8s.api.core.v1.Container",
    "networkTopology": "kthena.NetworkTopology",
    "networkPolicy.extraIngress[]": "io.k8s.api.networking.v1.NetworkPolicyPeer",
    "networkPolicy.proxyFrom[]": "io.k8s.api.networking.v1.NetworkPolicyPeer",
    "networkPolicy.prometheusFrom[]": "io.k8s.api.networking.v1.NetworkPolicyPeer",
    "router.kthena.parentRefs[]": "kthena.ParentReference",
    "proxy.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "proxy.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "proxy.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "proxy.tolerations[]": "io.k8s.api.core.v1.Toleration",
    "proxy.affinity": "io.k8s.api.core.v1.Affinity",
    "proxy.topologySpreadConstraints[]": "io.k8s.api.core.v1.TopologySpreadConstraint",
    "test.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "test.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "test.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "test.tolerations[]": "io.k8s.api.core.v1.Toleration",
    "benchmark.resources": "io.k8s.api.core.v1.ResourceRequirements",
    "benchmark.podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "benchmark.securityContext": "io.k8s.api.core.v1.SecurityContext",
    "benchmark.tolerations[]": "io.k8s.api.core.v1.Toleration",
    "benchmark.affinity": "io.k8s.api.core.v1.Affinity",
    **{
        f"{role}.{key}": definition
        for role in ("prefill", "decode")
        for key, definition in (
            ("resources", "io.k8s.api.core.v1.ResourceRequirements"),
            ("readinessProbe", "mooncake-pd.ProbeTimings"),
            ("tolerations[]", "io.k8s.api.core.v1.Toleration"),
            ("affinity", "io.k8s.api.core.v1.Affinity"),
            ("topologySpreadConstraints[]", "io.k8s.api.core.v1.TopologySpreadConstraint"),
        )
    },
}
# Maps of Kubernetes labels (keys and values checked).
LABEL_MAPS = (
    "prefill.nodeSelector",
    "decode.nodeSelector",
    "proxy.nodeSelector",
    "benchmark.nodeSelector",
    "test.nodeSelector",
    "metrics.podMonitor.labels",
    "metrics.prometheusRule.labels",
    "metrics.dashboard.labels",
    "commonLabels",
    "podLabels",
    "prefill.podLabels",
    "decode.podLabels",
    "proxy.podLabels",
)
# Maps of Kubernetes annotations: keys are label keys (qualified names), values any text.
ANNOTATION_MAPS = ("podAnnotations", "prefill.podAnnotations", "decode.podAnnotations", "proxy.podAnnotations")
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
    "kvTransfer.bufferDevice",
    "kvTransfer.bufferSize",
    "kvTransfer.loadFailurePolicy",
    "kvTransfer.enablePermuteLocalKv",
    "engine.hostNetwork",
    "proxy.podDisruptionBudget.maxUnavailable",
    "proxy.podDisruptionBudget.minAvailable",
}
# Strings where a newline or tab is content, not a fault.
MULTILINE = {"test.prompt"}

QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
# C0 and C1 control characters (YAML refuses them in a stream; the scripts must not get them).
NO_CONTROL = "^[^\\x00-\\x1f\\x7f-\\x9f]*$"
NO_CONTROL_MULTILINE = "^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]*$"
# The `format`s the definitions used here carry: int32 and int64 (bounded), int-or-string
# (IntOrString, rewritten in definitions()) and date-time (meta/v1 Time, in an ephemeral
# volume's claim metadata). The API server's rules beyond OpenAPI: mooncake_pd.schemarules.
INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
PROBE_HANDLERS = ("exec", "grpc", "httpGet", "tcpSocket")


def kubernetes_roots() -> set[str]:
    """The Kubernetes definitions the values name: the vendored extract holds them and every
    definition they refer to (kubeopenapi)."""
    return {d for d in K8S_FIELDS.values() if d.startswith(PREFIX)} | {PROBE}


def kubernetes_definitions() -> dict[str, Any]:
    """Kubernetes' definitions (Swagger 2.0 schemas, kubeopenapi.VERSION), from the vendored extract."""
    return kubeopenapi.vendored()


def _crd_schema(file: str, *path: str) -> dict[str, Any]:
    crd = manifests.load((paths.crds_dir() / file).read_text())
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in path:
        node = node["items"] if key == "[]" else node["properties"][key]
    return node


def _local_definitions() -> dict[str, Any]:
    probe = copy.deepcopy(kubernetes_definitions()[PROBE])
    for handler in PROBE_HANDLERS:
        probe["properties"].pop(handler, None)
    probe["description"] = "Probe timings; the chart sets the handler (httpGet /health on the role's port)."
    single = copy.deepcopy(probe)
    single["description"] = "Liveness or startup probe timings: successThreshold must be 1 (or 0, the default)."
    # core/validation validateReadinessProbe (v1.34.2): "must not be set for readinessProbes"
    # (found when the suite began dry-running the ModelServing's pod templates as Pods).
    probe["properties"].pop("terminationGracePeriodSeconds", None)
    return {
        "mooncake-pd.ProbeTimings": probe,
        "mooncake-pd.SingleSuccessProbeTimings": single,
        "kthena.NetworkTopology": _crd_schema(
            "workload.serving.volcano.sh_modelservings.yaml", "spec", "template", "networkTopology"
        ),
        "kthena.ParentReference": _crd_schema(
            "networking.serving.volcano.sh_modelroutes.yaml", "spec", "parentRefs", "[]"
        ),
    }


def _fix(node: Any) -> Any:
    """A definition as values.schema.json holds it: local refs, the quantity grammar, integer
    bounds, toleration enums, CRD extensions dropped."""
    if isinstance(node, list):
        return [_fix(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
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
    wanted = {name: _fix(node) for name, node in kubeopenapi.closure(source, names).items()}
    # Swagger 2.0 writes the two union types as strings with a format; JSON takes them as below
    # (apimachinery's intstr.IntOrString: "an int32 or a string").
    int_or_string = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
    if int_or_string in wanted:
        wanted[int_or_string] = {
            "description": "A name or a number (int32).",
            "oneOf": [{"type": "string"}, _fix({"type": "integer", "format": "int32"})],
        }
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
    api_server_rules(wanted)
    # Only what the values still reach (api_server_rules removes fields, and with them the last
    # reference to some definitions).
    return kubeopenapi.closure(wanted, names)


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.replace("[]", ".[]").split("."):
        node = node.setdefault("items", {}) if part == "[]" else node["properties"][part]
    return node


def _strings(node: dict[str, Any], path: str, visit: Callable[[dict[str, Any], str], None]) -> None:
    """Call visit(node, path) for every string-typed value schema the values schema declares."""
    kinds = node.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "string" in kinds and "enum" not in node:
        visit(node, path)
    for key, sub in (node.get("properties") or {}).items():
        _strings(sub, f"{path}.{key}" if path else key, visit)
    if isinstance(node.get("additionalProperties"), dict):
        _strings(node["additionalProperties"], f"{path}.*", visit)
    for sub in (node.get("patternProperties") or {}).values():
        _strings(sub, f"{path}.*", visit)
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
    for path in ANNOTATION_MAPS:
        node = _node(out, path)
        node["patternProperties"] = {LABEL_KEY: {"type": "string"}}
        node["additionalProperties"] = False

    def no_control(node: dict[str, Any], path: str) -> None:
        rule = {"pattern": NO_CONTROL_MULTILINE if path in MULTILINE else NO_CONTROL}
        # Keep the node's other rules; an earlier no-control rule is replaced.
        others = [
            r for r in node.get("allOf", []) if not (set(r) == {"pattern"} and r["pattern"].startswith("^[^\\x00-"))
        ]
        node["allOf"] = [*others, rule]

    accelerator_type(out)
    kthena_version(out)
    engine_version(out)
    _named_maps(out)
    _strings(out, "", no_control)
    _required(out, "")
    out[DEFS] = definitions({d for d in K8S_FIELDS.values()})
    for definition in out[DEFS].values():
        _strings(definition, "", no_control)
    return out


def _named_maps(node: Any) -> None:
    """Maps whose keys follow a pattern (env names, vLLM flags with dashes) as patternProperties
    with additionalProperties false rather than propertyNames: helm 4 then names the map in its
    refusal ("at '/prefill/args': additional properties 'max_num_seqs' not allowed") instead of
    "at ''", and helm 3 says "Additional property" with the map's path."""
    if isinstance(node, dict):
        names = node.get("propertyNames")
        values = node.get("additionalProperties", {})
        if isinstance(names, dict) and set(names) == {"pattern"} and isinstance(values, dict):
            node.pop("propertyNames")
            node["patternProperties"] = {names["pattern"]: values}
            node["additionalProperties"] = False
        for sub in node.values():
            _named_maps(sub)
    elif isinstance(node, list):
        for sub in node:
            _named_maps(sub)


def accelerator_type(schema: dict[str, Any]) -> None:
    """accelerator.type: one of the profiles of chart/files/profiles.yaml, each described there."""
    node = _node(schema, "accelerator.type")
    rows = profiles.all_profiles()
    node["enum"] = list(rows)
    devices = {
        n: f"{p.resource_name}, {p.devices_per_node} per node" if p.resource_name else "no device"
        for n, p in rows.items()
    }
    described = "; ".join(f"`{name}`: {p.row['description']} ({devices[name]})" for name, p in rows.items())
    node["description"] = (
        "The accelerator profile (a row of chart/files/profiles.yaml): device resource, image, KV connector, "
        f"NIC variables and host mounts. {described}."
    )


def kthena_version(schema: dict[str, Any]) -> None:
    """kthena.version: one of the kthena table of chart/files/profiles.yaml, each described there."""
    node = _node(schema, "kthena.version")
    rows = profiles.load()["kthena"]
    node["enum"] = list(rows)
    described = "; ".join(f"`{name}`: {row['description']}" for name, row in rows.items())
    node["description"] = (
        "The Kthena the cluster runs (a row of the kthena table of chart/files/profiles.yaml): what its "
        f"ModelServing accepts and which CRDs the tooling validates against. {described}."
    )


def engine_version(schema: dict[str, Any]) -> None:
    """engine.version: a row of the engines table of chart/files/profiles.yaml, each described
    there. No enum: the chart's own refusal names the versions per accelerator and how to add one."""
    node = _node(schema, "engine.version")
    rows = profiles.load()["engines"]
    described = "; ".join(f"`{name}`: {row['description']}" for name, row in rows.items())
    node["description"] = (
        "The vLLM(-Ascend) release the engines run (a row of the engines table of chart/files/profiles.yaml; "
        "its data, read from its own packages, in chart/files/engines/<version>/): the default image, and the "
        "flags, KV-transfer keys, --additional-config keys, ports and env the chart writes and accepts. Empty: "
        "the version of a release tag in image.tag (v0.23.0-a3), else the accelerator's default; required with "
        f"an image.tag that names no release. {described}."
    )


def schema_path() -> Path:
    return paths.CHART / "values.schema.json"


def dump(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"
