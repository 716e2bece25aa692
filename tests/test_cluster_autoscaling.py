"""Kthena's autoscaler owns the role replicas, measured (issue #25 item 5). The real
autoscaler of Kthena v1.0.0's controller-manager scrapes each entry pod's /metrics at the pod's
address; no engine runs here, so tests/support/kube/podmetrics.py answers there with the load a
test sets (inside the controller's network namespace). Then helm upgrades under helm 3 and helm 4
show what happens to the replicas it set:

- helm 3 (three-way merge patch): an upgrade that changes nothing in `roles` leaves them; one
  that changes a role sends the whole `roles` list without replicas, which the CRD defaults to 1,
  and the autoscaler raises them again on its next reconciles;
- helm 4 (server-side apply, the default for a release it installed): any upgrade after the
  autoscaler scaled is refused with a conflict on .spec.template.roles (an atomic list the
  autoscaler's patch made its manager own); `--force-conflicts` takes the list and resets the
  replicas to 1; `--server-side=false` behaves as helm 3.

Kthena v1.0.0 also leaves a changed AutoscalingPolicy's status.observedGeneration behind while
nothing is scaled, so helm 4's `--wait` (kstatus, "watcher") waits for it until the timeout on an
upgrade that changes the policy; `--wait=legacy` (helm 3's) does not wait on custom resources.

The seconds each step took are written to out/cluster-autoscaling.json (docs/autoscaling.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from mooncake_pd import paths
from support.kube.api import pods_brief, wait_for
from support.kube.releases import MODELSERVING, SETTLE_TIMEOUT, Helm, HelmFailed, pods_of, record, wait_gone

pytestmark = pytest.mark.cluster
PRESET = paths.VALUES_DIR / "deepseek-r1-distill-qwen-7b-a3-1p1d-kthena-autoscaling-cost-first.yaml"
RELEASE = paths.RELEASE
ROLE = "modelserving.volcano.sh/role"
MANAGER = "kthena-controller-manager"
MEASURED = paths.REPO / "out" / "cluster-autoscaling.json"


def replicas(api, namespace: str) -> dict[str, int | None]:
    ms = api.get(*MODELSERVING, RELEASE, namespace)
    return {role["name"]: role.get("replicas") for role in ms["spec"]["template"]["roles"]}


def load(cluster, namespace: str, decode_running: float) -> None:
    """Every entry pod's /metrics: prefill idle, decode running `decode_running` requests."""
    table = {}
    for pod in pods_of(cluster.client(), namespace, RELEASE):
        ip = pod["status"].get("podIP")
        if ip and pod["metadata"]["labels"].get("modelserving.volcano.sh/entry") == "true":
            role = pod["metadata"]["labels"][ROLE]
            table[f"{ip}:7100"] = (
                {"vllm:num_requests_running": decode_running} if role == "decode" else {"vllm:num_requests_waiting": 0}
            )
    cluster.set_pod_metrics(table)


# Kthena's autoscaler taking decode from 1 to 3 under load, or back to 3 after an upgrade reset
# it. Measured: 31-32 s and 28 s (docs/autoscaling.md, out/cluster-autoscaling.json); most of it
# is the autoscaler's 15 s reconcile period and its scale-up behaviour, not CPU. 120 s is about
# four times that.
SCALE_TIMEOUT = 120.0


def wait_decode(cluster, namespace: str, count: int, timeout: float = SCALE_TIMEOUT) -> float:
    """Seconds until the ModelServing's decode replicas are `count`, the load kept on every pod."""
    api = cluster.client()
    start = time.monotonic()

    def reached() -> bool:
        load(cluster, namespace, 400)  # new pods get the load as they appear
        return replicas(api, namespace)["decode"] == count

    def seen() -> str:
        served = json.loads(cluster.pod_metrics_file.read_text())
        return f"replicas {replicas(api, namespace)}; the load served at {sorted(served)}"

    wait_for(f"decode replicas {count}", reached, timeout, interval=1, seen=seen)
    return round(time.monotonic() - start, 1)


def role_pods(api, namespace: str, role: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(api, namespace, RELEASE) if p["metadata"]["labels"][ROLE] == role]


def managers(api, namespace: str) -> dict[str, str]:
    ms = api.get(*MODELSERVING, RELEASE, namespace)
    return {m["manager"]: m["operation"] for m in ms["metadata"]["managedFields"]}


