"""The pods Kthena creates for a ModelServing, as the tests model them (facts.md)."""

from __future__ import annotations

from mooncake_pd.engines import PodIdentity


def kthena_labels(pod: PodIdentity) -> dict[str, str]:
    """The labels Kthena's controller puts on a pod (facts.md)."""
    return pod.labels()


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """An equality selector (a Service's, matchLabels) against a pod's labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def selects(service: dict, pod: PodIdentity) -> bool:
    return matches(service["spec"]["selector"], kthena_labels(pod))


def expected_pods(modelserving: dict) -> list[PodIdentity]:
    """Every pod (entry and workers) Kthena creates for the ModelServing."""
    name = modelserving["metadata"]["name"]
    spec = modelserving["spec"]
    return [
        PodIdentity(name, g, role["name"], r, i, workers=role["workerReplicas"])
        for g in range(spec["replicas"])
        for role in spec["template"]["roles"]
        # Without replicas (the autoscaler owns them) the CRD defaults them to 1 at create.
        for r in range(role.get("replicas", 1))
        for i in range(role["workerReplicas"] + 1)
    ]
