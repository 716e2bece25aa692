"""`mooncake-pd preflight` against the local cluster's real API server (kube-apiserver v1.34.2,
Kthena v1.0.0's CRDs and webhooks, Volcano's CRDs, KWOK nodes shaped as cluster/nodes.yaml):
it passes a good release, and names each planted problem the way the user will read it: a
namespace at Pod Security baseline, a ResourceQuota too small, a ValidatingAdmissionPolicy
standing for a company policy, Kthena absent (a second, bare API server: etcd and kube-apiserver
only, nothing installed) and another Kthena than the values say, nodes too small for a group and
more groups than fit. Then as a ServiceAccount with exactly examples/rbac/mooncake-pd-preflight.yaml.

The CLI runs as the user runs it (a process, KUBECONFIG), and its --json report is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mooncake_pd import paths
from support.kube import build, certs
from support.kube.api import ApiError, Client, wait_for
from support.kube.cluster import Cluster, free_port

pytestmark = pytest.mark.cluster
RELEASE = paths.RELEASE
# The policy of a company that wants every pod labelled with its team (a ValidatingAdmissionPolicy,
# admissionregistration.k8s.io/v1, GA in Kubernetes 1.30), bound to namespaces that opt in.
POLICY_LABEL = "mooncake-pd.test/policy"
TEAM = "company.example/team"
POLICY = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "company-team-label"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
            ]
        },
        "validations": [
            {
                "expression": f"has(object.metadata.labels) && '{TEAM}' in object.metadata.labels",
                "message": f"pods must carry the {TEAM} label",
            }
        ],
    },
}
BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "company-team-label"},
    "spec": {
        "policyName": "company-team-label",
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {POLICY_LABEL: "team-label"}}},
    },
}


def namespace(api: Client, name: str, labels: dict[str, str] | None = None) -> str:
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})
    return name


def preflight(
    kubeconfig: Path, ns: str, *values: Path, sets: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    """The CLI's exit code and its --json report."""
    argv = [sys.executable, "-m", "mooncake_pd", "preflight", "--release", RELEASE, "-n", ns, "--json"]
    for path in values:
        argv += ["-f", str(path)]
    if sets:
        extra = kubeconfig.parent / f"preflight-{ns}-{len(sets)}.yaml"
        extra.write_text(yaml.safe_dump(sets))
        argv += ["-f", str(extra)]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=paths.REPO,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        timeout=300,
        check=False,
    )
    assert proc.returncode in (0, 1), f"exit {proc.returncode}: {proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def lines(report: dict[str, Any]) -> list[str]:
    return [f["line"] for f in report["findings"]]


@pytest.fixture(scope="module")
def scheduler_seen(cluster) -> None:
    """A pod bound by the scheduler named `volcano` (the local cluster's kube-scheduler profile of
    that name): what shows preflight that such a scheduler runs, as any pod it ever bound does on
    a real cluster (there, Volcano's own vc-scheduler pod shows it too)."""
    api = cluster.client()
    ns = namespace(api, "preflight-scheduler")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound-by-volcano", "namespace": ns},
        "spec": {
            "schedulerName": "volcano",
            "nodeSelector": {"mooncake-pd.test/profile": "cpu"},
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}],
        },
    }
    api.apply(pod)
    wait_for(
        "the pod the volcano profile binds",
        lambda: api.get("v1", "Pod", pod["metadata"]["name"], ns)["spec"].get("nodeName"),
        60,
    )


@pytest.fixture(scope="module")
def good(cluster, scheduler_seen) -> str:
    return namespace(cluster.client(), "preflight-good")


def test_a_good_release_passes(cluster, good: str):
    code, report = preflight(cluster.kubeconfig, good)
    assert (code, lines(report)) == (0, []), report
    assert report["ok"] is True
    assert "Kthena's ModelServing CRD is v1.0.0's, as kthena.version says" in report["notes"]
    assert report["servingGroupsThatFit"] >= 1


def test_pod_security_baseline_is_named_with_the_level_the_engines_need(cluster, scheduler_seen):
    ns = namespace(cluster.client(), "preflight-psa", {"pod-security.kubernetes.io/enforce": "baseline"})
    code, report = preflight(cluster.kubeconfig, ns)
    assert code == 1
    found = lines(report)
    for role in ("prefill", "decode"):
        line = next((x for x in found if x.startswith(f"{role} (Pod {RELEASE}-0-{role}-0-0, created by Kthena")), None)
        assert line is not None, found
        assert 'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)' in line, line
        assert f"kubectl label namespace {ns} pod-security.kubernetes.io/enforce=privileged --overwrite" in line
    # the ModelServing itself is admitted: only its pods are refused
    assert not any(x.startswith("kthena.version") for x in found), found


