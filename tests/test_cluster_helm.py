"""helm against the local cluster, helm 3 and helm 4 (issue #25 item 4): install, upgrade,
rollback and uninstall, with Kthena v1.0.0's controller reconciling the ModelServing and the
scheduler binding its pods to KWOK nodes shaped like the accelerators'. What the chart and
tests/support (PodIdentity, localpods) assume of the pods Kthena creates is checked against the
pods it did create: names, labels, injected env, Services, PodGroups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import helm, manifests, paths
from mooncake_pd.engines import PodIdentity
from support.kthena_pods import expected_pods, matches
from support.kube.api import pods_brief, wait_for
from support.kube.cluster import PROFILE_LABEL, node_objects
from support.kube.releases import SETTLE_TIMEOUT, Helm, pods_of, wait_gone, wait_pods

pytestmark = pytest.mark.cluster
RELEASE = paths.RELEASE
KTHENA = "modelserving.volcano.sh"


def _helm(cluster, version: str, tmp_path: Path) -> Helm:
    return Helm(cluster, version, tmp_path / f"helm-{version}")


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", []) if "value" in e}


def check_pods(
    api, namespace: str, modelserving: dict[str, Any], accelerator: str | None, policy: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The pods Kthena made for the rendered ModelServing (and its AutoscalingPolicy, if any) are
    what PodIdentity says: one per entry and worker, named, labelled and given the env it assumes;
    all bound to nodes of the values' accelerator, when it has a device."""
    want = {p.name: p for p in expected_pods(modelserving, policy)}
    pods = wait_pods(api, namespace, modelserving["metadata"]["name"], set(want))
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"][PROFILE_LABEL] for n in node_objects()}
    for pod in pods:
        identity: PodIdentity = want[pod["metadata"]["name"]]
        identity = PodIdentity(**{**identity.__dict__, "namespace": namespace})
        labels = pod["metadata"]["labels"]
        for key, value in identity.labels().items():
            assert key in labels, (pod["metadata"]["name"], key)
            if not key.endswith("/revision"):
                assert labels[key] == value, (pod["metadata"]["name"], key, labels[key], value)
        if identity.index != 0:
            assert f"{KTHENA}/entry" not in labels
        for container in pod["spec"]["containers"]:
            env = _env(container)
            for name, value in identity.injected_env().items():
                assert env.get(name) == value, (pod["metadata"]["name"], container["name"], name, env.get(name))
        if accelerator:
            node = pod["spec"].get("nodeName")
            assert node and nodes[node] == accelerator, (pod["metadata"]["name"], node)
    return pods


def check_services(
    api, namespace: str, ms: dict[str, Any], pods: list[dict[str, Any]], policy: dict[str, Any] | None = None
) -> None:
    """Kthena's own Services are what facts.md says: for a role with workers, one headless
    Service per role replica, named like its entry pod (ENTRY_ADDRESS resolves through it),
    selecting that entry pod and owned by the ModelServing; none for a single-pod role."""
    entries = {p.name: p for p in expected_pods(ms, policy) if p.index == 0 and p.workers > 0}

    def owned_services() -> dict[str, dict[str, Any]]:
        return {
            s["metadata"]["name"]: s
            for s in api.list("v1", "Service", namespace)
            if any(o["kind"] == "ModelServing" for o in s["metadata"].get("ownerReferences", []))
        }

    # The controller creates them after the pods (its reconcile order, model_serving_controller.go).
    def complete() -> dict[str, dict[str, Any]] | None:
        found = owned_services()
        return found if set(found) == set(entries) else None

    # The same reconcile as the pods, so the pods' bound (SETTLE_TIMEOUT); on time out the assert
    # below names what there was.
    try:
        owned = wait_for("Kthena's headless Services", complete, SETTLE_TIMEOUT)
    except TimeoutError:
        owned = owned_services()
    assert set(owned) == set(entries), (sorted(owned), sorted(entries))
    by_name = {p["metadata"]["name"]: p for p in pods}
    for name, service in owned.items():
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        labels = by_name[name]["metadata"]["labels"]
        assert matches(service["spec"]["selector"], labels), (name, service["spec"])
        for pod in pods:
            if pod["metadata"]["labels"][f"{KTHENA}/role-id"] == labels[f"{KTHENA}/role-id"]:
                assert _env(pod["spec"]["containers"][0])["ENTRY_ADDRESS"] == f"{name}.{namespace}"


