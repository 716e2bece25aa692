"""Who may open a TCP connection to whom under the chart's rendered NetworkPolicies, answered by
a real NetworkPolicy implementation: cyclonus v0.5.6's policy engine (github.com/mattfenwick/
cyclonus, pkg/matcher) behind cluster/policytable, a Go program of ours that only marshals
(cluster/components.yaml builds it into .tools/cluster/).

This module renders nothing. From rendered objects it builds the pods the chart makes (one of each
kind: the entry pod, and a worker where a role has them, of every ModelServing role as Kthena
labels it; the proxy; the helm test pod; the KV canary CronJob's and the benchmark Job's pods),
puts them beside the sources around a release (outside_sources), asks the program for one verdict
per source and destination port, and lays the answers out as a table (rows: sources; columns:
`<pod>:<port name>`, numbered ports of one name such as kv-0..kv-7 in one column `kv-*` whose
cell is yes when every port of it is allowed, no when none is, some otherwise), written and read as
markdown.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mooncake_pd import engines
from support import kthena_pods
from support.kube import build

# Kubernetes sets this label on every namespace (the NamespaceDefaultLabelName feature, GA in
# 1.22): namespaceSelectors that name a namespace match it.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
COMPONENT = "app.kubernetes.io/component"
INSTANCE = "app.kubernetes.io/instance"
# Ports no container declares, where the data path listens at random (docs/security.md, rows
# te-rpc, te-ascend-listener, engine-dp-random, kv-nixl-ucx): one of Mooncake's transfer-engine
# RPC range [15000, 17000], one of Mooncake 0.3.7.post2's Ascend listener range [20000, 36000], one
# ephemeral (NIXL/UCX, multi-node DP's ZMQ and TCPStore). Probed on every engine pod as the column
# `<pod>:other`.
OTHER_PORTS = (16000, 20345, 45678)
OTHER = "other"
# A caller outside the cluster (TEST-NET-3, RFC 5737).
OUTSIDE_IP = "203.0.113.7"
TIMEOUT_SECONDS = 60
YES, NO, SOME = "yes", "no", "some"
PROGRAM_DIR = build.CLUSTER / "policytable"


class PolicyTableError(RuntimeError):
    """The table cannot be made: the message names the pod, the field or the missing tool."""


@dataclass(frozen=True)
class Endpoint:
    """A pod (namespace set) or a caller outside the cluster (namespace empty, an IP)."""

    name: str
    namespace: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    ip: str = ""
    host_network: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "ip": self.ip}
        if self.namespace:
            out |= {
                "namespace": self.namespace,
                "labels": self.labels,
                "namespaceLabels": {NAMESPACE_NAME_LABEL: self.namespace, **self.namespace_labels},
                "ports": self.ports,
            }
        return out


@dataclass(frozen=True)
class Table:
    """Verdicts by source (row) and `<pod>:<port name>` (column), in the order first seen."""

    columns: tuple[str, ...]
    rows: dict[str, dict[str, str]]

    def markdown(self) -> str:
        header = ["source", *self.columns]
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        for source, cells in self.rows.items():
            lines.append("| " + " | ".join([source, *(cells[c] for c in self.columns)]) + " |")
        return "\n".join(lines) + "\n"

    def differences(self, other: Table) -> list[str]:
        """Cells that differ, as `source -> column: this, other`; rows or columns only one has."""
        out = []
        if self.columns != other.columns:
            out.append(f"columns: {list(self.columns)} != {list(other.columns)}")
        if list(self.rows) != list(other.rows):
            out.append(f"rows: {list(self.rows)} != {list(other.rows)}")
        for source, cells in self.rows.items():
            for column, verdict in cells.items():
                theirs = other.rows.get(source, {}).get(column)
                if theirs is not None and theirs != verdict:
                    out.append(f"{source} -> {column}: {verdict}, {theirs}")
        return out


def parse(text: str) -> Table:
    """A table written as markdown (Table.markdown, or by hand: pipes, a header, yes/no cells)."""
    lines = [line.strip().strip("|") for line in text.strip().splitlines()]
    rows = [[cell.strip() for cell in line.split("|")] for line in lines if not set(line) <= set("-| ")]
    header, body = rows[0], rows[1:]
    table = {}
    for row in body:
        if len(row) != len(header):
            raise PolicyTableError(f"row {row[0]!r}: {len(row)} cells under {len(header)} headings")
        bad = [cell for cell in row[1:] if cell not in (YES, NO, SOME)]
        if bad:
            raise PolicyTableError(f"row {row[0]!r}: cells {bad} are none of {YES}, {NO}, {SOME}")
        table[row[0]] = dict(zip(header[1:], row[1:], strict=True))
    return Table(tuple(header[1:]), table)


def _container_ports(pod_spec: dict[str, Any]) -> dict[str, int]:
    """Named TCP ports of every container: what a NetworkPolicy's named port resolves to."""
    return {
        p["name"]: int(p["containerPort"])
        for c in pod_spec.get("containers") or []
        for p in c.get("ports") or []
        if p.get("name") and p.get("protocol", "TCP") == "TCP"
    }


