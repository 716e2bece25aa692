"""Whether the release fits: nodes with the profile's device resource, one serving group's pods on
the nodes' free allocatable (clusterfit), and the namespace's ResourceQuotas against all of the
release's pods."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from mooncake_pd import clusterfit, profiles
from mooncake_pd.clusterdryrun import group_pods, role_key, workload_pod
from mooncake_pd.clusterreport import (
    Finding,
    Report,
)


def device_resource(pods: list[dict[str, Any]]) -> str | None:
    """The accelerator profile's device resource the pods request (profiles.yaml resourceName)."""
    names = {row["resourceName"] for row in profiles.load()["accelerators"].values() if row["resourceName"]}
    for pod in pods:
        for name in clusterfit.pod_requests(pod["spec"]):
            if name in names:
                return name
    return None


def describe(requests: clusterfit.Resources) -> str:
    return ", ".join(
        f"{name} {clusterfit.show(name, amount)}" for name, amount in sorted(requests.items()) if name != "pods"
    )


def fit_findings(
    modelserving: dict[str, Any], node_objects: list[dict[str, Any]], pod_objects: list[dict[str, Any]], report: Report
) -> None:
    """Device nodes, one group's fit now, and how many groups fit against servingGroups."""
    first = group_pods(modelserving, 0)
    nodes = clusterfit.nodes_now(node_objects, pod_objects)
    device = device_resource(first)
    if device is not None:
        with_device = [n for n in nodes if n.allocatable.get(device, Decimal(0)) > 0]
        if not with_device:
            advertised: dict[str, int] = {}
            for name in {
                row["resourceName"] for row in profiles.load()["accelerators"].values() if row["resourceName"]
            }:
                count = sum(1 for n in nodes if n.allocatable.get(name, Decimal(0)) > 0)
                if count:
                    advertised[name] = count
            seen = ", ".join(f"{k} on {v} node(s)" for k, v in sorted(advertised.items())) or "no accelerator resource"
            report.findings.append(
                Finding(
                    "accelerator.type",
                    f"no node advertises {device} (status.allocatable); the nodes advertise {seen}",
                    "install the device plugin that advertises it (README, 'Install a device plugin'), "
                    "or set accelerator.type to the accelerator the nodes have",
                )
            )
            return
    wanted = int(modelserving["spec"].get("replicas", 1))
    fit = clusterfit.groups_that_fit(
        lambda g: [clusterfit.Pod.of(p) for p in group_pods(modelserving, g)], nodes, max(wanted, 1) * 4 + 4
    )
    report.groups_fit = fit.groups
    pods_text = f"{len(first)} pod(s)"
    if fit.groups == 0 and fit.unplaced is not None:
        role = fit.unplaced.labels.get("modelserving.volcano.sh/role", "")
        key = role_key(modelserving, role) if role else "servingGroups"
        report.findings.append(
            Finding(
                f"{key}.resources",
                f"one serving group's {pods_text} (Volcano places all of them or none) do not fit the nodes' free "
                f"allocatable now: pod {fit.unplaced.name} (requests {describe(fit.unplaced.requests)}) finds no node: "
                f"{fit.reason_text()}",
                f"free or add nodes, or lower {key}.resources and {key}.parallelism",
            )
        )
    elif fit.groups < wanted:
        report.findings.append(
            Finding(
                "servingGroups",
                f"{wanted} serving groups asked for, {fit.groups} fit the nodes' free allocatable now "
                f"(the next one's pod {fit.unplaced.name if fit.unplaced else '?'}: {fit.reason_text()})",
                f"set servingGroups to at most {fit.groups}, or free or add nodes",
            )
        )
    else:
        more = "" if fit.unplaced is None else f" ({fit.groups} in all fit now)"
        report.notes.append(f"{wanted} serving group(s) of {pods_text} fit the nodes' free allocatable{more}")


def release_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the release runs at once: every serving group's, and each Deployment's replicas."""
    pods = []
    for obj in objects:
        if obj["kind"] == "ModelServing":
            for group in range(int(obj["spec"].get("replicas", 1))):
                pods += group_pods(obj, group)
        elif obj["kind"] == "Deployment":
            pod = workload_pod(obj)
            if pod is not None:
                pods += [pod] * int(obj["spec"].get("replicas", 1))
    return pods


def quota_need(pods: list[dict[str, Any]], resource: str) -> Decimal | None:
    """What the pods count against a quota's hard `resource` (pods, cpu, requests.*, limits.*);
    None for what this does not count (object counts, storage)."""
    if resource == "pods":
        return Decimal(len(pods))
    if resource in ("cpu", "memory"):
        name, limits = resource, False
    elif resource.startswith("requests."):
        name, limits = resource.removeprefix("requests."), False
    elif resource.startswith("limits."):
        name, limits = resource.removeprefix("limits."), True
    else:
        return None
    if name == "storage" or name.startswith("count/"):
        return None
    return sum((clusterfit.pod_requests(p["spec"], limits).get(name, Decimal(0)) for p in pods), Decimal(0))


def quota_findings(quotas: list[dict[str, Any]], pods: list[dict[str, Any]], report: Report) -> None:
    """Each ResourceQuota without scopes against all of the release's pods at once (kubernetes
    v1.34.2 pkg/quota/v1/evaluator/core/pods.go: requests.*, limits.*, pods)."""
    for quota in quotas:
        spec = quota.get("spec") or {}
        name = quota["metadata"]["name"]
        if spec.get("scopes") or spec.get("scopeSelector"):
            report.notes.append(f"ResourceQuota {name} has scopes: left to the dry run")
            continue
        used = clusterfit.resources((quota.get("status") or {}).get("used"))
        for resource, hard_text in sorted((spec.get("hard") or {}).items()):
            need = quota_need(pods, resource)
            if not need:
                continue
            hard = clusterfit.quantity(hard_text)
            have = used.get(resource, Decimal(0))
            if have + need > hard:
                unit = resource.split(".", 1)[-1]
                report.findings.append(
                    Finding(
                        f"resources (ResourceQuota {name})",
                        f"the release's {len(pods)} pods together count {clusterfit.show(unit, need)} of {resource}, "
                        f"and the quota has {clusterfit.show(unit, max(hard - have, Decimal(0)))} of "
                        f"{clusterfit.show(unit, hard)} left",
                        f"raise the quota's {resource} to at least {clusterfit.show(unit, have + need)}, "
                        "or lower the roles' resources or servingGroups",
                    )
                )
