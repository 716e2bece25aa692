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
  effects, label keys and values; and the API server's own field rules (api_server_rules): CIDRs,
  probe timings, quantities >= 0, resource names, selector keys and operators, enums;
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
# Label keys: an optional DNS-1123 subdomain prefix and a name; values: a name or empty.
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$"
LABEL_VALUE = rf"^({LABEL_NAME})?$"
INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# The `format`s the definitions used here carry are int32 and int64 (bounded above),
# int-or-string (IntOrString, rewritten in definitions()) and date-time (meta/v1 Time, in an
# ephemeral volume's claim metadata); the API server checks more strings by format than OpenAPI
# marks. Each rule below names its source in kubernetes (pkg/apis/...;
# k8s.io/apimachinery/pkg/util/validation), read at v1.27 unless it names v1.34.2.
# Quantities of resources are >= 0 (core/validation ValidateResourceQuantityValue ->
# ValidateNonnegativeQuantity): the grammar without a minus sign.
NONNEGATIVE_QUANTITY = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
# Extended resources hold whole numbers (IsIntegerResourceName: "must be an integer"): no fraction
# without a suffix, milli/micro/nano units only in whole thousands/millions/billions. A decimal
# with a larger suffix (1.5k) passes here and is left to the API server.
INTEGER_QUANTITY = (
    r"^\+?([0-9]+(\.0*)?|[0-9]*\.[0-9]+([KMGTPE]i|[kMGTPE]|[eE]\+?[0-9]+)|[0-9]+([KMGTPE]i|[kMGTPE]|[eE]\+?[0-9]+)"
    r"|0+[mun]|[0-9]*000m|[0-9]*000000u|[0-9]*000000000n)$"
)
# Container resource names (core/validation validateContainerResourceName): the standard ones,
# or an extended name `domain/name` that is a qualified name (helper.IsExtendedResourceName).
STANDARD_RESOURCE = r"^(cpu|memory|ephemeral-storage|hugepages-[-A-Za-z0-9_.]*[A-Za-z0-9])$"
EXTENDED_RESOURCE = rf"^{DNS_SUBDOMAIN}/{LABEL_NAME}$"
# CIDRs as netutils.ParseCIDRSloppy reads them (networking/validation ValidateIPBlock: cidr and
# each except entry, "not a valid CIDR"): IPv4 octets may have leading zeros, host bits may be set.
_V4 = r"((25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|[01]?[0-9]?[0-9])"
_H = "[0-9a-fA-F]{1,4}"
_V6 = "|".join(
    [
        rf"({_H}:){{7}}{_H}",
        rf"({_H}:){{1,7}}:",
        *(rf"({_H}:){{{n}}}(:{_H}){{1,{7 - n}}}" for n in range(1, 7)),
        rf":(:{_H}){{1,7}}",
        "::",
        rf"({_H}:){{6}}{_V4}",
        *(rf"({_H}:){{{n}}}(:{_H}){{0,{5 - n}}}:{_V4}" for n in range(0, 6)),
        rf"::({_H}:){{0,5}}{_V4}",
    ]
)
CIDR = rf"^({_V4}/(3[0-2]|[12]?[0-9])|({_V6})/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))$"
# LabelSelectorRequirement and NodeSelectorRequirement operators (apimachinery
# ValidateLabelSelectorRequirement; core/validation ValidateNodeSelectorRequirement).
SELECTOR_OPERATORS = ["In", "NotIn", "Exists", "DoesNotExist"]
NODE_SELECTOR_OPERATORS = [*SELECTOR_OPERATORS, "Gt", "Lt"]
# Security-context enums (core/validation ValidateProcMountType, validateFSGroupChangePolicy,
# validateSeccompProfileType; the local cluster's API server refused "" for procMount, found by
# tests/test_cluster_admission.py); a Localhost seccomp profile needs localhostProfile, which
# only it may have (validateSeccompProfileField).
# Unmasked needs the pod's hostUsers false ("`hostUsers` must be false to use `Unmasked`"), which
# no pod of the chart sets: Default is the one value that can work.
PROC_MOUNT_TYPES = ["Default"]
MAX_ID = 2**31 - 1
SYSCTL_NAME = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"
FS_GROUP_CHANGE_POLICIES = ["OnRootMismatch", "Always"]
SECCOMP_PROFILE_TYPES = ["Localhost", "RuntimeDefault", "Unconfined"]
# v1.34.2: ValidateAppArmorProfileField, validateSupplementalGroupsPolicy; validateSELinuxChangePolicy
# takes only Recursive for a new pod unless the SELinuxMount gate is on (beta, off by default
# in 1.34: pkg/api/pod/util.go useOnlyRecursiveSELinuxChangePolicy).
APPARMOR_PROFILE_TYPES = ["Localhost", "RuntimeDefault", "Unconfined"]
SUPPLEMENTAL_GROUPS_POLICIES = ["Merge", "Strict"]
SELINUX_CHANGE_POLICIES = ["Recursive"]
# Fields behind feature gates that are off by default in kube-apiserver v1.34.2
# (pkg/features/kube_features.go): without the gate the API server drops them unsaid
# (pkg/api/pod/util.go dropDisabledPodFields; the local cluster admitted each and stored it
# without: tests/test_cluster_schema_rules_on_newer_fields.py) or refuses what is left, so the
# schema refuses them naming the key rather than let them vanish.
GATED_OFF = {
    # ContainerRestartRules (alpha); without it restartPolicy is for init containers only.
    "io.k8s.api.core.v1.Container": ("restartPolicy", "restartPolicyRules"),
    # ContainerStopSignals (alpha); with it, a stopSignal also needs spec.os.name, which no pod
    # of the chart sets (validateStopSignal).
    "io.k8s.api.core.v1.Lifecycle": ("stopSignal",),
    # EnvFiles (alpha): the valueFrom left empty is refused ("must specify one of").
    "io.k8s.api.core.v1.EnvVarSource": ("fileKeyRef",),
    # ImageVolume (beta, off): the volume and its mounts are removed.
    "io.k8s.api.core.v1.Volume": ("image",),
    # ClusterTrustBundleProjection (beta, off) and PodCertificateRequest (alpha): an empty source.
    "io.k8s.api.core.v1.VolumeProjection": ("clusterTrustBundle", "podCertificate"),
}
# Probe fields (core/validation validateProbe, ValidateNonnegativeField): >= 0, 0 meaning the
# default (core/v1/defaults.go SetDefaults_Probe); terminationGracePeriodSeconds > 0;
# liveness and startup probes need successThreshold 1 (validateContainerCommon "must be 1").
PROBE_NONNEGATIVE = ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold")
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