def _pod(name: str, namespace: str, labels: dict[str, str], spec: dict[str, Any]) -> Endpoint:
    return Endpoint(name, namespace, dict(labels), {}, _container_ports(spec), "", bool(spec.get("hostNetwork")))


def _template_pod(name: str, obj: dict[str, Any], template: dict[str, Any]) -> Endpoint:
    return _pod(name, obj["metadata"]["namespace"], template["metadata"]["labels"], template["spec"])


def _modelserving_pods(obj: dict[str, Any]) -> list[Endpoint]:
    """The entry pod, and a worker where the role has workers, of each role, as Kthena makes
    and labels them (support/kthena_pods.py)."""
    namespace = obj["metadata"]["namespace"]
    pods, seen = [], set()
    for identity in kthena_pods.expected_pods(obj):
        if (identity.role, identity.index > 0) in seen:
            continue
        seen.add((identity.role, identity.index > 0))
        role = next(r for r in obj["spec"]["template"]["roles"] if r["name"] == identity.role)
        spec = (role["workerTemplate"] if identity.index else role["entryTemplate"])["spec"]
        labels = kthena_pods.pod_labels(obj, replace(identity, namespace=namespace))
        pods.append(_pod(labels[COMPONENT] + (" worker" if identity.index else ""), namespace, labels, spec))
    return pods


