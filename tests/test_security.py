"""Security posture of the rendered manifests: checkov passes but for the listed exceptions,
each with its reason; engine pods mount host files read-only and hold no token."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import Rendered
from mooncake_pd import helm, manifests, paths, validate
from support import netpol

EXCEPTIONS = Path(__file__).parent / "checkov-exceptions.yaml"
NAMESPACE = "llm"  # checkov flags the default namespace, which is a user's choice, not the chart's


def scan_objects(text: str) -> list[dict]:
    """Objects as checkov should see them: the ModelServing's pod templates as Pods."""
    objects = []
    for obj in manifests.parse(text):
        if obj["kind"] == "PodTemplate":
            # The install-time copies of the engine templates (validation.podTemplates): the same
            # templates, scanned once as the Pods below (test_pod_templates_judged_at_install
            # holds them equal), so that each exception is listed once.
            continue
        if obj["kind"] == "ModelServing":
            for _, pod in validate.pod_templates(obj):
                pod["metadata"]["namespace"] = NAMESPACE
                objects.append(pod)
        else:
            objects.append(obj)
    return objects


def checkov_failures(tmp_path: Path, overrides: dict | None = None) -> set[tuple[str, str]]:
    checkov = paths.checkov_binary()
    if not checkov.exists():
        pytest.fail("checkov missing: run `make tools`")
    text = helm.template(paths.helm_binary(), set_json=overrides, namespace=NAMESPACE)
    scan = tmp_path / "scan.yaml"
    scan.write_text(yaml.safe_dump_all(scan_objects(text)))
    proc = subprocess.run(
        [
            str(checkov),
            "--file",
            str(scan),
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "--output",
            "json",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    reports = json.loads(proc.stdout)
    failures = set()
    for report in reports if isinstance(reports, list) else [reports]:
        for check in report["results"]["failed_checks"]:
            kind, _, name = check["resource"].split(".")[:3]
            failures.add((check["check_id"], f"{kind}/{name}"))
    return failures


def listed_exceptions() -> set[tuple[str, str]]:
    entries = yaml.safe_load(EXCEPTIONS.read_text())
    for entry in entries:
        assert len(entry["reason"]) > 40, f"{entry['check']}: give the true reason"
    return {(e["check"], obj) for e in entries for obj in e["objects"]}


def test_checkov_fails_only_on_listed_exceptions(tmp_path: Path):
    failures = checkov_failures(tmp_path)
    listed = listed_exceptions()
    assert failures - listed == set(), "new checkov failures: fix them or list them with a reason"
    assert listed - failures == set(), "listed exceptions that no longer fail: remove them"


def test_network_policy_covers_every_pod(tmp_path: Path):
    failures = checkov_failures(tmp_path, {"networkPolicy": {"enabled": True}})
    assert {f for f in failures if f[0] == "CKV2_K8S_6"} == set()


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_engine_pods_mount_host_files_read_only(defaults: Rendered, role: str):
    pod = defaults.role(role)["entryTemplate"]["spec"]
    host_volumes = {v["name"] for v in pod["volumes"] if "hostPath" in v}
    mounts = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] in host_volumes]
    assert len(mounts) == 4
    assert all(m.get("readOnly") is True for m in mounts)
    assert pod["automountServiceAccountToken"] is False
    security = pod["containers"][0]["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert "privileged" not in security


def test_network_policies(render):
    rendered = render(overrides={"networkPolicy": {"enabled": True}})
    engines, proxy = (rendered.one("NetworkPolicy", f"deepseek-pd-{n}") for n in ("engines", "proxy"))
    serving, peers = engines["spec"]["ingress"]
    assert [p["port"] for p in serving["ports"]] == [7100, 7101]
    assert serving["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "proxy"
    # Engine to engine: every port (Mooncake's RPC, NIXL/UCX, DP's ZMQ and TCPStore are random).
    assert "ports" not in peers
    assert peers["from"][0]["podSelector"]["matchExpressions"][0]["values"] == ["prefill", "decode"]
    assert proxy["spec"]["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}]}]
    assert validate.validate(rendered.objects, paths.crds_dir()) == []


def test_image_digest_pins_every_pod(render):
    digest = "sha256:" + "ab" * 32
    rendered = render(overrides={"image": {"digest": digest}})
    images = [rendered.container(role)["image"] for role in ("prefill", "decode")]
    images += [rendered.one("Deployment", "deepseek-pd-proxy")["spec"]["template"]["spec"]["containers"][0]["image"]]
    assert set(images) == {f"quay.io/ascend/vllm-ascend:v0.13.0-a3@{digest}"}
    # The helm-test pod runs its own (slim Python) image, pinned by test.image.digest.
    tested = render(overrides={"test": {"image": {"digest": digest}}})
    assert tested.one("Pod", "deepseek-pd-test")["spec"]["containers"][0]["image"] == (
        f"docker.io/library/python:3.11-slim@{digest}"
    )


ENGINE_LABELS = {"app.kubernetes.io/name": "mooncake-pd", "app.kubernetes.io/instance": "deepseek-pd"}
PROMETHEUS = netpol.Pod({"app.kubernetes.io/name": "prometheus"}, namespace="monitoring")
AUTOSCALER = netpol.Pod({"app.kubernetes.io/component": "kthena-controller-manager"}, namespace="kthena-system")


@pytest.mark.parametrize("podmonitor", [True, False])
def test_network_policy_lets_in_the_podmonitors_prometheus(render, podmonitor: bool):
    """The scrape the chart's own PodMonitor configures reaches the serving port (and only it)."""
    values = {"networkPolicy": {"enabled": True}, "metrics": {"podMonitor": {"enabled": podmonitor, "proxy": True}}}
    policies = render(
        overrides={**values, "networkPolicy": {"enabled": True, "proxyFrom": [{"podSelector": {}}]}}
    ).find("NetworkPolicy")
    decode = netpol.Pod({**ENGINE_LABELS, "app.kubernetes.io/component": "decode"})
    proxy = netpol.Pod({**ENGINE_LABELS, "app.kubernetes.io/component": "proxy"})
    assert netpol.allowed(policies, PROMETHEUS, decode, 7101) is podmonitor
    assert netpol.allowed(policies, PROMETHEUS, proxy, 8080) is podmonitor
    assert not netpol.allowed(policies, PROMETHEUS, decode, 18100)
    assert not netpol.allowed(policies, AUTOSCALER, decode, 7101)


def test_network_policy_lets_in_kthenas_autoscaler_for_pod_metrics(render):
    preset = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena-autoscaling-cost-first.yaml"
    rendered = render((preset,), {"networkPolicy": {"enabled": True}})
    assert any(
        not m.get("query")
        for role in ("prefill", "decode")
        for m in yaml.safe_load(preset.read_text())["autoscaling"][role]["metrics"]
    )
    prefill = netpol.Pod({**ENGINE_LABELS, "app.kubernetes.io/component": "prefill"})
    policies = rendered.find("NetworkPolicy")
    assert netpol.allowed(policies, AUTOSCALER, prefill, 7100)
    assert not netpol.allowed(policies, AUTOSCALER, prefill, 18000)
    assert not netpol.allowed(
        policies, netpol.Pod({"app.kubernetes.io/component": "kthena-controller-manager"}), prefill, 7100
    )


def test_a_restricted_proxy_still_lets_in_the_helm_test_and_the_benchmark(render):
    """networkPolicy.proxyFrom narrows who reaches the proxy; the chart's own clients of it, the
    helm test pod and the benchmark Job (which sends its load through the proxy), stay allowed."""
    clients = [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]
    values = {"networkPolicy": {"enabled": True, "proxyFrom": clients}, "benchmark": {"enabled": True}}
    proxy = render(overrides=values).one("NetworkPolicy", "deepseek-pd-proxy")
    peers = proxy["spec"]["ingress"][0]["from"]
    assert peers[0] == clients[0]
    assert [p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in peers[1:]] == ["test", "benchmark"]
    without = render(overrides={"networkPolicy": values["networkPolicy"]}).one("NetworkPolicy", "deepseek-pd-proxy")
    assert len(without["spec"]["ingress"][0]["from"]) == 2, "no benchmark, no peer for it"


def test_the_chart_renders_no_egress_policy(render):
    """docs/security.md's `egress` row: the chart restricts who reaches its pods, never where they
    connect (the download init container reaches its hub, engines their peers); a rendered Egress
    policy would change what that row and the threat model say."""
    everything = {
        "networkPolicy": {"enabled": True},
        "benchmark": {"enabled": True},
        "metrics": {"podMonitor": {"enabled": True}},
    }
    for overrides in (everything, {**everything, "router": {"type": "kthena"}, "decode": {"port": 7100}}):
        policies = render(overrides=overrides).find("NetworkPolicy")
        assert policies and {tuple(p["spec"]["policyTypes"]) for p in policies} == {("Ingress",)}
