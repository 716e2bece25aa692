"""The render-time refusals of the pass-through Kubernetes values (issue 39 item 2) are the API
server's own rules: each tests/bad-values/ case of validate/_volumes.tpl, _annotations.tpl, the
sidecar and name rules of _pods.tpl and _names.tpl is rendered by a copy of the chart whose
refusal is bypassed (validate-values.yaml emptied), and the local cluster's kube-apiserver
(v1.34.2) refuses what that render makes, by server-side dry-run: the Pods Kthena would create
from the ModelServing's role templates (the ModelServing itself is admitted), the proxy's
Deployment, the benchmark Job, the canary's CronJob. The proxy's PodDisruptionBudget that can
never allow a disruption is admitted: there the proof is an eviction (dry-run) of a proxy pod,
answered 429 by the API server (pkg/registry/core/pod/storage/eviction.go checkAndDecrement)
once the disruption controller has counted the pods, where maxUnavailable 1 lets it through."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import helm, manifests, paths
from support.kube.api import ApiError, Client, wait_for
from test_cluster_admission import refusals

pytestmark = pytest.mark.cluster
BAD = Path(__file__).parent / "bad-values"

# bad-values case -> (what the API server says, the kinds it refuses; "Pod" is a pod Kthena,
# a ReplicaSet or a Job would create, dry-run as a Pod; "PodTemplate" the install-time copy of an
# engine pod template, validation.podTemplates: refused there, helm install stops before the
# ModelServing, tests/test_cluster_pod_templates_judged_at_install.py).
CASES: dict[str, tuple[str, set[str]]] = {
    "extra-volume-name-not-dns1123": ('Invalid value: "Certs_Dir": a lowercase RFC 1123 label', {"Pod", "PodTemplate"}),
    "extra-volume-mode-decimal": (
        "must be a number between 0 and 0777 (octal), both inclusive",
        {"Pod", "PodTemplate"},
    ),
    "extra-volume-projected-item-mode": (
        "must be a number between 0 and 0777 (octal), both inclusive",
        {"Pod", "PodTemplate"},
    ),
    "extra-volume-host-path-type-case": (
        'hostPath.type: Unsupported value: "directoryOrCreate"',
        {"Pod", "PodTemplate"},
    ),
    "extra-mount-bidirectional-unprivileged": (
        "Bidirectional mount propagation is available only to privileged containers",
        {"Pod", "PodTemplate"},
    ),
    "extra-mount-propagation-unknown": (
        'mountPropagation: Unsupported value: "hostToContainer"',
        {"Pod", "PodTemplate"},
    ),
    "extra-container-host-port-differs": (
        "must match `containerPort` when `hostNetwork` is true",
        {"Pod", "PodTemplate"},
    ),
    "extra-container-name-not-dns1123": (
        'Invalid value: "log_shipper": a lowercase RFC 1123 label',
        {"Pod", "PodTemplate"},
    ),
    # The pre-existing cases of the same family (validate.pods). A repeated name is a duplicate
    # key of a list server-side apply merges by name: refused before validation, in the
    # ModelServing too (helm 4 applies server-side; helm 3 installs it and Kthena's pod create
    # meets ValidateVolumes' and validateContainers' "Duplicate value").
    "extra-volume-name-clash": ('duplicate entries for key [name="dshm"]', {"ModelServing", "Pod", "PodTemplate"}),
    "extra-mount-unknown-volume": ('Not found: "cache"', {"Pod", "PodTemplate"}),
    "extra-container-name-clash": ('duplicate entries for key [name="decode"]', {"ModelServing", "Pod", "PodTemplate"}),
    # podAnnotations reach every pod: the proxy's Deployment fails `helm install` halfway.
    "annotations-apparmor-container-missing": (
        'Invalid value: "prefill": container not found',
        {"Pod", "PodTemplate", "Deployment"},
    ),
    "annotations-apparmor-profile-malformed": (
        'invalid AppArmor profile name: "RuntimeDefault"',
        {"Pod", "PodTemplate"},
    ),
    "annotations-deletion-cost-not-int32": ("must be a 32bit integer", {"Pod", "Deployment"}),
    "annotations-seccomp-profile-malformed": (
        '"RuntimeDefault": must be a valid seccomp profile',
        {"Pod", "PodTemplate"},
    ),
    # The proxy, helm-test (and benchmark, canary) pods set seccompProfile RuntimeDefault.
    "annotations-seccomp-disagrees-with-field": (
        "seccomp type in annotation and field must match",
        {"Pod", "Deployment"},
    ),
    "canary-cronjob-name-too-long": ("must be no more than 52 characters", {"CronJob"}),
    "benchmark-job-name-too-long": ("must be no more than 63 characters", {"Job"}),
}
# The proxy PDBs that can never allow a disruption (refused at render, admitted by the API server).
BLOCKING_PDBS = ["pdb-max-unavailable-zero", "pdb-min-available-percent", "pdb-min-available-above-replicas"]


@pytest.fixture(scope="module")
def unguarded_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart whose render-time refusal is off: validate-values.yaml renders nothing."""
    chart = tmp_path_factory.mktemp("unguarded") / "mooncake-pd"
    shutil.copytree(paths.CHART, chart)
    (chart / "templates" / "validate-values.yaml").write_text("{{- /* the refusal, bypassed */ -}}\n")
    return chart


def render(chart: Path, values: Path, namespace: str = paths.NAMESPACE) -> list[dict[str, Any]]:
    return manifests.parse(helm.template(paths.helm_binary(), (values,), chart=chart, namespace=namespace))


