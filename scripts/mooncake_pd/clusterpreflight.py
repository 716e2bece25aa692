"""`mooncake-pd preflight`: the user's own cluster answers, before `helm install`, what it would
answer an hour later (issue 39 item 3).

With the release rendered as `helm install` will render it, and read access to the cluster:
- every rendered object, and every Pod the controllers will create from the rendered templates
  (Kthena from each ModelServing role's entry and worker template, kthena v1.0.0
  pkg/model-serving-controller/utils/utils.go GenerateEntryPod/GenerateWorkerPod; a Deployment's
  ReplicaSet, a Job, a CronJob's Jobs), is sent to the API server with `dryRun=All` and
  `fieldValidation=Strict` (the objects as a server-side apply, the pods as the create their
  controller will make): every admission step runs (Pod Security, the
  cluster's ValidatingAdmissionPolicies, webhooks such as Kyverno or Gatekeeper, ResourceQuota,
  LimitRange, the CRDs' schemas and CEL rules, Kthena's webhooks) and nothing is stored
  (kubernetes v1.34.2 staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go, dryRun and
  fieldValidation; pkg/registry/.../rest, "dry-run" never persists);
- what must be installed: the CRD of every kind rendered (Kthena's ModelServing, its router's
  ModelServer and ModelRoute, the AutoscalingPolicy, the Prometheus Operator's PodMonitor and
  PrometheusRule), the ModelServing CRD's schema against `kthena.version`, Volcano's PodGroup CRD
  (without it Kthena v1.0.0 creates no PodGroup and gangs nothing: pkg/model-serving-controller/
  podgroupmanager/manager.go NewManager), the queue the ModelServing names, and a scheduler of
  the name the pods ask for;
- fit: nodes that advertise the accelerator profile's device resource, whether one serving
  group's pods fit the nodes' free allocatable now and how many groups do (clusterfit), and
  whether the namespace's ResourceQuotas hold all of the release's pods together (the dry run
  sends one pod at a time).

Each finding is `key: problem; fix`, the chart's form; `check` is a function of what the `Api`
answers, so the tests drive it with the local cluster and with stand-ins."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from mooncake_pd import clusterfit, kubeconfig, manifests, paths, profiles
from mooncake_pd.engines import PodIdentity
from mooncake_pd.errors import FAILED, MooncakePdError

KTHENA_VERSION_ANNOTATION = "mooncake-pd/kthena-version"
MODELSERVING_CRD = "modelservings.workload.serving.volcano.sh"
PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")
QUEUE = ("scheduling.volcano.sh/v1beta1", "Queue")
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
RBAC_FILE = "examples/rbac/mooncake-pd-preflight.yaml"
MANAGER = "mooncake-pd-preflight"

# The values key that renders each kind the cluster must serve, what installs it, and how.
INSTALLS = {
    "ModelServing": ("kthena.version", "Kthena", "install Kthena (README, 'Install Kthena')"),
    "ModelServer": ("router.type", "Kthena's router CRDs", "install Kthena with its router, or set router.type=proxy"),
    "ModelRoute": ("router.type", "Kthena's router CRDs", "install Kthena with its router, or set router.type=proxy"),
    "AutoscalingPolicy": ("autoscaling.enabled", "Kthena", "install Kthena, or set autoscaling.enabled=false"),
    "PodMonitor": (
        "metrics.podMonitor.enabled",
        "the Prometheus Operator",
        "install the Prometheus Operator (kube-prometheus-stack), or set metrics.podMonitor.enabled=false",
    ),
    "PrometheusRule": (
        "metrics.prometheusRule.enabled",
        "the Prometheus Operator",
        "install the Prometheus Operator (kube-prometheus-stack), or set metrics.prometheusRule.enabled=false",
    ),
}
# The values key of each rendered workload whose pods a controller creates.
WORKLOAD_KEYS = {"Deployment": "proxy", "Job": "benchmark", "CronJob": "test.kvCanary.cronJob", "Pod": "test"}
# Pod Security's baseline checks, as their messages name them (kubernetes v1.34.2
# staging/src/k8s.io/pod-security-admission/policy/check_*.go): a pod refused on one of them
# needs `privileged`; one refused on restricted checks only, `baseline`.
BASELINE_CHECKS = (
    "host namespaces",
    "hostPath volumes",
    "privileged",
    "non-default capabilities",
    "hostPort",
    "procMount",
    "seLinuxOptions",
    "forbidden sysctls",
    "forbidden AppArmor profile",
)
SCHEDULER_FLAG = re.compile(r"^--scheduler-name(?:=(?P<value>.*))?$")


class PreflightError(MooncakePdError):
    """No cluster, or the cluster cannot be asked at all (exit 2)."""


class Forbidden(MooncakePdError):
    """The user may not read what a check needs (HTTP 403). The checks turn it into an `RBAC:`
    finding; one that escaped them would be a failed check."""

    exit_code = FAILED


@dataclass(frozen=True)
class Finding:
    key: str
    problem: str
    fix: str

    def line(self) -> str:
        return f"{self.key}: {self.problem}; {self.fix}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    groups_fit: int | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def lines(self) -> list[str]:
        return [f.line() for f in self.findings]

    def to_json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "findings": [{**asdict(f), "line": f.line()} for f in self.findings],
                "notes": self.notes,
                "servingGroupsThatFit": self.groups_fit,
            },
            indent=2,
        )


class Api(Protocol):
    """What the checks ask of the cluster. get/list raise Forbidden on 403."""

    def served(self, api_version: str, kind: str) -> bool: ...

    def dry_run(self, obj: dict[str, Any]) -> str | None:
        """None when admitted, else the API server's message."""
        ...

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]: ...


