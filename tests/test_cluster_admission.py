"""The API server is the oracle of what the cluster admits (issue #25 item 3): every render the
suite makes of the presets (the defaults, values/, chart/ci/) and a sample of the values sets the
property-based fuzz accepts are applied to the local cluster's kube-apiserver with server-side
dry-run and strict field validation, so that every admission step runs: built-in validation
(pkg/apis/core/validation and the rest), CRD schemas, defaults and CEL rules of Kthena v1.0.0's
CRDs, and Kthena's own validating and mutating webhooks. A render helm accepts and the API
server refuses fails with the object and the API server's message. Nothing is stored."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mooncake_pd import helm, manifests, paths, schemagen
from support.kube.api import ApiError, Client
from test_fuzz import KEYS, PRESETS, _drawn_from_schema, mutation, render_values

pytestmark = pytest.mark.cluster
# Examples per fuzz test in `make test` (about 1 s each); MOONCAKE_PD_CLUSTER_FUZZ=800 explores.
FUZZ_EXAMPLES = int(os.environ.get("MOONCAKE_PD_CLUSTER_FUZZ", "40"))


def template_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of an object as the Pods its controller creates from them later. Neither
    the CRD nor Kthena's webhook runs Kubernetes' pod validation on a ModelServing's templates
    (pkg/model-serving-controller/webhook/validator.go at v1.0.0 checks names, replicas and
    rollouts), and admission checks that look at other objects (a PriorityClass that exists, Pod
    Security) run on Pods alone: a template refused there passes `helm install` and fails only
    when Kthena, a ReplicaSet or a Job creates its pods."""
    if obj["kind"] == "ModelServing":
        templates = [
            (f"{role['name']}-{kind.removesuffix('Template')}", role[kind])
            for role in obj["spec"]["template"]["roles"]
            for kind in ("entryTemplate", "workerTemplate")
            if role.get(kind)
        ]
    elif obj["kind"] in ("Deployment", "Job"):
        templates = [("pod", obj["spec"]["template"])]
    elif obj["kind"] == "CronJob":
        templates = [("pod", obj["spec"]["jobTemplate"]["spec"]["template"])]
    else:
        return []
    pods = []
    for suffix, template in templates:
        metadata = {**template.get("metadata", {}), "name": f"{obj['metadata']['name']}-{suffix}"}
        metadata["namespace"] = obj["metadata"].get("namespace", "default")
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
    return pods


def refusals(api: Client, objects: list[dict[str, Any]]) -> list[str]:
    """What the API server says of each object it would refuse, as `Kind/name: message`, the
    ModelServing's pod templates included (as Pods)."""
    found = []
    pods = [pod for obj in objects for pod in template_pods(obj)]
    # The ServiceAccount admission plugin refuses a Pod whose ServiceAccount does not exist. helm
    # creates a release's ServiceAccounts before anything that makes pods (and its test pod is a
    # hook, run after the install), so they exist by then; a dry run stores nothing, so they are
    # created for the check and deleted after it.
    accounts = [obj for obj in objects if obj["kind"] == "ServiceAccount"]
    for account in accounts:
        api.apply(account)
    try:
        for obj in [*objects, *pods]:
            try:
                api.apply(obj, dry_run=True)
            except ApiError as e:
                found.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message}")
    finally:
        for account in accounts:
            api.delete(account)
    return found


def _preset_id(preset: Path | None) -> str:
    return "defaults" if preset is None else f"{preset.parent.name}/{preset.name}"


# The PriorityClass chart/ci/escape-hatches-values.yaml names: the cluster's to provide (the
# chart cannot look it up: its render is deterministic). Without it, its pods are refused.
PRIORITY_CLASS = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "llm-serving"},
    "value": 100000,
    "description": "mooncake-pd tests",
}


@pytest.fixture(scope="module", autouse=True)
def priority_class(cluster):
    cluster.client().apply(PRIORITY_CLASS)
    yield


@pytest.mark.parametrize("preset", PRESETS, ids=_preset_id)
def test_every_preset_is_admitted(cluster, preset: Path | None):
    text = helm.template(paths.helm_binary(), (preset,) if preset else ())
    objects = manifests.parse(text)
    assert objects
    problems = refusals(cluster.client(), objects)
    assert problems == [], "the API server refuses what helm rendered:\n" + "\n".join(problems)