def test_a_resource_quota_too_small(cluster, scheduler_seen):
    api = cluster.client()
    ns = namespace(api, "preflight-quota")
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "team-quota", "namespace": ns},
            "spec": {"hard": {"requests.memory": "400Gi", "pods": "20"}},
        }
    )
    wait_for(
        "the quota's status (the controller-manager's first count)",
        lambda: (api.get("v1", "ResourceQuota", "team-quota", ns).get("status") or {}).get("hard"),
        60,
    )
    code, report = preflight(cluster.kubeconfig, ns)
    assert code == 1
    found = lines(report)
    # one engine pod (350Gi) fits the quota, so the dry runs pass; all of them together do not
    assert (
        "resources (ResourceQuota team-quota): the release's 3 pods together count 701Gi of requests.memory, and "
        "the quota has 400Gi of 400Gi left; raise the quota's requests.memory to at least 701Gi, or lower the "
        "roles' resources or servingGroups"
    ) in found, found
    # below one pod's requests, the API server's own quota admission refuses each engine pod
    api.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "team-quota", "namespace": ns},
            "spec": {"hard": {"requests.memory": "100Gi", "pods": "20"}},
        }
    )
    wait_for(
        "the quota's new hard",
        lambda: (
            (api.get("v1", "ResourceQuota", "team-quota", ns).get("status") or {})
            .get("hard", {})
            .get("requests.memory")
            == "100Gi"
        ),
        60,
    )
    code, report = preflight(cluster.kubeconfig, ns)
    prefill = [x for x in lines(report) if x.startswith(f"prefill (Pod {RELEASE}-0-prefill-0-0")]
    assert len(prefill) == 1, lines(report)
    assert "exceeded quota: team-quota, requested: requests.memory=350Gi" in prefill[0], prefill[0]
    assert f"raise the ResourceQuota named in namespace {ns}, or lower prefill.resources" in prefill[0]


def test_a_company_admission_policy_is_named_and_met(cluster, scheduler_seen, tmp_path: Path):
    api = cluster.client()
    ns = namespace(api, "preflight-policy", {POLICY_LABEL: "team-label"})
    api.apply(POLICY)
    api.apply(BINDING)
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }

    def enforced() -> bool:
        try:
            api.apply(probe, dry_run=True)
        except ApiError as e:
            return "company-team-label" in e.message
        return False

    # The API server enforces a new policy once its informer has it and its CEL is compiled.
    wait_for("the ValidatingAdmissionPolicy in force", enforced, 60)
    try:
        code, report = preflight(cluster.kubeconfig, ns)
        assert code == 1
        found = lines(report)
        for key in ("prefill", "decode", "proxy"):
            line = next((x for x in found if x.startswith(f"{key} (Pod ")), None)
            assert line is not None, found
            assert (
                "ValidatingAdmissionPolicy 'company-team-label' with binding 'company-team-label' denied request"
                in line
            )
            assert f"pods must carry the {TEAM} label" in line
            assert f"meet the cluster's policy (a label or annotation it wants: {key}.podLabels" in line
        # the fix it names: the chart's podLabels put the label on every pod
        code, report = preflight(cluster.kubeconfig, ns, sets={"podLabels": {TEAM: "llm"}})
        assert (code, lines(report)) == (0, []), report
    finally:
        api.delete(BINDING)
        api.delete(POLICY)


def test_another_kthena_than_the_values_say(cluster, good: str):
    code, report = preflight(cluster.kubeconfig, good, sets={"kthena": {"version": "main-3cc0572"}})
    assert code == 1
    assert (
        "kthena.version: main-3cc0572, but the cluster's ModelServing CRD is Kthena v1.0.0's; "
        "set kthena.version=v1.0.0, or install Kthena main-3cc0572"
    ) in lines(report)