def _accelerator(objects: list[dict[str, Any]]) -> str | None:
    """The profile whose device the engines request (None for the CPU profile)."""
    ms = manifests.one(objects, "ModelServing")
    limits = ms["spec"]["template"]["roles"][0]["entryTemplate"]["spec"]["containers"][0]["resources"]["limits"]
    for node in node_objects():
        for resource in node["status"]["capacity"]:
            if "/" in resource and resource in limits:
                return str(node["metadata"]["labels"][PROFILE_LABEL])
    return None


@pytest.mark.parametrize("version", paths.HELM_VERSIONS, ids=lambda v: f"helm{v[0]}")
def test_install_upgrade_rollback_uninstall(cluster, version: str, tmp_path: Path):
    api = cluster.client()
    runner = _helm(cluster, version, tmp_path)
    namespace = f"lifecycle-helm{version[0]}"
    runner.install(RELEASE, namespace)
    objects = runner.manifest(RELEASE, namespace)
    ms = manifests.one(objects, "ModelServing")
    first = check_pods(api, namespace, ms, "ascend-a3")
    revision = {p["metadata"]["labels"][f"{KTHENA}/revision"] for p in first}
    assert len(revision) == 1

    # One PodGroup per serving group (Volcano's CRD is installed and schedulerName is volcano).
    groups = api.list("scheduling.volcano.sh/v1beta1", "PodGroup", namespace)
    assert sorted(g["metadata"]["name"] for g in groups) == [f"{RELEASE}-0"]
    assert groups[0]["spec"]["minMember"] == len(first)

    # An upgrade that changes a start script rolls the pods to a new revision.
    runner.upgrade(RELEASE, namespace, sets=("decode.args.max-num-seqs=4",))
    upgraded = manifests.one(runner.manifest(RELEASE, namespace), "ModelServing")

    def rolled() -> bool:
        pods = pods_of(api, namespace, RELEASE)
        revisions = {p["metadata"]["labels"][f"{KTHENA}/revision"] for p in pods}
        return len(pods) == len(first) and revisions.isdisjoint(revision)

    wait_for("pods on the upgraded revision", rolled, ROLL_TIMEOUT, seen=lambda: pod_revisions(api, namespace))
    check_pods(api, namespace, upgraded, "ascend-a3")

    # A rollback returns the ModelServing to the first release's spec, and the pods to its revision.
    runner.rollback(RELEASE, namespace, 1)
    live = api.get(*("workload.serving.volcano.sh/v1alpha1", "ModelServing"), RELEASE, namespace)
    assert live["spec"]["template"]["roles"] == api_roles(api, ms, namespace)
    wait_for("pods back on the first revision", lambda: {
        p["metadata"]["labels"][f"{KTHENA}/revision"] for p in pods_of(api, namespace, RELEASE)
    } == revision, ROLL_TIMEOUT, seen=lambda: f"{pod_revisions(api, namespace)}; want {revision}")  # fmt: skip

    runner.uninstall(RELEASE, namespace)
    wait_gone(api, namespace, RELEASE)


# Pods of a rolled revision in place of the old (Kthena deletes the group and creates it anew,
# KWOK runs it at once). Measured: group 1 of a two-group rollout went and came back between the
# snapshots kept at 1.6 s and 2.2 s into the upgrade (dc07272, out/cluster-recovery.json). 90 s
# is the recovery tests' bound for a whole rollout (upgrade_watching), for a loaded machine.
ROLL_TIMEOUT = 90.0


