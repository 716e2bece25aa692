"""`mooncake-pd preflight` without a cluster: the fit arithmetic (mooncake_pd.clusterfit) on the
local cluster's node shapes (cluster/nodes.yaml), and the findings mooncake_pd.clusterpreflight
makes of what a stand-in API answers. tests/test_cluster_preflight.py asks the real API server."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
import yaml

from mooncake_pd import clusterdryrun, clusterfit, clusterinstalls, clusterpreflight, helm, manifests, paths
from mooncake_pd.clusterfit import Pod, quantity
from support.kube.cluster import node_objects

GiB = Decimal(2**30)


def render(**values: Any) -> list[dict[str, Any]]:
    """The chart rendered with `values` (one helm run per distinct set; a fresh copy each time)."""
    return copy.deepcopy(_render(json.dumps(values, sort_keys=True)))


@functools.cache
def _render(values: str) -> list[dict[str, Any]]:
    return manifests.parse(helm.template(paths.helm_binary(), (), json.loads(values) or None))


def modelserving(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return manifests.one(objects, "ModelServing")


def fit(objects: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None) -> clusterfit.Fit:
    ms = modelserving(objects)
    nodes = clusterfit.nodes_now(node_objects(), pods or [])
    return clusterfit.groups_that_fit(lambda g: [Pod.of(p) for p in clusterdryrun.group_pods(ms, g)], nodes, limit=20)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("350Gi", 350 * GiB),
        ("4000m", Decimal(4)),
        ("1e3", Decimal(1000)),
        ("526878220Ki", Decimal(526878220 * 1024)),
        (8, Decimal(8)),
        ("0.5", Decimal("0.5")),
        ("1.5G", Decimal(1_500_000_000)),
    ],
)
def test_quantities(text: object, value: Decimal):
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1 Gi", "1GB", "ten"])
def test_a_quantity_kubernetes_refuses_is_refused(text: str):
    with pytest.raises(clusterfit.QuantityError):
        quantity(text)


def test_pod_requests_as_the_scheduler_adds_them():
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            # a limit without a request requests the limit
            {"name": "b", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}},
        ],
        "initContainers": [
            # a big init container: only its peak counts, with the sidecars started before it
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}},
            {"name": "init", "resources": {"requests": {"cpu": "8", "memory": "1Gi"}}},
        ],
    }
    requests = clusterfit.pod_requests(spec)
    assert requests == {"cpu": Decimal(8), "memory": 2 * GiB, "nvidia.com/gpu": Decimal(1), "pods": Decimal(1)}
    assert clusterfit.pod_requests(spec, limits=True)["cpu"] == Decimal(2)
    assert clusterfit.pod_requests({"containers": [{"name": "x"}]}) == {"pods": Decimal(1)}


def test_host_ports_on_the_host_network_are_every_container_port():
    port = {"containerPort": 7100}
    assert clusterfit.host_ports({"hostNetwork": True, "containers": [{"ports": [port]}]}) == {("TCP", 7100)}
    assert clusterfit.host_ports({"containers": [{"ports": [port]}]}) == set()
    assert clusterfit.host_ports({"containers": [{"ports": [{**port, "hostPort": 80}]}]}) == {("TCP", 80)}


def test_free_allocatable_is_allocatable_minus_the_bound_pods_that_have_not_ended():
    taken = {"requests": {"cpu": "600", "huawei.com/ascend-1980": "8"}}
    pods = [
        {
            "metadata": {"name": "p", "namespace": "x"},
            "spec": {"nodeName": "ascend-a3-0", "containers": [{"resources": taken}]},
        },
        {
            "metadata": {"name": "done", "namespace": "x"},
            "spec": {"nodeName": "ascend-a3-0", "containers": [{"resources": taken}]},
            "status": {"phase": "Succeeded"},
        },
        {"metadata": {"name": "pending", "namespace": "x"}, "spec": {"containers": [{"resources": taken}]}},
    ]
    nodes = {n.name: n for n in clusterfit.nodes_now(node_objects(), pods)}
    assert nodes["ascend-a3-0"].free["cpu"] == Decimal(40)
    assert nodes["ascend-a3-0"].free["huawei.com/ascend-1980"] == Decimal(8)
    assert nodes["ascend-a3-0"].free["pods"] == Decimal(109)
    assert nodes["ascend-a3-1"].free["cpu"] == Decimal(640)


def test_the_guides_group_fits_once_per_a3_node():
    """The defaults: prefill and decode of 8 NPUs, 32 CPU and 350Gi each on the host network with
    ports of their own; an A3 node has 16 NPUs, so each of the 4 holds one group."""
    result = fit(render())
    assert result.groups == 4
    assert result.unplaced is not None and "Insufficient huawei.com/ascend-1980" in result.reason_text()


def test_separate_roles_halves_the_groups():
    """placement.separateRoles: prefill and decode never share a node (required pod anti-affinity)."""
    assert fit(render(placement={"separateRoles": True})).groups == 2


def test_a_group_too_big_for_any_node_fits_nowhere_and_says_why_per_node():
    result = fit(render(prefill={"resources": {"requests": {"memory": "2000Gi"}, "limits": {"memory": "2000Gi"}}}))
    assert result.groups == 0
    assert result.unplaced is not None and result.unplaced.labels["modelserving.volcano.sh/role"] == "prefill"
    text = result.reason_text()
    assert text.startswith("0/10 nodes are available: "), text
    assert "4 Insufficient memory" in text, text  # the A3 nodes: 1536Gi
    # the A2 and CPU nodes lack both; the H100 nodes (2015Gi) have the memory, not the NPUs
    assert "4 Insufficient huawei.com/ascend-1980 and Insufficient memory" in text, text
    assert "2 Insufficient huawei.com/ascend-1980" in text, text


def test_taints_selectors_and_pods_already_there_count():
    objects = render(prefill={"nodeSelector": {"kubernetes.io/hostname": "ascend-a3-2"}})
    # prefill may go only to ascend-a3-2: one group, whatever the other nodes hold
    assert fit(objects).groups == 1
    occupied = [
        {
            "metadata": {"name": "other", "namespace": "x"},
            "spec": {
                "nodeName": "ascend-a3-2",
                "containers": [{"resources": {"requests": {"huawei.com/ascend-1980": "9"}}}],
            },
        }
    ]
    result = fit(objects, occupied)
    assert result.groups == 0
    assert "1 Insufficient huawei.com/ascend-1980" in result.reason_text()
    assert "9 node(s) didn't match Pod's node affinity/selector" in result.reason_text()
    nodes = node_objects()
    for node in nodes:
        node.setdefault("spec", {})["taints"] = [{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}]
    tainted = clusterfit.nodes_now(nodes, [])
    pod = Pod.of(clusterdryrun.group_pods(modelserving(render()), 0)[0])
    assert "untolerated taint {dedicated: llm}" in (clusterfit.why_not(pod, tainted[0], tainted) or "")
    tolerant = Pod(
        pod.name, pod.namespace, pod.labels, {**pod.spec, "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    )
    assert clusterfit.why_not(tolerant, tainted[0], tainted) != clusterfit.why_not(pod, tainted[0], tainted)


def test_node_affinity_expressions():
    node = clusterfit.nodes_now(node_objects(), [])[0]

    def term(*expressions: dict[str, Any]) -> dict[str, Any]:
        terms = {"nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}
        return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}}

    assert clusterfit.matches_node(term({"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}), node)
    assert not clusterfit.matches_node(
        term({"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}), node
    )
    assert clusterfit.matches_node(term({"key": "absent", "operator": "DoesNotExist"}), node)
    assert not clusterfit.matches_node(term({"key": "absent", "operator": "Exists"}), node)


# ---- the findings -------------------------------------------------------------------------


class StandIn:
    """An Api answering as a cluster with Kthena `kthena`'s CRDs, Volcano and cluster/nodes.yaml."""

    def __init__(self, kthena: str | None = "v1.0.0", refuse: dict[str, str] | None = None, pods: list | None = None):
        self.kthena = kthena
        self.refuse = refuse or {}
        self.pods = (
            pods
            if pods is not None
            else [
                {
                    "metadata": {"name": "vc-scheduler", "namespace": "volcano-system"},
                    "spec": {
                        "containers": [
                            {
                                "name": "s",
                                "image": "volcanosh/vc-scheduler:v1.15.0",
                                "args": ["--scheduler-name=volcano"],
                            }
                        ]
                    },
                }
            ]
        )
        self.quotas: list[dict[str, Any]] = []
        self.dry_runs: list[str] = []

    def served(self, api_version: str, kind: str) -> bool:
        return self.kthena is not None or not api_version.endswith("volcano.sh/v1alpha1")

    def dry_run(self, obj: dict[str, Any]) -> str | None:
        self.dry_runs.append(f"{obj['kind']}/{obj['metadata']['name']}")
        return self.refuse.get(obj["kind"])

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if kind == "CustomResourceDefinition":
            return manifests.load(
                (paths.KTHENA_CRDS / str(self.kthena) / "workload.serving.volcano.sh_modelservings.yaml").read_text()
            )
        return {"metadata": {"name": name}}

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return {"Node": node_objects(), "Pod": self.pods, "ResourceQuota": self.quotas}.get(kind, [])


