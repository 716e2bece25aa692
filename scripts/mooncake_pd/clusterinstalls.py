"""What must be installed before the release: the CRD of every kind rendered, the ModelServing
CRD's schema against kthena.version, Volcano's PodGroup and queue, and the scheduler the pods
name."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from mooncake_pd import clusterfit, manifests, paths, profiles
from mooncake_pd.clusterreport import (
    INSTALLS,
    KTHENA_VERSION_ANNOTATION,
    MODELSERVING_CRD,
    PODGROUP,
    QUEUE,
    QUEUE_ANNOTATION,
    SCHEDULER_FLAG,
    Api,
    Finding,
    Report,
)


def schema_of(crd: dict[str, Any], version: str = "v1alpha1") -> Any:
    for entry in crd.get("spec", {}).get("versions") or []:
        if entry.get("name") == version:
            return (entry.get("schema") or {}).get("openAPIV3Schema")
    return None


@functools.cache
def vendored_schemas() -> dict[str, Any]:
    """Kthena version -> its ModelServing CRD's schema, from the vendored CRDs."""
    found = {}
    for version in profiles.kthena_versions():
        path = paths.KTHENA_CRDS / version / "workload.serving.volcano.sh_modelservings.yaml"
        found[version] = schema_of(manifests.load(path.read_text()))
    return found


def has_role_partition(schema: Any) -> bool:
    """Whether a ModelServing schema has the role-level `partition` (Kthena after v1.0.0)."""
    try:
        role = schema["properties"]["spec"]["properties"]["template"]["properties"]["roles"]["items"]
    except (KeyError, TypeError):
        return False
    return "partition" in (role.get("properties") or {})


def kthena_version_findings(crd: dict[str, Any], wanted: str, report: Report) -> None:
    """The cluster's ModelServing CRD against `kthena.version`: the version whose schema it is,
    else the one feature the versions differ in that the chart uses (profiles.yaml kthena
    rolePartition)."""
    installed = schema_of(crd)
    known = vendored_schemas()
    same = [version for version, schema in known.items() if schema == installed]
    if same:
        if wanted not in same:
            report.findings.append(
                Finding(
                    "kthena.version",
                    f"{wanted}, but the cluster's ModelServing CRD is Kthena {same[0]}'s",
                    f"set kthena.version={same[0]}, or install Kthena {wanted}",
                )
            )
        else:
            report.notes.append(f"Kthena's ModelServing CRD is {wanted}'s, as kthena.version says")
        return
    row = profiles.load()["kthena"].get(wanted) or {}
    if row.get("rolePartition") and not has_role_partition(installed):
        report.findings.append(
            Finding(
                "kthena.version",
                f"{wanted} has the role-level partition, and the cluster's ModelServing CRD has none",
                f"set kthena.version to the Kthena the cluster runs ({', '.join(known)} are known), or upgrade Kthena",
            )
        )
    else:
        report.notes.append(
            f"the cluster's ModelServing CRD is none of the Kthena versions known here ({', '.join(known)}): "
            "the dry run of the ModelServing is the check"
        )


def scheduler_evidence(name: str, pods: Iterable[dict[str, Any]]) -> str | None:
    """What shows that a scheduler of this name runs: a pod it bound (its schedulerName, bound to
    a node, not ended), or a scheduler's pod started with --scheduler-name=<name>, or Volcano's
    vc-scheduler without the flag, whose default is `volcano` (volcano v1.15.0
    cmd/scheduler/app/options/options.go, defaultSchedulerName; its chart passes
    --scheduler-name, installer/helm/chart/volcano/templates/scheduler.yaml)."""
    for pod in pods:
        spec = pod.get("spec") or {}
        where = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        if clusterfit.terminal(pod):
            continue
        if spec.get("schedulerName") == name and spec.get("nodeName"):
            return f"pod {where} was bound by it"
        for container in spec.get("containers") or []:
            words = [*(container.get("command") or []), *(container.get("args") or [])]
            names = []
            for i, word in enumerate(words):
                m = SCHEDULER_FLAG.match(word)
                if m:
                    value = m["value"] if m["value"] is not None else (words[i + 1] if i + 1 < len(words) else "")
                    names.append(value)
            if name in names:
                return f"pod {where} runs a scheduler with --scheduler-name={name}"
            if not names and name == "volcano" and "vc-scheduler" in (container.get("image") or ""):
                return f"pod {where} runs Volcano's vc-scheduler (default name volcano)"
    return None


def install_findings(
    api: Api, objects: list[dict[str, Any]], all_pods: list[dict[str, Any]], report: Report
) -> set[str]:
    """CRDs, Kthena's version, Volcano and the scheduler; returns the kinds the cluster does not serve."""
    missing: set[str] = set()
    for obj in objects:
        kind = obj["kind"]
        if kind in missing or api.served(obj["apiVersion"], kind):
            continue
        missing.add(kind)
        key, what, fix = INSTALLS.get(kind, (kind, "its CRD", "install what serves it"))
        if kind == "ModelServing":
            wanted = (obj["metadata"].get("annotations") or {}).get(KTHENA_VERSION_ANNOTATION, paths.DEFAULT_KTHENA)
            fix = f"install Kthena {wanted} (README, 'Install Kthena')"
        report.findings.append(
            Finding(key, f"the cluster serves no {kind} ({obj['apiVersion']}): {what} is not installed", fix)
        )
    for ms in (o for o in objects if o["kind"] == "ModelServing"):
        annotations = ms["metadata"].get("annotations") or {}
        if "ModelServing" not in missing:
            crd = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", MODELSERVING_CRD)
            if crd is not None:
                kthena_version_findings(crd, annotations.get(KTHENA_VERSION_ANNOTATION, paths.DEFAULT_KTHENA), report)
        scheduler = ms["spec"].get("schedulerName") or "volcano"
        if not api.served(*PODGROUP):
            report.findings.append(
                Finding(
                    "schedulerName",
                    f"{scheduler}: the cluster serves no PodGroup (scheduling.volcano.sh): Volcano is not "
                    "installed, and Kthena then gangs no serving group (podgroupmanager/manager.go at v1.0.0)",
                    "install Volcano (README, 'Install Volcano')",
                )
            )
        elif (queue := annotations.get(QUEUE_ANNOTATION)) and api.get(*QUEUE, queue) is None:
            report.findings.append(
                Finding(
                    "volcano.queue",
                    f"the cluster has no Volcano Queue {queue}",
                    "create the queue, or set volcano.queue to one that exists (kubectl get queues)",
                )
            )
        evidence = scheduler_evidence(scheduler, all_pods)
        if evidence is None:
            report.findings.append(
                Finding(
                    "schedulerName",
                    f"no scheduler named {scheduler} is seen on the cluster (no pod it bound, no scheduler pod "
                    f"started with that name): the engine pods would stay Pending",
                    "install Volcano (README, 'Install Volcano'), "
                    "or set schedulerName to the scheduler the cluster runs",
                )
            )
        else:
            report.notes.append(f"scheduler {scheduler}: {evidence}")
    return missing