@pytest.mark.parametrize("version", paths.HELM_VERSIONS, ids=lambda v: f"helm{v[0]}")
def test_the_autoscaler_owns_the_replicas_across_upgrades(cluster, version: str, tmp_path: Path):
    api = cluster.client()
    runner = Helm(cluster, version, tmp_path / "helm")
    namespace = f"autoscale-helm{version[0]}"
    runner.install(RELEASE, namespace, PRESET)
    seen: dict[str, Any] = {}
    try:
        assert replicas(api, namespace) == {"prefill": 1, "decode": 1}  # the CRD's default
        # 400 running requests against a target of 144 per replica: decode to 3 (ceil(400/144)).
        seen["scale up 1 -> 3 (s)"] = wait_decode(cluster, namespace, 3)
        assert managers(api, namespace).get(MANAGER) == "Update"
        wait_for(
            "3 decode pods",
            lambda: len(role_pods(api, namespace, "decode")) == 3,
            SETTLE_TIMEOUT,
            seen=lambda: pods_brief(role_pods(api, namespace, "decode")),
        )

        keep = ("--set", "autoscaling.decode.maxReplicas=5")
        change = (*keep, "--set", "decode.args.max-num-seqs=4")
        if version.startswith("3."):
            runner.upgrade(RELEASE, namespace, PRESET, sets=keep[1::2])
            assert replicas(api, namespace)["decode"] == 3, "an upgrade that leaves roles alone keeps them"
            runner.upgrade(RELEASE, namespace, PRESET, sets=change[1::2])
        else:
            with pytest.raises(HelmFailed) as refused:
                runner.upgrade(RELEASE, namespace, PRESET, sets=keep[1::2])
            assert "conflict" in str(refused.value) and MANAGER in str(refused.value), refused.value
            assert ".spec.template.roles" in str(refused.value), refused.value
            assert replicas(api, namespace)["decode"] == 3
            runner.run(
                "upgrade", RELEASE, str(paths.CHART), "-n", namespace, "-f", str(PRESET), "--wait=legacy",
                "--server-side=false", *keep,
            )  # fmt: skip
            assert replicas(api, namespace)["decode"] == 3, "client-side: an upgrade that leaves roles alone keeps them"
            runner.run(
                "upgrade", RELEASE, str(paths.CHART), "-n", namespace, "-f", str(PRESET), "--wait=legacy",
                "--server-side=false", *change,
            )  # fmt: skip
        # A role changed: the list arrives without replicas and the CRD defaults them to 1 ...
        assert replicas(api, namespace)["decode"] in (1, 2, 3)
        seen["after a role-changing upgrade"] = replicas(api, namespace)["decode"]
        # ... and the autoscaler, its load unchanged, brings decode back.
        seen["back to 3 after the upgrade (s)"] = wait_decode(cluster, namespace, 3)
        if not version.startswith("3."):
            check_helm4_server_side(cluster, runner, namespace)
        record(MEASURED, f"helm {version}", seen)
    finally:
        runner.uninstall(RELEASE, namespace)
        wait_gone(api, namespace, RELEASE)
        cluster.set_pod_metrics({})


def check_helm4_server_side(cluster, runner: Helm, namespace: str) -> None:
    """helm 4 with server-side apply forced: it takes the roles list and the replicas go back to
    1; and its default wait on a changed AutoscalingPolicy while the load is flat: Kthena v1.0.0
    writes the policy's status (observedGeneration with it) when a reconcile records a new
    scaling result, so after a change with nothing to scale it stays behind, and helm 4 waits
    out its timeout and fails the upgrade."""
    api = cluster.client()
    cluster.set_pod_metrics({})  # no load: nothing raises the replicas again during the check
    runner.run(
        "upgrade", RELEASE, str(paths.CHART), "-n", namespace, "-f", str(PRESET), "--wait=legacy",
        "--server-side=true", "--force-conflicts", "--set", "autoscaling.decode.maxReplicas=5",
    )  # fmt: skip
    assert replicas(api, namespace)["decode"] == 1
    # The wait is meant to run out (the policy's status never catches up, whatever the machine's
    # speed): 15 s only keeps it short.
    hung = runner.run(
        "upgrade", RELEASE, str(paths.CHART), "-n", namespace, "-f", str(PRESET), "--wait", "--timeout", "15s",
        "--set", "autoscaling.decode.maxReplicas=6", check=False,
    )  # fmt: skip
    assert hung.returncode != 0 and "context deadline exceeded" in hung.stderr, hung.stderr
    policy = api.get("workload.serving.volcano.sh/v1alpha1", "AutoscalingPolicy", RELEASE, namespace)
    assert policy["metadata"]["generation"] > policy["status"]["observedGeneration"]