def test_a_clean_cluster_has_no_finding_and_every_pod_template_is_dry_run():
    api = StandIn()
    report = clusterpreflight.check(api, render(), "llm")
    assert report.ok, report.lines()
    assert report.groups_fit == 4
    assert "Pod/deepseek-pd-0-prefill-0-0" in api.dry_runs and "Pod/deepseek-pd-0-decode-0-0" in api.dry_runs
    assert "ModelServing/deepseek-pd" in api.dry_runs and "Pod/deepseek-pd-proxy-preflight" in api.dry_runs
    assert json.loads(report.to_json())["ok"] is True


def test_the_pods_kthena_creates_carry_its_labels_and_the_scheduler():
    ms = modelserving(render(prefill={"workerReplicas": 1, "parallelism": {"data": 8, "dataLocal": 4}}))
    pods = clusterdryrun.group_pods(ms, 0)
    assert [p["metadata"]["name"] for p in pods] == [
        "deepseek-pd-0-prefill-0-0", "deepseek-pd-0-prefill-0-1", "deepseek-pd-0-decode-0-0",
    ]  # fmt: skip
    assert pods[0]["metadata"]["labels"]["modelserving.volcano.sh/entry"] == "true"
    assert "modelserving.volcano.sh/entry" not in pods[1]["metadata"]["labels"]
    assert pods[0]["metadata"]["labels"]["app.kubernetes.io/component"] == "prefill"
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}


