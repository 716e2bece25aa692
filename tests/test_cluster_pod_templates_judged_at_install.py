"""The API server judges the engine pod templates at install, before any engine pod exists (issue
54 item 1). Kthena's ModelServing CRD and webhook admit pod templates that Kubernetes refuses
(test_cluster_admission.test_a_template_the_api_server_refuses_as_a_pod_passes_as_a_modelserving),
so the chart also renders each role template as a core/v1 PodTemplate in a pre-install/pre-upgrade
hook (chart/templates/validate-podtemplates.yaml, validation.podTemplates), which the API server
validates with ValidatePodTemplateSpec -> ValidatePodSpec (kubernetes v1.34.2
pkg/apis/core/validation/validation.go ~6276, ~6796). On the local cluster's kube-apiserver
v1.34.2:
- every pod-level class of issue 54, and the earlier rounds' (test_cluster_passthrough's cases the
  API server refuses as Pods), is refused as a PodTemplate wherever it is refused as a Pod, with
  the same field errors (server dry run; the chart's own render-time refusal bypassed);
- with the chart as it is, `helm install` (helm 3 and 4) of each class that renders stops at the
  hook with the API server's message naming the field, and no ModelServing, no engine pod and no
  refused PodTemplate exist; `helm upgrade` likewise leaves the running ModelServing as it was;
- what only a Pod create checks passes the hook: a PriorityClass the cluster lacks is admitted
  (the Pod is refused later), and Pod Security only warns on a PodTemplate (helm prints the
  warning, the install goes on).
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mooncake_pd import helm, manifests, paths
from support.kube.api import ApiError, Client
from support.kube.releases import HELM_WAIT, MODELSERVING, Helm, pods_of
from test_cluster_admission import template_pods
from test_cluster_passthrough import CASES as PASSTHROUGH
from test_pod_templates_judged_at_install import VALID_134

pytestmark = pytest.mark.cluster
RELEASE = paths.RELEASE
BAD = Path(__file__).parent / "bad-values"
SIDECAR = "docker.io/library/busybox:1.37"

# Issue 54's pod-level classes: values that Kubernetes refuses in a pod -> what the API server says.
CLASSES: dict[str, tuple[dict[str, Any], str]] = {
    "port-name-over-15": (
        {"engine": {"extraContainers": [{"name": "exporter", "image": SIDECAR, "ports": [
            {"name": "exporter-metrics-http", "containerPort": 9400}]}]}},
        'ports[0].name: Invalid value: "exporter-metrics-http": must be no more than 15 characters',
    ),
    "requests-above-limits": (
        {"prefill": {"resources": {"limits": {"cpu": "8"}}}},
        'resources.requests: Invalid value: "32": must be less than or equal to cpu limit of 8',
    ),
    "env-fieldref-whole-labels": (
        {"engine": {"extraContainers": [{"name": "exporter", "image": SIDECAR, "env": [
            {"name": "LABELS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]}]}},
        'env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "metadata.labels"',
    ),
    "sidecar-without-image": (
        {"engine": {"extraContainers": [{"name": "shipper"}]}},
        "containers[1].image: Required value",
    ),
    "privileged-without-escalation": (
        {"engine": {"securityContext": {"privileged": True}}},
        "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
    ),
    "projected-token-under-600s": (
        {"engine": {"extraVolumes": [{"name": "token", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 300}}]}}]}},
        "expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes",
    ),
    "nfs-path-relative": (
        {"engine": {"extraVolumes": [
            {"name": "share", "nfs": {"server": "nfs.example.com", "path": "exports/models"}}]}},
        'nfs.path: Invalid value: "exports/models": must be an absolute path',
    ),
    "subpath-absolute": (
        {"engine": {"extraVolumes": [{"name": "scratch", "emptyDir": {}}],
                    "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch", "subPath": "/abs"}]}},
        'subPath: Invalid value: "/abs": must be a relative path',
    ),
    "seccomp-localhost-absolute": (
        {"engine": {"podSecurityContext": {"seccompProfile": {
            "type": "Localhost", "localhostProfile": "/var/lib/kubelet/seccomp/vllm.json"}}}},
        'localhostProfile: Invalid value: "/var/lib/kubelet/seccomp/vllm.json": must be a relative path',
    ),
    "matchfields-two-values": (
        {"prefill": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-a", "node-b"]}]}]}}}}},
        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
    ),
    "resource-name-over-63": (
        {"prefill": {"resources": {"limits": {"example.com/" + "a" * 64: "1"}}}},
        "name part must be no more than 63 characters",
    ),
}  # fmt: skip
# The classes the chart now refuses itself when it renders (validate-values.yaml or the schema);
# the others render, and only the API server stops them.
REFUSED_BY_CHART = {
    "requests-above-limits",
    "privileged-without-escalation",
    "resource-name-over-63",
    # Refused at render since sidecars got the engine containers' checks (validate/_sidecars.tpl).
    "port-name-over-15",
    "env-fieldref-whole-labels",
    "sidecar-without-image",
}
# The earlier rounds': test_cluster_passthrough's bad-values cases that an engine pod template
# carries (the others are the proxy's, the canary's or the benchmark's, whose objects the API
# server judges at install anyway).
EARLIER = {case: message for case, (message, kinds) in PASSTHROUGH.items() if "PodTemplate" in kinds}


def _values(case: str, folder: Path) -> Path:
    if case in EARLIER:
        return BAD / f"{case}.yaml"
    path = folder / f"{case}.yaml"
    path.write_text(yaml.safe_dump(CLASSES[case][0]))
    return path


def _expected(case: str) -> str:
    return EARLIER[case] if case in EARLIER else CLASSES[case][1]


@pytest.fixture(scope="module")
def unguarded_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart without its own refusals (validate-values.yaml renders nothing, no
    values.schema.json): what is left to judge is the API server's."""
    chart = tmp_path_factory.mktemp("unguarded") / "mooncake-pd"
    shutil.copytree(paths.CHART, chart)
    (chart / "templates" / "validate-values.yaml").write_text("{{- /* the refusal, bypassed */ -}}\n")
    (chart / "values.schema.json").unlink()
    return chart


