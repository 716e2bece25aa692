"""The pods the controllers will create from the rendered templates (Kthena's entry and worker
pods, a Deployment's, a Job's), and the API server's dry-run refusals as findings with their
fix."""

from __future__ import annotations

import re
from typing import Any

from mooncake_pd.clusterreport import (
    BASELINE_CHECKS,
    WORKLOAD_KEYS,
    Api,
    Finding,
    Report,
)
from mooncake_pd.engines import PodIdentity


def role_key(modelserving: dict[str, Any], role_name: str) -> str:
    """The values section of a role: the chart renders prefill first and decode last."""
    names = [r["name"] for r in modelserving["spec"]["template"]["roles"]]
    if role_name == names[0]:
        return "prefill"
    if role_name == names[-1]:
        return "decode"
    return role_name


def kthena_pod(
    modelserving: dict[str, Any], role: dict[str, Any], group: int, replica: int, index: int
) -> dict[str, Any]:
    """The Pod Kthena v1.0.0 creates for (group, role replica, index): its labels, then the
    template's metadata over them, the template's spec with the ModelServing's schedulerName
    (utils.go GenerateEntryPod, GenerateWorkerPod, createBasePod, addPodLabelAndAnnotation)."""
    metadata = modelserving["metadata"]
    identity = PodIdentity(
        metadata["name"], group, role["name"], replica, index, workers=int(role.get("workerReplicas", 0))
    )
    template = role["entryTemplate"] if index == 0 else role.get("workerTemplate") or role["entryTemplate"]
    template_meta = template.get("metadata") or {}
    spec = dict(template["spec"])
    scheduler = modelserving["spec"].get("schedulerName")
    if scheduler:
        spec["schedulerName"] = scheduler
    pod_meta: dict[str, Any] = {
        "name": identity.name,
        "namespace": metadata.get("namespace", "default"),
        "labels": {**identity.labels(), **(template_meta.get("labels") or {})},
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def group_pods(modelserving: dict[str, Any], group: int) -> list[dict[str, Any]]:
    """Every pod of one serving group: each role's replicas, entry and workers (a role whose
    replicas the autoscaler owns counts one, the CRD's default)."""
    return [
        kthena_pod(modelserving, role, group, replica, index)
        for role in modelserving["spec"]["template"]["roles"]
        for replica in range(int(role.get("replicas", 1)))
        for index in range(int(role.get("workerReplicas", 0)) + 1)
    ]


def workload_pod(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Pod a Deployment's ReplicaSet, a Job or a CronJob's Job creates from its template."""
    if obj["kind"] in ("Deployment", "Job"):
        template = obj["spec"]["template"]
    elif obj["kind"] == "CronJob":
        template = obj["spec"]["jobTemplate"]["spec"]["template"]
    else:
        return None
    metadata = {
        **(template.get("metadata") or {}),
        "name": f"{obj['metadata']['name']}-preflight",
        "namespace": obj["metadata"].get("namespace", "default"),
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def pods_to_dry_run(objects: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(values key, who creates it, Pod) for each distinct pod template: one entry pod per role
    and one worker where a role has workers, one pod per other workload."""
    found = []
    for obj in objects:
        if obj["kind"] == "ModelServing":
            for role in obj["spec"]["template"]["roles"]:
                for index in range(min(int(role.get("workerReplicas", 0)), 1) + 1):
                    pod = kthena_pod(obj, role, 0, 0, index)
                    found.append(
                        (role_key(obj, role["name"]), f"Kthena from ModelServing {obj['metadata']['name']}", pod)
                    )
        else:
            made = workload_pod(obj)
            if made is not None:
                found.append(
                    (WORKLOAD_KEYS.get(obj["kind"], obj["kind"]), f"{obj['kind']} {obj['metadata']['name']}", made)
                )
    return found


def refusal_fix(key: str, message: str, namespace: str) -> str:
    """How to get past a refusal, by the admission step that refused."""
    if "violates PodSecurity" in message:
        level = "privileged" if any(check in message for check in BASELINE_CHECKS) else "baseline"
        return (
            f"the namespace's Pod Security level refuses these pods: label it "
            f"(kubectl label namespace {namespace} pod-security.kubernetes.io/enforce={level} --overwrite) "
            f"or use values that need less (docs/troubleshooting.md, 'Pod Security admission')"
        )
    if "exceeded quota" in message:
        return f"raise the ResourceQuota named in namespace {namespace}, or lower {key}.resources"
    if "ValidatingAdmissionPolicy" in message:
        return (
            f"meet the cluster's policy (a label or annotation it wants: {key}.podLabels or {key}.podAnnotations "
            f"where the pods are the chart's), or ask the policy's owner for an exception"
        )
    if "admission webhook" in message:
        return "meet the webhook's rule (its message above says which), or ask its owner for an exception"
    if "LimitRange" in message or re.search(r"(maximum|minimum) \S+ usage per (Container|Pod)", message):
        return f"keep {key}.resources within the namespace's LimitRange, or ask for a larger one"
    return "change the values that render it until the cluster admits it"


def dry_run_findings(api: Api, objects: list[dict[str, Any]], namespace: str, report: Report) -> None:
    for obj in objects:
        message = api.dry_run(obj)
        if message is not None:
            key = WORKLOAD_KEYS.get(obj["kind"]) if obj["kind"] != "ModelServing" else "kthena.version"
            what = f"{obj['kind']}/{obj['metadata']['name']}"
            report.findings.append(
                Finding(
                    f"{key} ({what})" if key else what,
                    f"the cluster refuses it: {message}",
                    refusal_fix(key or what, message, namespace),
                )
            )
    for key, creator, pod in pods_to_dry_run(objects):
        message = api.dry_run(pod)
        if message is not None:
            report.findings.append(
                Finding(
                    f"{key} (Pod {pod['metadata']['name']}, created by {creator})",
                    f"the cluster refuses it: {message}",
                    refusal_fix(key, message, namespace),
                )
            )