def test_pod_security_refusal_names_the_role_and_the_level_it_needs():
    message = (
        'pods "deepseek-pd-0-prefill-0-0" is forbidden: violates PodSecurity "baseline:latest": '
        'host namespaces (hostNetwork=true), hostPath volumes (volumes "model")'
    )
    report = clusterpreflight.check(StandIn(refuse={"Pod": message}), render(), "llm")
    lines = report.lines()
    prefill = [
        line
        for line in lines
        if line.startswith("prefill (Pod deepseek-pd-0-prefill-0-0, created by Kthena from ModelServing deepseek-pd)")
    ]
    assert len(prefill) == 1, lines
    assert "kubectl label namespace llm pod-security.kubernetes.io/enforce=privileged --overwrite" in prefill[0]
    assert any(line.startswith("decode (Pod deepseek-pd-0-decode-0-0") for line in lines)
    assert any(
        line.startswith("proxy (Pod deepseek-pd-proxy-preflight, created by Deployment deepseek-pd-proxy)")
        for line in lines
    )


def test_kthena_absent_is_named_once_and_its_objects_are_not_dry_run():
    api = StandIn(kthena=None)
    report = clusterpreflight.check(api, render(), "llm")
    assert (
        "kthena.version: the cluster serves no ModelServing (workload.serving.volcano.sh/v1alpha1): Kthena is not "
        "installed; install Kthena v1.0.0 (README, 'Install Kthena')"
    ) in report.lines()
    assert "ModelServing/deepseek-pd" not in api.dry_runs


def test_another_kthena_than_the_values_say_is_named():
    report = clusterpreflight.check(StandIn(kthena="main-3cc0572"), render(), "llm")
    assert (
        "kthena.version: v1.0.0, but the cluster's ModelServing CRD is Kthena main-3cc0572's; "
        "set kthena.version=main-3cc0572, or install Kthena v1.0.0"
    ) in report.lines()