def _dry_run(api: Client, obj: dict[str, Any]) -> str | None:
    try:
        api.apply(obj, dry_run=True)
    except ApiError as e:
        return e.message
    return None


def _field_errors(message: str) -> set[str]:
    """The field errors of an API server refusal, each with its path as a Pod's (a PodTemplate's
    `template.spec.x` reads `spec.x`, its `template.annotations` `metadata.annotations`)."""
    detail = message.split(" is invalid: ", 1)[-1].strip("[]")
    detail = re.sub(r"\.?template\.spec\.", "spec.", detail.split("): ", 1)[-1])
    detail = re.sub(r"\btemplate\.(annotations|labels)", r"metadata.\1", detail)
    return {e.strip().lstrip(".") for e in re.split(r", (?=\.?(?:spec|metadata)\.)", detail)}


def _role(obj: dict[str, Any]) -> str:
    template = obj["template"] if obj["kind"] == "PodTemplate" else obj
    return template["metadata"]["labels"]["app.kubernetes.io/component"]


@pytest.mark.parametrize("case", [*CLASSES, *sorted(EARLIER)])
def test_each_class_is_refused_as_a_pod_template_where_it_is_refused_as_a_pod(
    cluster, unguarded_chart: Path, tmp_path: Path, case: str
):
    values = _values(case, tmp_path)
    try:
        helm.template(paths.helm_binary(), (values,))
        refused_by_chart = False
    except helm.HelmError:
        refused_by_chart = True
    assert refused_by_chart == (case in REFUSED_BY_CHART or case in EARLIER), case
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,), chart=unguarded_chart))
    api = cluster.client()
    templates = {_role(o): o for o in manifests.find(objects, "PodTemplate")}
    pods = {_role(p): p for p in template_pods(manifests.one(objects, "ModelServing"))}
    assert set(templates) == set(pods) == {"prefill", "decode"}
    said = {role: (_dry_run(api, templates[role]), _dry_run(api, pods[role])) for role in pods}
    for role, (as_template, as_pod) in said.items():
        assert (as_template is None) == (as_pod is None), (role, as_template, as_pod)
        if as_template is None or as_pod is None:
            continue
        assert _expected(case) in as_template, as_template
        # 'PodTemplate "<name>" is invalid: ...', or for a duplicate list key, server-side apply's
        # 'failed to create typed patch object (<namespace>/<name>; /v1, Kind=PodTemplate): ...'.
        assert templates[role]["metadata"]["name"] in as_template and "PodTemplate" in as_template, as_template
        # The same rule, found at the same field. A Pod can say more: its create defaults
        # requests from limits, so a bad resource name is reported twice there.
        assert _field_errors(as_template) <= _field_errors(as_pod), (as_template, as_pod)
    assert any(t is not None for t, _ in said.values()), f"{case}: nothing refused: {said}"


