"""Whether a serving group's pods fit a cluster's nodes now, judged pod by pod as kube-scheduler's
filters judge one (pure functions: `mooncake-pd preflight` reads the nodes and pods, this decides).

Volcano places a serving group's pods together or not at all (Kthena v1.0.0 creates one PodGroup
per serving group, pkg/model-serving-controller/podgroupmanager/manager.go), so a group fits when
every one of its pods finds a node at once. What is modelled, from kubernetes v1.34.2:
- a pod's requests: the sum of its containers' and sidecars' (restartable init containers), or
  the largest init container's with the sidecars started before it if that is more, plus the pod
  overhead; pod-level `resources.requests` replace the containers' sum where given
  (staging/src/k8s.io/component-helpers/resource/helpers.go PodRequests); a limit without a
  request requests the limit (pkg/apis/core/v1/defaults.go SetDefaults_Pod), and every pod takes
  one of the node's `pods` (pkg/scheduler/framework/plugins/noderesources/fit.go);
- a node's free allocatable: `status.allocatable` minus the requests of the pods bound to it that
  have not ended (phase Succeeded or Failed release theirs: pkg/scheduler/framework/types.go
  NodeInfo, pkg/scheduler/internal/cache);
- the filters: spec.unschedulable (plugins/nodeunschedulable), taints with effect NoSchedule or
  NoExecute untolerated (plugins/tainttoleration, component-helpers/scheduling/corev1/helpers.go
  TolerationsTolerateTaint), nodeSelector and required node affinity (component-helpers/
  scheduling/corev1/nodeaffinity), host ports (plugins/nodeports; on the host network every
  containerPort is a hostPort, pkg/apis/core/v1/defaults.go SetDefaults_Pod), required pod
  anti-affinity of the incoming pod against pods in its namespace (plugins/interpodaffinity).
Not modelled: required pod affinity, the anti-affinity of pods already there against the new
one, topology spread, volumes' node affinity, dynamic resources. Placement is first fit, the
largest pods first: where it finds room, the scheduler does too; where it finds none, the
message says per node what was missing, as the scheduler's FailedScheduling event does."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mooncake_pd.errors import MooncakePdError

Resources = dict[str, Decimal]
# How many serving groups `groups_that_fit` tries at most: a group that requests nothing the
# nodes count would otherwise fit without end.
MAX_GROUPS = 1000

# k8s.io/apimachinery v0.34.2 pkg/api/resource/suffix.go: binary and decimal SI suffixes.
_SUFFIXES = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


class QuantityError(MooncakePdError, ValueError):
    """A resource quantity in the values or on the cluster that is not a Kubernetes quantity."""


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("350Gi", "4000m", "1e3", 8) as a number (cores, bytes, devices)."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    number, exponent, suffix = match.groups()
    if exponent:
        return Decimal(number + exponent)
    return Decimal(number) * _SUFFIXES[suffix or ""]


def show(name: str, amount: Decimal) -> str:
    """An amount as a person reads it: memory in Gi, CPU in cores, the rest as counts."""
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        gib = amount / Decimal(2**30)
        return f"{gib.quantize(Decimal('0.1')).normalize():f}Gi"
    return f"{amount.normalize():f}" if amount == amount.to_integral_value() else f"{amount.quantize(Decimal('0.001'))}"


def resources(mapping: Mapping[str, object] | None) -> Resources:
    return {name: quantity(value) for name, value in (mapping or {}).items()}


def _add(into: Resources, more: Mapping[str, Decimal]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _max(into: Resources, other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, Decimal(0)):
            into[name] = amount


def container_requests(container: Mapping[str, Any], limits: bool = False) -> Resources:
    """A container's requests, a limit standing for a missing request (or, `limits`, its limits)."""
    spec = container.get("resources") or {}
    found = resources(spec.get("limits"))
    if not limits:
        found.update(resources(spec.get("requests")))
    return found