def pod_revisions(api, namespace: str) -> str:
    """The release's pods and their revisions, for a wait's message."""
    pods = pods_of(api, namespace, RELEASE)
    return (
        ", ".join(
            f"{p['metadata']['name']} {p['metadata']['labels'].get(f'{KTHENA}/revision', '?')[:10]}"
            + (" terminating" if p["metadata"].get("deletionTimestamp") else "")
            for p in pods
        )
        or "no pods"
    )


def api_roles(api, ms: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The roles as the API server stores the rendered object (with the CRD's defaults)."""
    return api.apply({**ms, "metadata": {**ms["metadata"], "namespace": namespace}}, dry_run=True)["spec"]["template"][
        "roles"
    ]


PRESETS = sorted(paths.VALUES_DIR.glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_installs_and_its_pods_land_on_its_accelerator(cluster, preset: Path, tmp_path: Path):
    api = cluster.client()
    runner = _helm(cluster, paths.DEFAULT_HELM_VERSION, tmp_path)
    # A namespace per preset: Kthena v1.0.0 can keep a deleted ModelServing's serving groups in
    # its memory (a sync already under way when the delete came adds them back) and then makes no
    # pods for the next one of the same namespace and name (docs/troubleshooting.md #12).
    namespace = f"preset-{PRESETS.index(preset)}"
    objects = manifests.parse(helm.template(paths.helm_binary(), (preset,)))
    runner.install(RELEASE, namespace, preset)
    try:
        ms = manifests.one(objects, "ModelServing")
        # An autoscaled role starts at 1 replica and Kthena's autoscaler raises it to its
        # minReplicas at its first reconcile, with no metrics at all (kthena_pods.settled_replicas):
        # the latency-first preset settles at 2 + 2 pods, up to 15 s after the first 1 + 1.
        policy = next(iter(manifests.find(objects, "AutoscalingPolicy")), None)
        # check_pods waits for every pod bound: a pod the nodes cannot hold fails that wait, named
        # with its scheduling state.
        pods = check_pods(api, namespace, ms, _accelerator(objects), policy)
        check_services(api, namespace, ms, pods, policy)
    finally:
        runner.uninstall(RELEASE, namespace)
        wait_gone(api, namespace, RELEASE)


def test_pods_that_fit_no_node_stay_pending(cluster, tmp_path: Path):
    """Where the chart cannot know the node (memory, CPU), the scheduler says so: a prefill that
    asks for more memory than an A3 node has stays Pending, Unschedulable, and decode runs."""
    api = cluster.client()
    runner = _helm(cluster, paths.DEFAULT_HELM_VERSION, tmp_path)
    namespace = "too-big"
    sets = ("prefill.resources.requests.memory=1600Gi", "prefill.resources.limits.memory=1600Gi")
    runner.install(RELEASE, namespace, sets=sets)
    try:

        def unschedulable() -> dict[str, Any] | None:
            pod = api.get("v1", "Pod", f"{RELEASE}-0-prefill-0-0", namespace)
            conditions = {c["type"]: c for c in pod["status"].get("conditions", [])}
            scheduled = conditions.get("PodScheduled", {})
            return pod if scheduled.get("reason") == "Unschedulable" else None

        def release_pods() -> str:
            return pods_brief(pods_of(api, namespace, RELEASE))

        # kube-scheduler judges a pod as soon as it sees it: the pods' bound.
        pod = wait_for("prefill Unschedulable", unschedulable, SETTLE_TIMEOUT, seen=release_pods)
        message = {c["type"]: c for c in pod["status"]["conditions"]}["PodScheduled"]["message"]
        assert "Insufficient memory" in message, message

        # Kthena creates decode's pod beside prefill's, not always before prefill is judged.
        def decode_running() -> dict[str, Any] | None:
            pod = api.get("v1", "Pod", f"{RELEASE}-0-decode-0-0", namespace)
            return pod if pod["status"].get("phase") == "Running" else None

        decode = wait_for("decode Running", decode_running, SETTLE_TIMEOUT, seen=release_pods)
        assert decode["spec"].get("nodeName") and decode["status"]["phase"] == "Running"
    finally:
        runner.uninstall(RELEASE, namespace)
        wait_gone(api, namespace, RELEASE)