def _namespace(api: Client, name: str, labels: dict[str, str] | None = None) -> None:
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})


def _drop(api: Client, name: str) -> None:
    api.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _left(api: Client, namespace: str) -> dict[str, list[str]]:
    """What a release left in its namespace: ModelServings, engine pods, PodTemplates."""
    return {
        "ModelServing": [m["metadata"]["name"] for m in api.list(*MODELSERVING, namespace)],
        "Pod": [p["metadata"]["name"] for p in pods_of(api, namespace, RELEASE)],
        "PodTemplate": [t["metadata"]["name"] for t in api.list("v1", "PodTemplate", namespace)],
    }


RENDERED_TODAY = [c for c in CLASSES if c not in REFUSED_BY_CHART]


@pytest.mark.parametrize("version", paths.HELM_VERSIONS, ids=lambda v: f"helm{v.split('.')[0]}")
def test_helm_install_stops_at_the_hook_before_the_modelserving(cluster, tmp_path: Path, version: str):
    """Each class the chart renders: `helm install` fails with the API server's message naming the
    field, and no ModelServing or engine pod exists. The one-role class (matchFields, prefill
    only) leaves decode's admitted PodTemplate behind: helm deletes hook-succeeded hooks once all
    of the event's hooks passed (helm v3.17.2 and v4.1.4 pkg/action/hooks.go execHook), and the
    next install or upgrade of the release deletes it first (before-hook-creation)."""
    api = cluster.client()
    runner = Helm(cluster, version, tmp_path / "helm")
    started = time.monotonic()
    for index, case in enumerate(RENDERED_TODAY):
        namespace = f"ptcheck-install-{version.split('.')[0]}-{index}"
        _namespace(api, namespace)
        try:
            proc = runner.run(
                "install", RELEASE, str(paths.CHART), "-n", namespace, "--wait", "--timeout", HELM_WAIT,
                "-f", str(_values(case, tmp_path)), check=False,
            )  # fmt: skip
            assert proc.returncode != 0, f"{case}: installed"
            said = proc.stderr
            assert "failed pre-install" in said and "validate-podtemplates.yaml" in said, said
            assert re.search(
                r'PodTemplate "deepseek-pd-(prefill|decode)-entry-check" is invalid: template\.spec\.', said
            )
            assert _expected(case) in said, said
            left = _left(api, namespace)
            assert left["ModelServing"] == [] and left["Pod"] == [], (case, left)
            one_role = case == "matchfields-two-values"
            assert left["PodTemplate"] == (["deepseek-pd-decode-entry-check"] if one_role else []), (case, left)
            status = runner.run("status", RELEASE, "-n", namespace).stdout
            assert "STATUS: failed" in status, status
        finally:
            _drop(api, namespace)
    print(f"helm {version}: {len(RENDERED_TODAY)} refused installs in {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize("version", paths.HELM_VERSIONS, ids=lambda v: f"helm{v.split('.')[0]}")
def test_helm_upgrade_stops_at_the_hook_and_leaves_the_release_as_it_was(cluster, tmp_path: Path, version: str):
    """A good install leaves no PodTemplate (deleted once admitted); an upgrade to a class the API
    server refuses fails at pre-upgrade, and the ModelServing keeps its generation and template."""
    api = cluster.client()
    namespace = f"ptcheck-upgrade-{version.split('.')[0]}"
    _namespace(api, namespace)
    runner = Helm(cluster, version, tmp_path / "helm")
    runner.install(RELEASE, namespace)
    try:
        left = _left(api, namespace)
        assert left["ModelServing"] == [RELEASE] and left["PodTemplate"] == [], left
        before = api.get(*MODELSERVING, RELEASE, namespace)
        case = "nfs-path-relative"
        proc = runner.run(
            "upgrade", RELEASE, str(paths.CHART), "-n", namespace, "--wait", "--timeout", HELM_WAIT,
            "-f", str(_values(case, tmp_path)), check=False,
        )  # fmt: skip
        assert proc.returncode != 0, "upgraded"
        assert "pre-upgrade" in proc.stderr and _expected(case) in proc.stderr, proc.stderr
        after = api.get(*MODELSERVING, RELEASE, namespace)
        assert after["metadata"]["generation"] == before["metadata"]["generation"]
        assert after["spec"] == before["spec"]
        assert _left(api, namespace)["PodTemplate"] == []
    finally:
        runner.uninstall(RELEASE, namespace)
        _drop(api, namespace)


# helm 3 prints the API server's warning as it is, helm 4 quoted (klog's structured line).
PSA_WARNING = re.compile(r'would violate PodSecurity \\?"baseline:latest\\?": host namespaces \(hostNetwork=true\)')


def test_what_only_a_pod_create_checks_passes_the_hook(cluster, tmp_path: Path):
    """Admission plugins judge Pods, not PodTemplates: a PriorityClass the cluster lacks passes
    the hook (the Priority plugin refuses the Pod later), and in a namespace enforcing Pod Security
    baseline the guide's host-network engines only draw a warning, which helm prints (the
    PodSecurity plugin judges pod-template resources in warn and audit modes only); the install
    goes on and Kthena's pod creations are refused (test_cluster_pod_security)."""
    api = cluster.client()
    namespace = "ptcheck-pod-only"
    _namespace(api, namespace, {"pod-security.kubernetes.io/enforce": "baseline"})
    runner = Helm(cluster, paths.DEFAULT_HELM_VERSION, tmp_path / "helm")
    values = tmp_path / "priority.yaml"
    values.write_text("prefill:\n  priorityClassName: absent-class\n")
    try:
        proc = runner.run("install", RELEASE, str(paths.CHART), "-n", namespace, "-f", str(values))
        assert PSA_WARNING.search(proc.stderr), proc.stderr
        assert _left(api, namespace)["ModelServing"] == [RELEASE]
        objects = manifests.parse(helm.template(paths.helm_binary(), (values,), namespace=namespace))
        prefill = next(p for p in template_pods(manifests.one(objects, "ModelServing")) if _role(p) == "prefill")
        refused = _dry_run(api, prefill)
        assert refused and "no PriorityClass with name absent-class was found" in refused, refused
    finally:
        runner.uninstall(RELEASE, namespace)
        _drop(api, namespace)


def test_the_valid_kubernetes_134_forms_pass_the_hook(cluster, tmp_path: Path):
    """Issue 54's three valid Kubernetes 1.34 forms: the chart renders them (its schema types the
    pass-through fields from Kubernetes v1.34.2's OpenAPI, issue 54 item 2), and as PodTemplates
    and as Pods the API server admits them, so the hook does not stand in their way."""
    values = tmp_path / "valid-134.yaml"
    values.write_text(yaml.safe_dump(VALID_134))
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,)))
    api = cluster.client()
    judged = [*manifests.find(objects, "PodTemplate"), *template_pods(manifests.one(objects, "ModelServing"))]
    assert len(judged) == 4
    assert {o["metadata"]["name"]: _dry_run(api, o) for o in judged} == {o["metadata"]["name"]: None for o in judged}