def pod_requests(spec: Mapping[str, Any], limits: bool = False) -> Resources:
    """What a pod (its spec) requests of a node, as PodRequests computes it, plus one `pods`
    (`limits`: its limits, as PodLimits adds them up for a ResourceQuota's limits.*)."""
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container, limits))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        own = container_requests(container, limits)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
            _max(init_peak, step)
    pod_level = resources((spec.get("resources") or {}).get("limits" if limits else "requests"))
    total.update({k: v for k, v in pod_level.items() if k in ("cpu", "memory")})
    _max(total, init_peak)
    _add(total, resources(spec.get("overhead")))
    total["pods"] = total.get("pods", Decimal(0)) + 1
    return total


def host_ports(spec: Mapping[str, Any]) -> set[tuple[str, int]]:
    """(protocol, port) of every host port the pod takes."""
    taken = set()
    host_network = bool(spec.get("hostNetwork"))
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for port in container.get("ports") or []:
            number = port.get("hostPort") or (port.get("containerPort") if host_network else None)
            if number:
                taken.add((port.get("protocol") or "TCP", int(number)))
    return taken


@dataclass(frozen=True)
class Pod:
    """A pod to place or already placed: its name, namespace, labels and spec."""

    name: str
    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]

    @property
    def requests(self) -> Resources:
        return pod_requests(self.spec)

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Pod:
        metadata = obj.get("metadata") or {}
        return cls(
            metadata.get("name", ""),
            metadata.get("namespace", ""),
            dict(metadata.get("labels") or {}),
            dict(obj.get("spec") or {}),
        )


@dataclass
class Node:
    """A node with what is left of it: free allocatable, host ports taken, pods bound."""

    name: str
    labels: dict[str, str]
    taints: list[dict[str, Any]]
    unschedulable: bool
    allocatable: Resources
    free: Resources
    ports: set[tuple[str, int]] = field(default_factory=set)
    pods: list[Pod] = field(default_factory=list)

    def copy(self) -> Node:
        return Node(
            self.name, self.labels, self.taints, self.unschedulable, self.allocatable, dict(self.free),
            set(self.ports), list(self.pods),
        )  # fmt: skip

    def place(self, pod: Pod) -> None:
        for name, amount in pod.requests.items():
            self.free[name] = self.free.get(name, Decimal(0)) - amount
        self.ports |= host_ports(pod.spec)
        self.pods.append(pod)