def test_no_scheduler_of_the_pods_name_is_a_finding():
    report = clusterpreflight.check(StandIn(pods=[]), render(), "llm")
    assert any(line.startswith("schedulerName: no scheduler named volcano is seen") for line in report.lines())
    bound = {"metadata": {"name": "x", "namespace": "y"}, "spec": {"schedulerName": "volcano", "nodeName": "cpu-0"}}
    assert clusterinstalls.scheduler_evidence("volcano", [bound]) == "pod y/x was bound by it"
    plain = {
        "metadata": {"name": "s", "namespace": "v"},
        "spec": {"containers": [{"image": "volcanosh/vc-scheduler:v1"}]},
    }
    assert clusterinstalls.scheduler_evidence("volcano", [plain]) is not None
    assert clusterinstalls.scheduler_evidence("other", [plain]) is None
    named = {
        "metadata": {"name": "s", "namespace": "v"},
        "spec": {"containers": [{"args": ["--scheduler-name", "other"]}]},
    }
    assert clusterinstalls.scheduler_evidence("other", [named]) is not None


def test_the_release_together_against_a_quota():
    api = StandIn()
    api.quotas = [
        {
            "metadata": {"name": "team"},
            "spec": {"hard": {"requests.huawei.com/ascend-1980": "24", "pods": "10"}},
            "status": {"used": {"requests.huawei.com/ascend-1980": "10"}},
        }
    ]
    report = clusterpreflight.check(api, render(), "llm")
    assert report.lines() == [
        "resources (ResourceQuota team): the release's 3 pods together count 16 of requests.huawei.com/ascend-1980, "
        "and the quota has 14 of 24 left; raise the quota's requests.huawei.com/ascend-1980 to at least 26, or lower "
        "the roles' resources or servingGroups"
    ]


def test_no_node_with_the_device_and_more_groups_than_fit():
    report = clusterpreflight.check(StandIn(), render(accelerator={"type": "ascend-a2"}), "llm")
    assert report.groups_fit is not None and report.groups_fit >= 1  # two A2 nodes
    nodes_without = [n for n in node_objects() if "huawei.com/ascend-1980" not in n["status"]["allocatable"]]
    api = StandIn()
    api.list = lambda api_version, kind, namespace=None: (
        nodes_without if kind == "Node" else (api.pods if kind == "Pod" else [])
    )  # type: ignore[method-assign]
    lines = clusterpreflight.check(api, render(), "llm").lines()
    assert (
        "accelerator.type: no node advertises huawei.com/ascend-1980 (status.allocatable); the nodes advertise "
        "huawei.com/Ascend910 on 2 node(s), nvidia.com/gpu on 2 node(s); install the device plugin that advertises it "
        "(README, 'Install a device plugin'), or set accelerator.type to the accelerator the nodes have"
    ) in lines
    many = render(servingGroups=5, router={"type": "kthena"}, decode={"port": 7100})
    lines = clusterpreflight.check(StandIn(), many, "llm").lines()
    assert any(
        line.startswith("servingGroups: 5 serving groups asked for, 2 fit the nodes' free allocatable now")
        for line in lines
    ), lines


def test_every_kind_the_chart_renders_has_a_dry_run_rule_in_the_documented_rbac():
    import re

    documents = list(yaml.safe_load_all((paths.REPO / "examples" / "rbac" / "mooncake-pd-preflight.yaml").read_text()))
    dry_run = next(d for d in documents if d["metadata"]["name"] == "mooncake-pd-preflight-dry-run")
    allowed = {
        (g, r, v)
        for rule in dry_run["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    kinds = set()
    for template in (paths.CHART / "templates").rglob("*.yaml"):
        text = template.read_text()
        kinds |= set(re.findall(r"^apiVersion: (\S+)\nkind: (\w+)", text, re.M))
    assert len(kinds) >= 10
    for api_version, kind in kinds:
        group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
        resource = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
        assert (group, resource, "patch") in allowed and (group, resource, "create") in allowed, (group, resource)
    assert ("", "pods", "patch") in allowed


def test_without_a_cluster_preflight_exits_2_and_says_so(tmp_path):
    """No kubeconfig and not in a pod: the kubeconfig loading verify shares (mooncake_pd.kubeconfig)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env["KUBECONFIG"] = str(tmp_path / "missing")
    env["HOME"] = str(tmp_path)
    argv = [sys.executable, "-m", "mooncake_pd", "preflight", "--release", "deepseek-pd", "-n", "llm"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=paths.REPO, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "no cluster: no kubeconfig (KUBECONFIG or ~/.kube/config) and not in a pod" in proc.stderr
