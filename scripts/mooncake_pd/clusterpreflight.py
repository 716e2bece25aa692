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

from typing import Any

from mooncake_pd.clustercapacity import fit_findings, quota_findings, release_pods
from mooncake_pd.clusterdryrun import dry_run_findings
from mooncake_pd.clusterinstalls import install_findings
from mooncake_pd.clusterreport import (
    RBAC_FILE,
    Api,
    Finding,
    Forbidden,
    Report,
)

# ---- the pods the controllers create ---------------------------------------------------


# ---- findings from what the API server says ---------------------------------------------


# ---- what must be installed ---------------------------------------------------------------


# ---- fit -------------------------------------------------------------------------------


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
