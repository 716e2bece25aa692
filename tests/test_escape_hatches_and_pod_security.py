"""What a platform engineer's own cluster asks of the chart (issue #27 items 8 and 10): the usual
escape hatches land where Kubernetes reads them and render nothing by default, net.* sysctls
only off the host network, NOTES name the Pod Security level the engines need, and the helm-test
pod runs on a slim Python image. Refusals of the hatches are tests/bad-values/ files; the API
server's verdict is tests/test_cluster_admission.py and tests/test_cluster_helm.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import Renderer
from mooncake_pd import paths


@pytest.mark.parametrize(
    ("files", "overrides", "level", "because"),
    [
        ((), {}, "privileged", "host network (engine.hostNetwork), hostPath mounts of ascend-a3's host files"),
        (("cpu-values.yaml",), {}, "privileged", "a hostPath model (model.storage.type)"),
        (("cpu-values.yaml",), {"model": {"storage": {"type": "pvc", "claimName": "models"}}}, "baseline", ""),
        (
            ("cpu-values.yaml",),
            {
                "model": {"storage": {"type": "pvc", "claimName": "models"}},
                "engine": {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
            },
            "privileged",
            "the capability NET_ADMIN (engine.securityContext)",
        ),
        (
            ("cpu-values.yaml",),
            {
                "model": {"storage": {"type": "pvc", "claimName": "models"}},
                "engine": {"extraVolumes": [{"name": "cache", "hostPath": {"path": "/var/cache/vllm"}}]},
            },
            "privileged",
            "the hostPath volume cache (engine.extraVolumes)",
        ),
        (
            ("cpu-values.yaml",),
            {
                "model": {"storage": {"type": "pvc", "claimName": "models"}},
                "engine": {"podSecurityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}},
            },
            "privileged",
            "the sysctl net.core.somaxconn (engine.podSecurityContext)",
        ),
    ],
    ids=["ascend", "cpu-hostpath-model", "cpu-pvc", "cpu-net-admin", "cpu-hostpath-volume", "cpu-unsafe-sysctl"],
)
def test_notes_name_the_pod_security_level_the_engines_need(files, overrides, level, because):
    """NOTES as `helm install` prints them (helm 4's client-side dry run needs no cluster)."""
    cmd = [str(paths.helm_binary("4.1.4")), "install", "demo", str(paths.CHART), "--dry-run=client"]
    cmd += [arg for f in files for arg in ("-f", str(paths.CHART / "ci" / f))]
    cmd += [arg for key, value in overrides.items() for arg in ("--set-json", f"{key}={json.dumps(value)}")]
    notes = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split("NOTES:", 1)[1]
    assert f"need the namespace's level {level}" in notes
    assert because in notes
    assert f"pod-security.kubernetes.io/enforce={level}" in notes


def test_the_escape_hatches_land_where_kubernetes_reads_them(render: Renderer):
    rendered = render((paths.CHART / "ci" / "escape-hatches-values.yaml",))
    prefill = rendered.role("prefill")["entryTemplate"]
    decode = rendered.role("decode")["entryTemplate"]
    for obj in rendered.objects:
        assert obj["metadata"]["labels"]["team"] == "inference", obj["kind"]
    assert prefill["metadata"]["labels"]["cost-center"] == "llm-serving"
    assert prefill["metadata"]["labels"]["example.com/role-tier"] == "prefill"
    assert "example.com/role-tier" not in decode["metadata"]["labels"]
    assert decode["metadata"]["annotations"]["example.com/decode"] == "true"
    assert decode["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert any(k.startswith("checksum/") for k in decode["metadata"]["annotations"])
    assert prefill["spec"]["priorityClassName"] == "llm-serving"
    assert prefill["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert "topologySpreadConstraints" not in decode["spec"]
    for template in (prefill, decode):
        names = [c["name"] for c in template["spec"]["containers"]]
        assert names[1:] == ["log-shipper"]
        assert {"name": "compile-cache", "emptyDir": {"sizeLimit": "20Gi"}} in template["spec"]["volumes"]
        mounts = template["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "compile-cache", "mountPath": "/root/.cache/vllm"} in mounts
    proxy = rendered.one("Deployment")["spec"]["template"]
    assert proxy["spec"]["priorityClassName"] == "llm-serving"
    assert proxy["metadata"]["annotations"]["example.com/owner"] == "platform"
    assert proxy["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    pdb = rendered.one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    # It selects the proxy pods, and only them.
    assert pdb["spec"]["selector"]["matchLabels"].items() <= proxy["metadata"]["labels"].items()
    assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "proxy"
    test_pod = rendered.one("Pod")
    assert test_pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert test_pod["spec"]["tolerations"][0]["key"] == "dedicated"


def test_no_hatch_renders_anything_by_default(render: Renderer, defaults):
    for template in (defaults.role(r)["entryTemplate"] for r in ("prefill", "decode")):
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        assert [c["name"] for c in template["spec"]["containers"]] == [component]
        assert "priorityClassName" not in template["spec"]
        assert "topologySpreadConstraints" not in template["spec"]
    assert defaults.find("PodDisruptionBudget") == []


def test_the_helm_test_pod_runs_a_slim_python_image(defaults):
    """Item 10: chart/files/chat_check.py needs Python's standard library alone (conformance runs it
    in a venv of Python 3.11 with no packages: tests/support/localpods.py SLIM_PYTHON)."""
    assert defaults.one("Pod")["spec"]["containers"][0]["image"] == "docker.io/library/python:3.11-slim"
    imports = (paths.CHART / "files" / "chat_check.py").read_text()
    assert "import urllib.request" in imports and "requests" not in imports.split('"""', 2)[2]


def test_network_sysctls_are_refused_only_on_the_host_network(render: Renderer):
    """The API server refuses a net.* sysctl on a host-network pod; off the host network (the cpu
    profile) the pod has a network namespace of its own, and it is admitted."""
    sysctl = {"engine": {"podSecurityContext": {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}}}
    cpu = (paths.CHART / "ci" / "cpu-values.yaml",)
    pod = render(cpu, sysctl).role("prefill")["entryTemplate"]["spec"]
    assert pod["securityContext"]["sysctls"] == [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]
    refused = render.error(cpu, {**sysctl, "engine": {**sysctl["engine"], "hostNetwork": True}})
    assert "is a network-namespace sysctl, which the API server refuses on the engines' host-network pods" in refused
