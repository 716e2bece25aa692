"""The API server's own field rules that Kubernetes' OpenAPI definitions do not carry, added by
`mooncake-pd schema` (mooncake_pd.schemagen) to the values schema's Kubernetes definitions, so
helm refuses at render what the API server would refuse (or drop unsaid) later. Each rule names
its source in kubernetes; the cluster tests (test_cluster_admission's fuzz,
test_cluster_schema_rules_on_newer_fields) hold them to the local cluster's kube-apiserver."""

from __future__ import annotations

from typing import Any

# Label keys: an optional DNS-1123 subdomain prefix and a name; values: a name or empty.
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$"
LABEL_VALUE = rf"^({LABEL_NAME})?$"
# The API server checks more strings by format than OpenAPI marks. Each rule below names its
# source in kubernetes (pkg/apis/...; k8s.io/apimachinery/pkg/util/validation), read at v1.27
# unless it names v1.34.2.
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