def _properties(wanted: dict[str, Any], name: str) -> dict[str, Any]:
    return (wanted.get(name) or {}).get("properties") or {}


def api_server_rules(wanted: dict[str, Any]) -> None:
    """The API server's own field rules the OpenAPI definitions do not carry, added in place to
    the definitions present (sources at the constants above)."""
    quantity = wanted.get("io.k8s.apimachinery.pkg.api.resource.Quantity")
    if quantity:
        quantity["description"] += " Not negative (resources)."
        quantity["oneOf"] = [{"type": "string", "pattern": NONNEGATIVE_QUANTITY}, {"type": "number", "minimum": 0}]
    integer = {
        "description": "An extended resource: a whole number.",
        "oneOf": [{"type": "string", "pattern": INTEGER_QUANTITY}, {"type": "integer", "minimum": 0}],
    }
    for key in ("limits", "requests"):
        field = _properties(wanted, "io.k8s.api.core.v1.ResourceRequirements").get(key)
        if field:
            field["description"] += " Names: cpu, memory, ephemeral-storage, hugepages-<size>, or domain/name."
            field["patternProperties"] = {
                STANDARD_RESOURCE: field.pop("additionalProperties"),
                EXTENDED_RESOURCE: integer,
            }
            field["additionalProperties"] = False
    # resources.claims name a pod-level resourceClaims entry (core/validation
    # validateResourceClaimNames), which no pod of the chart has: every claim would be refused.
    _properties(wanted, "io.k8s.api.core.v1.ResourceRequirements").pop("claims", None)
    ip_block = _properties(wanted, "io.k8s.api.networking.v1.IPBlock")
    if ip_block:
        ip_block["cidr"]["pattern"] = CIDR
        ip_block["except"]["items"]["pattern"] = CIDR
    for name in ("mooncake-pd.ProbeTimings", "mooncake-pd.SingleSuccessProbeTimings"):
        probe = _properties(wanted, name)
        for key in PROBE_NONNEGATIVE:
            probe.get(key, {})["minimum"] = 0
        if "terminationGracePeriodSeconds" in probe:
            probe["terminationGracePeriodSeconds"]["minimum"] = 1
    single = _properties(wanted, "mooncake-pd.SingleSuccessProbeTimings")
    if single:
        single["successThreshold"]["maximum"] = 1
    label_selector = _properties(wanted, "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector")
    if label_selector:
        label_selector["matchLabels"]["patternProperties"] = {
            LABEL_KEY: label_selector["matchLabels"].pop("additionalProperties") | {"pattern": LABEL_VALUE}
        }
        label_selector["matchLabels"]["additionalProperties"] = False
    for name, operators in (
        ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", SELECTOR_OPERATORS),
        ("io.k8s.api.core.v1.NodeSelectorRequirement", NODE_SELECTOR_OPERATORS),
    ):
        requirement = _properties(wanted, name)
        if requirement:
            requirement["key"]["pattern"] = LABEL_KEY
            requirement["operator"]["enum"] = operators
    # Values by operator (ValidateLabelSelectorRequirement, ValidateNodeSelectorRequirement): In
    # and NotIn need some, Exists and DoesNotExist none, Gt and Lt exactly one; node values are
    # label values (found by tests/test_cluster_admission.py, with an empty nodeSelectorTerms).
    for name, counted in (
        ("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement", False),
        ("io.k8s.api.core.v1.NodeSelectorRequirement", True),
    ):
        found = wanted.get(name)
        if found:
            rule_node: dict[str, Any] = found
            rules = [
                _operator_rule(["In", "NotIn"], {"required": ["values"], "properties": {"values": {"minItems": 1}}}),
                _operator_rule(["Exists", "DoesNotExist"], {"properties": {"values": {"maxItems": 0}}}),
            ]
            if counted:
                single = {"required": ["values"], "properties": {"values": {"minItems": 1, "maxItems": 1}}}
                rules.append(_operator_rule(["Gt", "Lt"], single))
                rule_node["properties"]["values"]["items"]["pattern"] = LABEL_VALUE
            rule_node["allOf"] = [*rule_node.get("allOf", []), *rules]
    sysctl = _properties(wanted, "io.k8s.api.core.v1.Sysctl")
    if sysctl:
        # core/validation IsValidSysctlName (found by tests/test_cluster_admission.py: "").
        sysctl["name"]["pattern"] = SYSCTL_NAME
        sysctl["name"]["maxLength"] = 253
    node_selector = _properties(wanted, "io.k8s.api.core.v1.NodeSelector")
    if node_selector:
        node_selector["nodeSelectorTerms"]["minItems"] = 1
    term = _properties(wanted, "io.k8s.api.core.v1.PodAffinityTerm")
    if term:
        term["topologyKey"]["pattern"] = LABEL_KEY
    for name, key, values in (
        ("io.k8s.api.core.v1.SecurityContext", "procMount", PROC_MOUNT_TYPES),
        ("io.k8s.api.core.v1.PodSecurityContext", "fsGroupChangePolicy", FS_GROUP_CHANGE_POLICIES),
        ("io.k8s.api.core.v1.SeccompProfile", "type", SECCOMP_PROFILE_TYPES),
    ):
        field = _properties(wanted, name).get(key)
        if field:
            field["enum"] = values
    # User and group IDs (k8s.io/apimachinery/pkg/util/validation IsValidUserID/IsValidGroupID:
    # 0 to 2^31-1; the local cluster's API server refused runAsGroup -1).
    for name in ("io.k8s.api.core.v1.SecurityContext", "io.k8s.api.core.v1.PodSecurityContext"):
        fields = _properties(wanted, name)
        for key in ("runAsUser", "runAsGroup", "fsGroup"):
            if key in fields:
                fields[key]["minimum"], fields[key]["maximum"] = 0, MAX_ID
        if "supplementalGroups" in fields:
            fields["supplementalGroups"]["items"]["minimum"] = 0
            fields["supplementalGroups"]["items"]["maximum"] = MAX_ID
    # The chart's pods are Linux pods: Windows options have no use there, and their values are
    # checked by rules of their own (the local cluster's API server refused an empty
    # gmsaCredentialSpec); left out, they are refused naming the key.
    for name in ("io.k8s.api.core.v1.SecurityContext", "io.k8s.api.core.v1.PodSecurityContext"):
        _properties(wanted, name).pop("windowsOptions", None)
    seccomp = wanted.get("io.k8s.api.core.v1.SeccompProfile")
    if seccomp:
        _localhost_profile(seccomp)
    peer = wanted.get("io.k8s.api.networking.v1.NetworkPolicyPeer")
    if peer:
        # networking/validation ValidateNetworkPolicyPeer: "must specify a peer", and "may not
        # specify both ipBlock and another peer" (found by tests/test_cluster_admission.py).
        peer["anyOf"] = [{"required": [key]} for key in ("podSelector", "namespaceSelector", "ipBlock")]
        peer["if"] = {"required": ["ipBlock"]}
        peer["then"] = {"not": {"anyOf": [{"required": ["podSelector"]}, {"required": ["namespaceSelector"]}]}}
    toleration = _properties(wanted, "io.k8s.api.core.v1.Toleration")
    if toleration:
        # Empty with operator Exists matches every taint (core/validation validateTolerations).
        toleration["key"]["pattern"] = LABEL_KEY.replace("^(", "^$|^(", 1)
    spread_constraint = wanted.get("io.k8s.api.core.v1.TopologySpreadConstraint")
    if spread_constraint:
        # core/validation validateTopologySpreadConstraints (v1.34.2): maxSkew and minDomains
        # positive, minDomains only with DoNotSchedule, a qualified topologyKey, the two
        # policies Honor or Ignore, and matchLabelKeys only beside a labelSelector. That no two
        # constraints share {topologyKey, whenUnsatisfiable} is validate.pods'.
        fields = spread_constraint["properties"]
        fields["maxSkew"]["minimum"] = 1
        fields["minDomains"]["minimum"] = 1
        fields["topologyKey"]["pattern"] = LABEL_KEY
        fields["whenUnsatisfiable"]["enum"] = ["DoNotSchedule", "ScheduleAnyway"]
        for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            if policy in fields:
                fields[policy]["enum"] = ["Honor", "Ignore"]
        if "matchLabelKeys" in fields:
            fields["matchLabelKeys"]["items"]["pattern"] = LABEL_KEY
            spread_constraint["allOf"] = [_needs_selector("matchLabelKeys")]
        spread_constraint["if"] = {"required": ["minDomains"]}
        spread_constraint["then"] = {"properties": {"whenUnsatisfiable": {"const": "DoNotSchedule"}}}
    # core/validation validatePreferredSchedulingTerms and validateWeightedPodAffinityTerms:
    # "must be in the range 1-100" (found by the fuzz against the local cluster).
    for name in ("io.k8s.api.core.v1.PreferredSchedulingTerm", "io.k8s.api.core.v1.WeightedPodAffinityTerm"):
        weight = _properties(wanted, name).get("weight")
        if weight:
            weight["minimum"], weight["maximum"] = 1, 100
    volume = wanted.get("io.k8s.api.core.v1.Volume")
    if volume:
        # core/validation validateVolumeSource: "must specify a volume type", "may not specify
        # more than 1 volume type": a name and exactly one source.
        volume["minProperties"] = 2
        volume["maxProperties"] = 2
    newer_field_rules(wanted)