def test_nodes_too_small_for_a_group_and_more_groups_than_fit(cluster, good: str):
    big = {"prefill": {"resources": {"requests": {"memory": "2000Gi"}, "limits": {"memory": "2000Gi"}}}}
    code, report = preflight(cluster.kubeconfig, good, sets=big)
    assert code == 1
    found = [x for x in lines(report) if x.startswith("prefill.resources: ")]
    assert len(found) == 1, lines(report)
    assert (
        f"pod {RELEASE}-0-prefill-0-0 (requests cpu 32, huawei.com/ascend-1980 8, memory 2000Gi) finds no node"
        in found[0]
    )
    assert "Insufficient memory" in found[0] and "nodes are available" in found[0], found[0]
    assert report["servingGroupsThatFit"] == 0
    # kthena's router: one port for both roles, so the chart keeps them on different nodes
    many = {"servingGroups": 5, "router": {"type": "kthena"}, "decode": {"port": 7100}}
    code, report = preflight(cluster.kubeconfig, good, sets=many)
    assert code == 1
    found = [x for x in lines(report) if x.startswith("servingGroups: 5 serving groups asked for, ")]
    assert len(found) == 1, lines(report)
    assert report["servingGroupsThatFit"] < 5


def bare_api_server(folder: Path) -> Cluster:
    """etcd and kube-apiserver v1.34.2 alone, as the local cluster starts them (no CRD, no node, no
    Kthena, no scheduler): a cluster where nothing the release needs is installed."""
    bare = Cluster(folder)
    comps = build.components()
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("etcd", "apiserver", "etcd-peer"):
        bare.ports[name] = free_port()
    pki = folder / "pki"
    authority = certs.ca(pki)
    serving = certs.serving(pki, authority, "apiserver", ("127.0.0.1", "localhost"))
    signing = certs.signing_key(pki)
    bare._write_kubeconfig()
    try:
        bare._start_etcd(comps["etcd"])
        bare._start_apiserver(comps["kubernetes"], serving, signing)
    except BaseException:
        bare.down()
        raise
    return bare


def test_nothing_installed_is_named(cluster, tmp_path: Path):
    bare = bare_api_server(tmp_path / "bare")
    try:
        # what kube-controller-manager would create: the ServiceAccount admission looks pods' up
        bare.client().apply(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}}
        )
        code, report = preflight(bare.kubeconfig, "default")
    finally:
        bare.down()
    assert code == 1
    found = lines(report)
    assert (
        "kthena.version: the cluster serves no ModelServing (workload.serving.volcano.sh/v1alpha1): Kthena is not "
        "installed; install Kthena v1.0.0 (README, 'Install Kthena')"
    ) in found, found
    assert any(x.startswith("schedulerName: volcano: the cluster serves no PodGroup") for x in found), found
    assert any(x.startswith("schedulerName: no scheduler named volcano is seen") for x in found), found
    assert any(x.startswith("accelerator.type: no node advertises huawei.com/ascend-1980") for x in found), found
    # the objects that do not need Kthena are still dry-run, and admitted
    assert not any("the cluster refuses it" in x for x in found), found


def token_kubeconfig(cluster, api: Client, ns: str, account: str, folder: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ns/account (a TokenRequest)."""
    api.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}})
    token = api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = folder / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_the_documented_rbac_is_enough_and_less_is_named(cluster, good: str, tmp_path: Path):
    api = cluster.client()
    documents = list(yaml.safe_load_all((paths.REPO / "examples" / "rbac" / "mooncake-pd-preflight.yaml").read_text()))
    subject = [{"kind": "ServiceAccount", "name": "preflight", "namespace": good}]
    for doc in documents:
        if doc["kind"] == "RoleBinding":
            doc["metadata"]["namespace"] = good
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            doc["metadata"]["name"] += "-test"
            doc["subjects"] = subject
        api.apply(doc)
    kubeconfig = token_kubeconfig(cluster, api, good, "preflight", tmp_path)
    code, report = preflight(kubeconfig, good)
    assert (code, lines(report)) == (0, []), report
    # bound to the dry-run role only: what it cannot read is named, with the file that grants it
    dry_run_only = next(d for d in documents if d["kind"] == "RoleBinding")
    less = {"kind": "ServiceAccount", "name": "preflight-less", "namespace": good}
    api.apply({**dry_run_only, "metadata": {**dry_run_only["metadata"], "name": "preflight-less"}, "subjects": [less]})
    kubeconfig = token_kubeconfig(cluster, api, good, "preflight-less", tmp_path)
    code, report = preflight(kubeconfig, good)
    assert code == 1
    found = lines(report)
    assert any(
        x.startswith("RBAC: cannot list pods in all namespaces: ")
        and x.endswith(
            "grant what examples/rbac/mooncake-pd-preflight.yaml grants, or run preflight as a user who has it"
        )
        for x in found
    ), found