# ---- the pods the controllers create ---------------------------------------------------


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


# ---- findings from what the API server says ---------------------------------------------


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


# ---- what must be installed ---------------------------------------------------------------


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


# ---- fit -------------------------------------------------------------------------------


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


# ---- all of it ---------------------------------------------------------------------------


def forbidden(report: Report, what: str, error: Forbidden) -> None:
    report.findings.append(
        Finding(
            "RBAC", f"cannot {what}: {error}", f"grant what {RBAC_FILE} grants, or run preflight as a user who has it"
        )
    )


def check(api: Api, objects: list[dict[str, Any]], namespace: str) -> Report:
    """Every check, every finding at once."""
    report = Report()
    try:
        namespace_exists = api.get("v1", "Namespace", namespace) is not None
    except Forbidden as e:
        forbidden(report, f"get namespace {namespace}", e)
        namespace_exists = True  # the dry run says the rest
    if not namespace_exists:
        report.findings.append(
            Finding(
                f"--namespace {namespace}",
                "the namespace does not exist, so nothing can be dry-run in it",
                f"create it first (kubectl create namespace {namespace}, with the labels the cluster's policies "
                "want: they decide Pod Security and policies), then run preflight again",
            )
        )
    try:
        all_pods = api.list("v1", "Pod")
    except Forbidden as e:
        forbidden(report, "list pods in all namespaces", e)
        all_pods = []
    try:
        missing = install_findings(api, objects, all_pods, report)
    except Forbidden as e:
        forbidden(report, "read CustomResourceDefinitions or Volcano queues", e)
        missing = set()
    if namespace_exists:
        dry_run_findings(api, [o for o in objects if o["kind"] not in missing], namespace, report)
        try:
            quota_findings(api.list("v1", "ResourceQuota", namespace), release_pods(objects), report)
        except Forbidden as e:
            forbidden(report, f"list resourcequotas in {namespace}", e)
    try:
        nodes = api.list("v1", "Node")
    except Forbidden as e:
        forbidden(report, "list nodes", e)
    else:
        for ms in (o for o in objects if o["kind"] == "ModelServing"):
            fit_findings(ms, nodes, all_pods, report)
    return report


# ---- the Kubernetes client -----------------------------------------------------------------


class KubeApi:
    """Api over the Kubernetes client's DynamicClient (the client verify uses), from the kubeconfig."""

    def __init__(self, context: str | None = None) -> None:
        import tempfile

        from kubernetes import client
        from kubernetes.dynamic import DynamicClient

        kubeconfig.load(context, PreflightError)
        self._cache = tempfile.TemporaryDirectory(prefix="mooncake-pd-preflight-")
        try:
            self._dynamic = DynamicClient(client.ApiClient(), cache_file=f"{self._cache.name}/discovery.json")
        except Exception as e:  # connection refused, DNS, TLS, 401: the cluster cannot be asked
            raise PreflightError(f"no cluster: {e.__class__.__name__}: {_message(e)}") from None

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return None

    def served(self, api_version: str, kind: str) -> bool:
        return self._resource(api_version, kind) is not None

    def dry_run(self, obj: dict[str, Any]) -> str | None:
        from kubernetes.client.exceptions import ApiException

        resource = self._resource(obj["apiVersion"], obj["kind"])
        if resource is None:
            return f"the cluster serves no {obj['kind']} in {obj['apiVersion']}"
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        if obj["kind"] == "Pod":
            return self._dry_run_create(resource, obj, namespace)
        try:
            self._dynamic.server_side_apply(
                resource,
                body=obj,
                namespace=namespace,
                field_manager=MANAGER,
                force_conflicts=True,
                dry_run="All",
                query_params=[("fieldValidation", "Strict")],
            )
        except ApiException as e:
            return _message(e)
        return None

    def _dry_run_create(self, resource: Any, pod: dict[str, Any], namespace: str | None) -> str | None:
        """A Pod is dry-run as its controller makes it, a create (POST): so that a pod of the same
        name already running (preflight before an upgrade) is not judged as an update of it. Where
        one exists (409), again under a name of its own."""
        from kubernetes.client.exceptions import ApiException

        for name in (pod["metadata"]["name"], pod["metadata"]["name"][:53] + "-preflight"):
            body = {**pod, "metadata": {**pod["metadata"], "name": name}}
            try:
                self._dynamic.create(
                    resource,
                    body=body,
                    namespace=namespace,
                    field_manager=MANAGER,
                    dry_run="All",
                    query_params=[("fieldValidation", "Strict")],
                )
            except ApiException as e:
                if e.status == 409:
                    continue
                return _message(e)
            return None
        return None

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        resource = self._resource(api_version, kind)
        if resource is None:
            return None
        try:
            found: dict[str, Any] = resource.get(name=name, namespace=namespace).to_dict()
        except ApiException as e:
            if e.status == 404:
                return None
            if e.status == 403:
                raise Forbidden(_message(e)) from None
            raise PreflightError(f"cannot get {kind} {name}: {_message(e)}") from None
        return found

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        resource = self._resource(api_version, kind)
        if resource is None:
            return []
        try:
            items: list[dict[str, Any]] = resource.get(namespace=namespace).to_dict().get("items") or []
        except ApiException as e:
            if e.status == 403:
                raise Forbidden(_message(e)) from None
            raise PreflightError(f"cannot list {kind}: {_message(e)}") from None
        return items


def _message(error: Exception) -> str:
    """The API server's own message of a refusal (its Status), else the error's text."""
    body = getattr(error, "body", None)
    if body:
        try:
            status = json.loads(body)
        except (TypeError, ValueError):
            return str(body)
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    return str(getattr(error, "reason", None) or error)