def newer_field_rules(wanted: dict[str, Any]) -> None:
    """The API server's rules (kubernetes v1.34.2, pkg/apis/core/validation/validation.go) on
    the fields the 1.27 definitions lacked, added in place like api_server_rules'."""
    # ValidateAppArmorProfileField: as seccomp's, a Localhost profile names its file, no other does.
    for name in ("io.k8s.api.core.v1.SecurityContext", "io.k8s.api.core.v1.PodSecurityContext"):
        if "appArmorProfile" in _properties(wanted, name):
            apparmor = wanted["io.k8s.api.core.v1.AppArmorProfile"]
            apparmor["properties"]["type"]["enum"] = APPARMOR_PROFILE_TYPES
            # "must not be padded with whitespace", "must be set", at most PATH_MAX - 1.
            apparmor["properties"]["localhostProfile"] |= {"pattern": r"^\S(.*\S)?$", "maxLength": 4095}
            _localhost_profile(apparmor)
    pod_context = _properties(wanted, "io.k8s.api.core.v1.PodSecurityContext")
    for key, values in (
        ("supplementalGroupsPolicy", SUPPLEMENTAL_GROUPS_POLICIES),
        ("seLinuxChangePolicy", SELINUX_CHANGE_POLICIES),
    ):
        if key in pod_context:
            pod_context[key]["enum"] = values
    # validateMountRecursiveReadOnly: Disabled, or IfPossible/Enabled on a readOnly mount whose
    # propagation is None or unset.
    mount = wanted.get("io.k8s.api.core.v1.VolumeMount")
    if mount and "recursiveReadOnly" in mount["properties"]:
        mount["properties"]["recursiveReadOnly"]["enum"] = ["Disabled", "IfPossible", "Enabled"]
        recursive = {"properties": {"recursiveReadOnly": {"enum": ["IfPossible", "Enabled"]}}}
        mount["allOf"] = [
            *mount.get("allOf", []),
            {
                "if": recursive | {"required": ["recursiveReadOnly"]},
                "then": {
                    "required": ["readOnly"],
                    "properties": {"readOnly": {"const": True}, "mountPropagation": {"const": "None"}},
                },
            },
        ]
    # ValidateMatchLabelKeysAndMismatchLabelKeys: label keys, only beside a labelSelector. That a
    # key is not both in matchLabelKeys and the selector, or in both lists, is the API server's.
    term = wanted.get("io.k8s.api.core.v1.PodAffinityTerm")
    if term:
        for key in ("matchLabelKeys", "mismatchLabelKeys"):
            if key in term["properties"]:
                term["properties"][key]["items"]["pattern"] = LABEL_KEY
                term["allOf"] = [*term.get("allOf", []), _needs_selector(key)]
    # validateSleepAction: not negative (zero allowed: PodLifecycleSleepActionAllowZero, GA in
    # 1.34); at most the pod's terminationGracePeriodSeconds is the API server's.
    sleep = _properties(wanted, "io.k8s.api.core.v1.SleepAction")
    if sleep:
        sleep["seconds"]["minimum"] = 0
    for name, keys in GATED_OFF.items():
        for key in keys:
            _properties(wanted, name).pop(key, None)


def _localhost_profile(profile: dict[str, Any]) -> None:
    """A seccomp or AppArmor profile: localhostProfile with type Localhost, and only then."""
    profile["if"] = {"properties": {"type": {"const": "Localhost"}}, "required": ["type"]}
    profile["then"] = {"required": ["localhostProfile"]}
    profile["else"] = {"not": {"required": ["localhostProfile"]}}


def _needs_selector(key: str) -> dict[str, Any]:
    """`key` (a list of label keys) not empty only beside a labelSelector; an if/then rule, as
    the schema is draft-07 (helm ignores draft 2019's dependentRequired)."""
    return {
        "if": {"properties": {key: {"minItems": 1}}, "required": [key]},
        "then": {"required": ["labelSelector"]},
    }


def _operator_rule(operators: list[str], then: dict[str, Any]) -> dict[str, Any]:
    return {"if": {"properties": {"operator": {"enum": operators}}, "required": ["operator"]}, "then": then}


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