def chart_pods(objects: list[dict[str, Any]]) -> list[Endpoint]:
    """One pod of each kind the rendered objects make, named by its component label: the
    engines, then the proxy, the helm test pod, the canary CronJob's and the benchmark Job's."""
    kinds: dict[str, list[Endpoint]] = {k: [] for k in ("ModelServing", "Deployment", "Pod", "CronJob", "Job")}
    for obj in objects:
        kind = obj["kind"]
        if kind == "ModelServing":
            kinds[kind] += _modelserving_pods(obj)
        elif kind in ("Deployment", "Job", "CronJob"):
            template = obj["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else obj["spec"]["template"]
            kinds[kind].append(_template_pod(template["metadata"]["labels"][COMPONENT], obj, template))
        elif kind == "Pod":
            kinds[kind].append(_template_pod(obj["metadata"]["labels"][COMPONENT], obj, obj))
    pods = [pod for group in kinds.values() for pod in group]
    names = [p.name for p in pods]
    if len(set(names)) != len(names):
        raise PolicyTableError(f"two chart pods share a component label: {sorted(names)}; name them apart")
    return pods


def outside_sources(pods: list[Endpoint], kthena_namespace: str = "kthena-system") -> list[Endpoint]:
    """The callers around a release: strangers, Kthena's pods, the PodMonitor's Prometheus, pods of
    another release of the chart, impostors wearing trusted labels elsewhere, and the Internet.
    The other release's pods are this release's prefill and proxy pods with another instance (and
    ModelServing)."""
    namespace = next(p.namespace for p in pods)

    # Kthena v1.0.0's chart (charts/kthena/charts/{networking,workload}/templates/...
    # deployment.yaml and charts/kthena/templates/_helpers.tpl): its subcharts' names and
    # component labels, installed as release `kthena`.
    def kthena(subchart: str, component: str) -> dict[str, str]:
        return {
            COMPONENT: component,
            "helm.sh/chart": f"{subchart}-1.0.0",
            "app.kubernetes.io/name": subchart,
            INSTANCE: "kthena",
            "app.kubernetes.io/version": "1.0.0",
            "app.kubernetes.io/managed-by": "Helm",
        }

    # The Prometheus Operator's pods of a Prometheus named as kube-prometheus-stack names it
    # (prometheus-operator pkg/prometheus/server/statefulset.go, makeStatefulSetSpec).
    prometheus_name = "kube-prometheus-stack-prometheus"
    prometheus = {
        "app.kubernetes.io/name": "prometheus",
        "app.kubernetes.io/managed-by": "prometheus-operator",
        INSTANCE: prometheus_name,
        "prometheus": prometheus_name,
        "operator.prometheus.io/name": prometheus_name,
        "operator.prometheus.io/shard": "0",
    }
    router = kthena("networking", "kthena-router")
    sources = [
        Endpoint("pod in the release namespace", namespace, {"app": "other"}),
        Endpoint("pod in namespace clients", "clients", {"app": "chat-ui"}),
        Endpoint("pod in another namespace", "elsewhere", {"app": "other"}),
        Endpoint("Kthena router", kthena_namespace, router),
        Endpoint("Kthena controller-manager", kthena_namespace, kthena("workload", "kthena-controller-manager")),
        Endpoint("Prometheus", "monitoring", prometheus),
        Endpoint("Kthena router labels, release namespace", namespace, router),
        Endpoint("Prometheus labels, another namespace", "elsewhere", {"app.kubernetes.io/name": "prometheus"}),
    ]
    by_component = {p.labels.get(COMPONENT): p for p in pods}
    for component in ("prefill", "proxy"):
        if component in by_component:
            mine = by_component[component]
            other = dict(mine.labels)
            for key in (INSTANCE, f"{engines.KTHENA}/name", f"{engines.KTHENA}/group-name"):
                if key in other:
                    other[key] = f"other-{other[key]}"
            sources.append(Endpoint(f"{component} of another release", namespace, other))
    sources.append(Endpoint("outside the cluster", ip=OUTSIDE_IP))
    return sources


@functools.cache
def binary() -> Path:
    """The built program; refused when missing or built from other sources than cluster/policytable
    holds (the program embeds its main.go, go.mod and go.sum and prints their SHA-256 with
    --sources: make cluster-tools reuses a built folder whatever its sources say)."""
    path = build.components()["policytable"].binary("policytable")
    if not path.is_file():
        raise PolicyTableError(f"{path} missing: run `make cluster-tools` (cluster/components.yaml, policytable)")
    proc = subprocess.run([str(path), "--sources"], capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    built = json.loads(proc.stdout) if proc.returncode == 0 else {}
    here = {name: hashlib.sha256((PROGRAM_DIR / name).read_bytes()).hexdigest() for name in built or ("main.go",)}
    if not built or built != here:
        raise PolicyTableError(
            f"{path} was built from other sources than {PROGRAM_DIR}: remove {path.parent} and run `make cluster-tools`"
        )
    return path


def ask(
    policies: list[dict[str, Any]], pods: list[Endpoint], sources: list[Endpoint], probes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The program's verdicts, one per probe ({source, pod, port}), in order."""
    payload = {
        "policies": policies,
        "pods": [p.as_json() for p in pods],
        "sources": [s.as_json() for s in sources],
        "probes": probes,
    }
    try:
        proc = subprocess.run(
            [str(binary())],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PolicyTableError(f"policytable ran over {TIMEOUT_SECONDS} s") from None
    if proc.returncode != 0:
        raise PolicyTableError(proc.stderr.strip() or f"policytable exited {proc.returncode}")
    verdicts: list[dict[str, Any]] = json.loads(proc.stdout)["verdicts"]
    if len(verdicts) != len(probes):
        raise PolicyTableError(f"policytable answered {len(verdicts)} probes of {len(probes)}")
    return verdicts


def destinations(pods: Iterable[Endpoint]) -> list[tuple[Endpoint, str, int]]:
    """(pod, port name, port) for every port a chart pod serves, and OTHER_PORTS on engines."""
    out = []
    for pod in pods:
        if not pod.ports:
            continue
        if pod.host_network:
            raise PolicyTableError(
                f"{pod.name}: runs on the host network (engine.hostNetwork), where NetworkPolicy polices "
                "nothing (Kubernetes network-policies docs, 'NetworkPolicy and hostNetwork pods'); render "
                "with engine.hostNetwork: false, or the cpu profile (chart/ci/cpu-values.yaml)"
            )
        out += [(pod, name, number) for name, number in pod.ports.items()]
        if pod.labels.get(engines.KTHENA + "/role"):
            out += [(pod, OTHER, number) for number in OTHER_PORTS]
    return out


def connectivity(objects: list[dict[str, Any]], policies: list[dict[str, Any]] | None = None) -> Table:
    """Every source (the chart's pods, then outside_sources) against every destination port of
    the chart's pods, under `policies` (default: the rendered NetworkPolicies)."""
    pods = chart_pods(objects)
    if policies is None:
        policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    sources = pods + outside_sources(pods)
    targets = destinations(pods)
    probes = [{"source": s.name, "pod": pod.name, "port": number} for s in sources for pod, _, number in targets]
    verdicts = iter(ask(policies, pods, sources, probes))
    columns = [f"{pod.name}:{re.sub(r'-[0-9]+$', '-*', name)}" for pod, name, _ in targets]
    rows: dict[str, dict[str, str]] = {}
    for source in sources:
        seen: dict[str, set[bool]] = {}
        for column in columns:
            seen.setdefault(column, set()).add(bool(next(verdicts)["allowed"]))
        rows[source.name] = {c: YES if v == {True} else NO if v == {False} else SOME for c, v in seen.items()}
    return Table(tuple(dict.fromkeys(columns)), rows)