def test_the_chart_refuses_every_case():
    """Each case is one the chart refuses (tests/test_guards.py checks the message)."""
    for case in [*CASES, *BLOCKING_PDBS]:
        with pytest.raises(helm.HelmError, match="the values cannot work"):
            helm.template(paths.helm_binary(), (BAD / f"{case}.yaml",))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_api_server_refuses_what_the_chart_refuses(cluster, unguarded_chart: Path, case: str):
    message, kinds = CASES[case]
    objects = render(unguarded_chart, BAD / f"{case}.yaml")
    problems = refusals(cluster.client(), objects)
    matching = [p for p in problems if message in p]
    assert matching, f"{case}: no refusal says {message!r}; the API server said:\n" + "\n".join(problems)
    refused_kinds = {p.split("/", 1)[0] for p in matching}
    assert refused_kinds == kinds, f"{case}: refused as {refused_kinds}, expected {kinds}:\n" + "\n".join(matching)
    if "ModelServing" not in kinds:
        # Inside the ModelServing the rule is invisible at install: Kthena's CRD and webhook admit it.
        assert not [p for p in problems if p.startswith("ModelServing/")], problems


def test_a_good_escape_hatch_values_set_is_admitted(cluster, tmp_path: Path):
    """The edges the rules allow (octal and decimal modes, exact hostPath types, Bidirectional on a
    privileged sidecar, hostPort equal to containerPort, AppArmor per role, int32 bounds of the
    deletion cost, a 42-character name with the canary CronJob and the benchmark Job) render and
    are admitted."""
    values = tmp_path / "edges.yaml"
    values.write_text(EDGES)
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,)))
    assert {o["kind"] for o in objects} >= {"CronJob", "Job", "Deployment", "ModelServing"}
    assert refusals(cluster.client(), objects) == []


EDGES = """\
fullnameOverride: a23456789012345678901234567890123456789012
podAnnotations:
  controller.kubernetes.io/pod-deletion-cost: "-2147483648"
prefill:
  podAnnotations:
    container.apparmor.security.beta.kubernetes.io/prefill: runtime/default
    controller.kubernetes.io/pod-deletion-cost: "2147483647"
decode:
  podAnnotations:
    container.apparmor.security.beta.kubernetes.io/exporter: localhost/k8s-exporter
proxy:
  replicas: 3
  podAnnotations:
    container.apparmor.security.beta.kubernetes.io/proxy: unconfined
    controller.kubernetes.io/pod-deletion-cost: "0"
  podDisruptionBudget: {enabled: true, maxUnavailable: "1%"}
engine:
  extraVolumes:
    - name: certs-1
      configMap: {name: certs, defaultMode: 0644, items: [{key: a, path: a, mode: 0400}]}
    - name: cache
      hostPath: {path: /var/cache/vllm, type: ""}
    - name: proj
      projected: {defaultMode: 420, sources: [{secret: {name: s, items: [{key: k, path: p, mode: 511}]}}]}
  extraVolumeMounts:
    - {name: cache, mountPath: /cache, mountPropagation: HostToContainer}
  extraContainers:
    - name: exporter
      image: docker.io/library/busybox:1.37
      ports:
        - {containerPort: 9400, hostPort: 9400}
      volumeMounts:
        - {name: cache, mountPath: /cache, mountPropagation: Bidirectional}
      securityContext: {privileged: true}
benchmark: {enabled: true}
test:
  kvCanary:
    cronJob: {enabled: true}
"""


def _evict(api: Client, namespace: str, pod: str) -> ApiError | None:
    """A dry-run eviction of the pod (what `kubectl drain` sends): None when allowed."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
        "deleteOptions": {"dryRun": ["All"]},
    }
    try:
        api.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body, query={"dryRun": "All"})
    except ApiError as e:
        return e
    return None


def test_a_pdb_the_chart_refuses_blocks_every_eviction(cluster, unguarded_chart: Path, tmp_path: Path):
    """Each blocking PDB (2 proxy replicas) is admitted, and once the disruption controller has
    counted the 2 Ready proxy pods (KWOK makes them Ready), an eviction of one is answered 429;
    maxUnavailable 1, the chart's default, lets it through."""
    api = cluster.client()
    namespace = "passthrough-pdb"
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        good = tmp_path / "pdb-good.yaml"
        good.write_text("proxy:\n  replicas: 2\n  podDisruptionBudget: {enabled: true, maxUnavailable: 1}\n")
        variants = [(case, BAD / f"{case}.yaml", True) for case in BLOCKING_PDBS] + [("maxUnavailable 1", good, False)]
        for case, values, blocks in variants:
            objects = render(unguarded_chart, values, namespace)
            deployment = manifests.one(objects, "Deployment")
            assert deployment["spec"]["replicas"] == 2, case
            pdb = manifests.one(objects, "PodDisruptionBudget")
            api.apply(deployment)
            api.apply(pdb)  # admitted: the API server has no rule against it
            selector = ",".join(f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items())

            def counted(pdb: dict[str, Any] = pdb) -> dict[str, Any] | None:
                now = api.get("policy/v1", "PodDisruptionBudget", pdb["metadata"]["name"], namespace)
                status = now.get("status") or {}
                settled = status.get("observedGeneration") == now["metadata"]["generation"]
                return status if settled and status.get("currentHealthy") == 2 == status.get("expectedPods") else None

            status = wait_for(f"{case}: the PDB counts 2 healthy proxy pods", counted, 120, interval=1)
            assert (status.get("disruptionsAllowed", 0) == 0) == blocks, (case, status)
            pods = api.list("v1", "Pod", namespace, labelSelector=selector)
            refused = _evict(api, namespace, pods[0]["metadata"]["name"])
            if blocks:
                assert refused is not None and refused.status == 429, (case, refused)
                assert "Cannot evict pod as it would violate the pod's disruption budget" in refused.message
            else:
                assert refused is None, (case, refused)
    finally:
        api.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
