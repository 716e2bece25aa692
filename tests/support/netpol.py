"""A small NetworkPolicy evaluator for ingress, as the Kubernetes API documents it: a pod
selected by no policy accepts everything; a selected pod accepts a connection when one ingress
rule of one selecting policy admits its source and port."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    labels: dict[str, str]
    namespace: str = "default"
    namespace_labels: dict[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels}


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector against labels (matchLabels and In/NotIn/Exists/DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_admits(peer: dict[str, Any], source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pods are addressed by selectors here
    pod_selector = peer.get("podSelector")
    ns_selector = peer.get("namespaceSelector")
    if ns_selector is None and source.namespace != policy_namespace:
        return False
    if ns_selector is not None and not matches(ns_selector, source.ns_labels()):
        return False
    return pod_selector is None or matches(pod_selector, source.labels)


def _port_admits(ports: list[dict[str, Any]] | None, port: int, named: dict[str, int]) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        if "port" not in entry:
            return True
        if isinstance(entry["port"], str):  # a named port admits nothing where no container has it
            if entry["port"] not in named:
                continue
            start = named[entry["port"]]
        else:
            start = entry["port"]
        if start <= port <= entry.get("endPort", start):
            return True
    return False


def allowed(
    policies: list[dict[str, Any]], source: Pod, dest: Pod, port: int, named_ports: dict[str, int] | None = None
) -> bool:
    """Whether `source` may open a TCP connection to `dest` on `port`."""
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace", "default") == dest.namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and matches(p["spec"]["podSelector"], dest.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            source_ok = not peers or any(_peer_admits(p, source, dest.namespace) for p in peers)
            if source_ok and _port_admits(rule.get("ports"), port, named_ports or {}):
                return True
    return False
