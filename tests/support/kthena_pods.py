"""The pods Kthena creates for a ModelServing, as the tests model them (facts.md)."""

from __future__ import annotations

from mooncake_pd.engines import PodIdentity


def pod_labels(modelserving: dict, pod: PodIdentity) -> dict[str, str]:
    """A pod's labels on the cluster: Kthena's, then its role template's on top.

    kthena v1.0.0 pkg/model-serving-controller/utils/utils.go: GenerateEntryPod and
    GenerateWorkerPod build the pod with Kthena's labels (createBasePod), then copy the
    template's metadata labels over them (addPodLabelAndAnnotation).
    """
    role = next(r for r in modelserving["spec"]["template"]["roles"] if r["name"] == pod.role)
    template = role["entryTemplate"] if pod.index == 0 else role.get("workerTemplate") or {}
    return {**pod.labels(), **(template.get("metadata") or {}).get("labels", {})}


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """An equality selector (a Service's, matchLabels) against a pod's labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def selects(service: dict, pod: PodIdentity, modelserving: dict) -> bool:
    """Whether the Service's selector matches the pod as Kthena creates it from the ModelServing."""
    return matches(service["spec"]["selector"], pod_labels(modelserving, pod))


def settled_replicas(role: dict, policy: dict | None = None) -> int:
    """A role's replicas once Kthena has settled it with no load on its pods.

    Without `replicas` (the autoscaler owns them) the CRD defaults them to 1 at create; Kthena
    v1.0.0's autoscaler then raises a role below its policy's minReplicas to that minimum on its
    first reconcile (every 15 s, util/settings.go AutoscalingSyncPeriodSeconds), metrics or not:
    GetRecommendedInstances returns MinInstances before it reads any metric
    (pkg/autoscaler/algorithm/recommendation.go). With no metrics it then scales no further.
    """
    if "replicas" in role:
        return int(role["replicas"])
    roles = ((policy or {}).get("spec", {}).get("disaggregatedTarget") or {}).get("roles") or {}
    return max(1, int(roles.get(role["name"], {}).get("minReplicas", 1)))


def expected_pods(modelserving: dict, policy: dict | None = None) -> list[PodIdentity]:
    """Every pod (entry and workers) Kthena creates for the ModelServing, with the
    AutoscalingPolicy that targets it, if any, once settled (settled_replicas)."""
    name = modelserving["metadata"]["name"]
    spec = modelserving["spec"]
    return [
        PodIdentity(name, g, role["name"], r, i, workers=role["workerReplicas"])
        for g in range(spec["replicas"])
        for role in spec["template"]["roles"]
        for r in range(settled_replicas(role, policy))
        for i in range(role["workerReplicas"] + 1)
    ]