def test_the_webhook_runs_in_dry_run(cluster):
    """Kthena's ModelServing webhook answers in the dry run: a role-level maxUnavailable without
    RoleRollingUpdate passes the CRD schema and is refused by the webhook alone
    (pkg/model-serving-controller/webhook/validator.go validateMaxUnavailableForRoles)."""
    objects = manifests.parse(helm.template(paths.helm_binary(), ()))
    ms = manifests.one(objects, "ModelServing")
    roles = [{**role, "maxUnavailable": 1} for role in ms["spec"]["template"]["roles"]]
    with pytest.raises(ApiError) as refused:
        cluster.client().apply(
            {**ms, "spec": {**ms["spec"], "template": {**ms["spec"]["template"], "roles": roles}}}, dry_run=True
        )
    message = refused.value.message
    assert "validate-workload-ai-v1alpha1-modelserving.volcano.sh" in message, message
    assert "maxUnavailable is only valid when rolloutStrategy.type is RoleRollingUpdate" in message, message


FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    database=None,
)


def check_admitted(cluster, preset: Path | None, changes: list[tuple[str, Any]]) -> None:
    """A values set helm renders is admitted by the API server (a refused one proves nothing)."""
    text, refusal = render_values(paths.DEFAULT_HELM_VERSION, preset, changes)
    if refusal is not None:
        return
    problems = refusals(cluster.client(), manifests.parse(text))
    where = f"preset {_preset_id(preset)}, changes {changes}"
    assert problems == [], f"{where}: helm renders, the API server refuses:\n" + "\n".join(problems)


@FUZZ
@given(preset=st.sampled_from(PRESETS), changes=st.lists(mutation(), min_size=1, max_size=2))
def test_fuzzed_values_the_chart_accepts_are_admitted(cluster, preset, changes):
    check_admitted(cluster, preset, changes)


# The values that pass straight into Kubernetes objects (typed from Kubernetes' OpenAPI by
# schemagen): where the API server's own rules (pkg/apis/core/validation and the rest) go beyond
# what OpenAPI states, so where a render helm accepts is most likely refused.
# A sidecar (a whole Container) and an extra Volume are left out: hypothesis draws them from
# dozens of optional fields each, and the API server's rules on those (probe handlers, port
# names, volume sources, ...) are Kubernetes' to state, not the chart's. The chart checks what
# touches its own containers (names, mounts, ports: validate.pods), and every preset, with
# chart/ci/escape-hatches-values.yaml among them, has its pod templates dry-run as Pods above.
WHOLE_OBJECTS = {"engine.extraContainers", "engine.extraVolumes"}
PASS_THROUGH = sorted(
    ({k.removesuffix("[]") for k in schemagen.K8S_FIELDS} | set(schemagen.LABEL_MAPS) | set(schemagen.ANNOTATION_MAPS))
    - WHOLE_OBJECTS
)
assert set(PASS_THROUGH) <= {k for k, _ in KEYS}, set(PASS_THROUGH) - {k for k, _ in KEYS}


@st.composite
def pass_through(draw) -> tuple[str, object]:
    path = draw(st.sampled_from(PASS_THROUGH))
    return path, draw(_drawn_from_schema(path))


@FUZZ
@given(preset=st.sampled_from(PRESETS), changes=st.lists(pass_through(), min_size=1, max_size=2))
def test_pass_through_fields_the_chart_accepts_are_admitted(cluster, preset, changes):
    check_admitted(cluster, preset, changes)


def test_a_float_quantity_in_an_engine_role_is_admitted(cluster, tmp_path: Path):
    """`cpu: 0.5` from a values file is a float; Kthena's CRD types the pod template's quantities
    int-or-string and refused it until the chart wrote them as strings."""
    values = tmp_path / "float.yaml"
    values.write_text("prefill:\n  resources:\n    requests:\n      cpu: 0.5\n")
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,)))
    ms = manifests.one(objects, "ModelServing")
    requests = ms["spec"]["template"]["roles"][0]["entryTemplate"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["cpu"] == "0.5"
    assert refusals(cluster.client(), objects) == []


def test_a_template_the_api_server_refuses_as_a_pod_passes_as_a_modelserving(cluster, tmp_path: Path):
    """Why template_pods dry-runs the ModelServing's templates as Pods: a PriorityClass the cluster
    lacks is admitted inside the ModelServing (helm install succeeds) and refused only for the
    Pod Kthena creates from it."""
    values = tmp_path / "priority.yaml"
    values.write_text("prefill:\n  priorityClassName: absent-class\n")
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,)))
    ms = manifests.one(objects, "ModelServing")
    api = cluster.client()
    api.apply(ms, dry_run=True)  # admitted
    problems = refusals(api, [ms])
    assert len(problems) == 1 and problems[0].startswith("Pod/deepseek-pd-prefill-entry:"), problems
    assert "no PriorityClass with name absent-class was found" in problems[0]