def terminal(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def nodes_now(node_objects: Iterable[Mapping[str, Any]], pod_objects: Iterable[Mapping[str, Any]]) -> list[Node]:
    """The nodes with their free allocatable: allocatable minus the requests of the pods bound to
    each that have not ended."""
    nodes = {}
    for obj in node_objects:
        allocatable = resources((obj.get("status") or {}).get("allocatable"))
        spec = obj.get("spec") or {}
        metadata = obj.get("metadata") or {}
        nodes[metadata["name"]] = Node(
            metadata["name"], dict(metadata.get("labels") or {}), list(spec.get("taints") or []),
            bool(spec.get("unschedulable")), allocatable, dict(allocatable),
        )  # fmt: skip
    for obj in pod_objects:
        bound = (obj.get("spec") or {}).get("nodeName")
        if bound in nodes and not terminal(obj):
            nodes[bound].place(Pod.of(obj))
    return [nodes[name] for name in sorted(nodes)]


def tolerates(tolerations: list[dict[str, Any]], taint: Mapping[str, Any]) -> bool:
    """component-helpers scheduling/corev1 ToleratesTaint: effect (empty: all), key (empty with
    Exists: all), Exists or Equal on the value."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key == "" and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _expression(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def matches_node(spec: Mapping[str, Any], node: Node) -> bool:
    """nodeSelector and required node affinity (terms ORed, expressions ANDed)."""
    if any(node.labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue  # an empty term matches nothing
        if all(_expression(e, node.labels.get(e.get("key", ""))) for e in expressions) and all(
            _expression(f, node.name if f.get("key") == "metadata.name" else None) for f in fields
        ):
            return True
    return False


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels; None selects nothing."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression(e, labels.get(e.get("key", ""))) for e in selector.get("matchExpressions") or [])


def anti_affinity_blocks(pod: Pod, node: Node, nodes: list[Node]) -> bool:
    """The pod's required anti-affinity: a pod in its namespace that a term selects already sits
    in the node's topology domain (the nodes sharing the term's topologyKey label value)."""
    terms = (
        ((pod.spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
    ) or []
    for term in terms:
        key = term.get("topologyKey", "")
        if key not in node.labels:
            continue
        namespaces = set(term.get("namespaces") or []) or {pod.namespace}
        for other in nodes:
            if other.labels.get(key) != node.labels[key]:
                continue
            if any(p.namespace in namespaces and selects(term.get("labelSelector"), p.labels) for p in other.pods):
                return True
    return False


def why_not(pod: Pod, node: Node, nodes: list[Node]) -> str | None:
    """Why the pod cannot go to the node now (the scheduler's filter reasons), or None."""
    spec = pod.spec
    tolerations = list(spec.get("tolerations") or [])
    if node.unschedulable and not tolerates(
        tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ):
        return "node(s) were unschedulable"
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    if not matches_node(spec, node):
        return "node(s) didn't match Pod's node affinity/selector"
    if host_ports(spec) & node.ports:
        return "node(s) didn't have free ports for the requested pod ports"
    if anti_affinity_blocks(pod, node, nodes):
        return "node(s) didn't match pod anti-affinity rules"
    short = [
        name for name, amount in sorted(pod.requests.items()) if amount > 0 and node.free.get(name, Decimal(0)) < amount
    ]
    if short:
        return " and ".join(f"Insufficient {name}" for name in short)
    return None


def place(pod: Pod, nodes: list[Node]) -> Node | None:
    """The first node (by name) the pod fits on now, the pod placed there; None if none."""
    for node in nodes:
        if why_not(pod, node, nodes) is None:
            node.place(pod)
            return node
    return None


def _size(pod: Pod) -> tuple[Decimal, ...]:
    """Largest first: devices (any extended resource), then memory, then CPU."""
    requests = pod.requests
    extended = sum((v for k, v in requests.items() if "/" in k), Decimal(0))
    return (-extended, -requests.get("memory", Decimal(0)), -requests.get("cpu", Decimal(0)))


def place_group(pods: list[Pod], nodes: list[Node]) -> tuple[list[Node], Pod | None]:
    """Place every pod of one group on copies of `nodes` (largest first): (the copies, None) when
    all fit; when one does not, (the copies as they were then, that pod)."""
    trial = [n.copy() for n in nodes]
    for pod in sorted(pods, key=_size):
        if place(pod, trial) is None:
            return trial, pod
    return trial, None


@dataclass(frozen=True)
class Fit:
    """How many groups fit now (at most `limit`), and for the group that did not, which pod found
    no node and why, node by node."""

    groups: int
    unplaced: Pod | None
    reasons: dict[str, int]  # reason -> nodes
    nodes: int

    def reason_text(self) -> str:
        """As the scheduler's FailedScheduling message: `0/10 nodes are available: 4 Insufficient
        memory, 6 node(s) didn't match Pod's node affinity/selector`."""
        parts = ", ".join(
            f"{count} {reason}" for reason, count in sorted(self.reasons.items(), key=lambda r: (-r[1], r[0]))
        )
        return f"0/{self.nodes} nodes are available: {parts}" if parts else f"0/{self.nodes} nodes are available"


def groups_that_fit(group: Callable[[int], list[Pod]], nodes: list[Node], limit: int = MAX_GROUPS) -> Fit:
    """Place group after group (group(i) gives group i's pods) until one does not fit or `limit`
    have; the reasons are those of the first pod of the first group that did not fit."""
    current = nodes
    for index in range(limit):
        after, unplaced = place_group(group(index), current)
        if unplaced is not None:
            reasons: dict[str, int] = {}
            for node in after:
                reason = why_not(unplaced, node, after) or "node(s) available"
                reasons[reason] = reasons.get(reason, 0) + 1
            return Fit(index, unplaced, reasons, len(after))
        current = after
    return Fit(limit, None, {}, len(nodes))


def free_text(node: Node, names: Iterable[str]) -> str:
    """`cpu 608, memory 1186Gi, huawei.com/ascend-1980 8` free on a node."""
    return ", ".join(f"{name} {show(name, node.free.get(name, Decimal(0)))}" for name in names)
