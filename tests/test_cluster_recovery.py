"""Recovery and rollouts as Kthena v1.0.0's controller does them (issue #25 item 6), on the
local cluster: KWOK fails an engine pod on demand (annotation mooncake-pd.test/fail, stage
pod-fail-on-annotation in cluster/kwok-stages.yaml) and helm upgrades change a start script.
What the controller did is asserted here and written to out/cluster-recovery.json; the figures
and their consequences are in docs/operations.md ("Recovery and rollouts").

What it found: Kthena renumbers what it recreates. A serving group recreated after a failure or
replaced by a rolling update comes back with the next free ordinal (deepseek-pd-0 -> -2), and a
role replica recreated under RoleRecreate with the next free role index (decode-0 -> decode-2).
A lone group or replica comes back under its own name. The chart's per-replica Services
(services-replicas.yaml, what the PD proxy is given) select by group and role index, so beside
another group or replica they lose the one recreated: the proxy would keep sending to a Service
without endpoints. The chart therefore refuses router.type proxy with several serving groups, or
with several role replicas under RoleRecreate or RoleRollingUpdate (validate/_router.tpl); the
Kthena router pairs pods by their labels and follows the new names (both shown below)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mooncake_pd import manifests, paths
from support.kthena_pods import matches
from support.kube.api import wait_for
from support.kube.releases import HELM_TIMEOUT, SETTLE_TIMEOUT, Helm, pods_of, record, release_fixture
from support.waits import brief

pytestmark = pytest.mark.cluster
RELEASE = paths.RELEASE
LABEL = "modelserving.volcano.sh"
MEASURED = paths.REPO / "out" / "cluster-recovery.json"
FAST = ("restartGracePeriodSeconds=0",)  # the default 60 s grace only delays what follows
# Several groups or role replicas that Kthena renumbers: behind the Kthena router (the chart
# refuses them with the proxy).
KTHENA_ROUTER = ("router.type=kthena", "decode.port=7100")
TWO_GROUPS = (*KTHENA_ROUTER, "servingGroups=2")


def snapshot(api, namespace: str) -> dict[str, tuple[str, str, str, bool]]:
    """name -> (uid, revision, phase, terminating) of the release's engine pods."""
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            p["metadata"]["labels"].get(f"{LABEL}/revision", ""),
            p["status"].get("phase", ""),
            bool(p["metadata"].get("deletionTimestamp")),
        )
        for p in pods_of(api, namespace, RELEASE)
    }


# A helm upgrade's rollout watched to its end: one group or role replica after the other, each
# gone and back within a second here (group 1 between the snapshots kept at 1.6 s and 2.2 s,
# dc07272, out/cluster-recovery.json). 90 s leaves a loaded machine more than ten times that.
# (A failed pod recreated with no grace, FAST, and a release's pods settling: SETTLE_TIMEOUT.)
ROLLOUT_S = 90.0


def brief_snapshot(now: dict[str, tuple[str, str, str, bool]]) -> str:
    """A snapshot as a timeout names it: each pod's name, revision, phase, terminating or not."""
    return (
        "; ".join(
            f"{name} {revision[:8]} {phase or 'no phase'}{' terminating' if going else ''}"
            for name, (_, revision, phase, going) in sorted(now.items())
        )
        or "no pods"
    )


def watch(api, namespace: str, until, timeout: float = SETTLE_TIMEOUT, what: str = "the pods settled") -> list:
    """Snapshots every 0.2 s, each kept (with its second) when it differs from the last, until
    `until(snapshot)`; the timeline. On time out, `what` and the last snapshot."""
    start = time.monotonic()
    seen: list[tuple[float, dict[str, Any]]] = []

    def settled() -> bool:
        now = snapshot(api, namespace)
        if not seen or seen[-1][1] != now:
            seen.append((round(time.monotonic() - start, 1), now))
        return bool(until(now))

    def last() -> str:
        if not seen:
            return "none"
        return f"{len(seen)} changes, the last at {seen[-1][0]} s: {brief_snapshot(seen[-1][1])}"

    wait_for(f"{what} in {namespace}", settled, timeout, interval=0.2, seen=last)
    return seen


def upgrade_watching(runner: Helm, api, namespace: str, sets: tuple[str, ...], until) -> list:
    """helm upgrade in a thread while the pods are watched from before it starts."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.upgrade(RELEASE, namespace, sets=sets)
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        timeline = watch(api, namespace, until, timeout=ROLLOUT_S, what="the rollout")
    except TimeoutError as e:
        thread.join(timeout=HELM_TIMEOUT + 20)
        raise TimeoutError(f"{e}; helm upgrade: {brief(errors[0]) if errors else 'no error'}") from None
    finally:
        # helm ends within HELM_TIMEOUT (it is killed there): a little more, then say so.
        thread.join(timeout=HELM_TIMEOUT + 20)
    if thread.is_alive():
        raise TimeoutError(f"helm upgrade in {namespace}: still running {HELM_TIMEOUT + 20} s after the rollout")
    if errors:
        raise errors[0]
    return timeline


def fail(api, namespace: str, pod: str) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod}}
    patch = {"metadata": {"annotations": {"mooncake-pd.test/fail": "true"}}}
    api.request("PATCH", api.path(obj, namespace), patch, "application/merge-patch+json")


def _record(key: str, timeline: list[tuple[float, dict[str, Any]]]) -> None:
    record(MEASURED, key, [
        {"t": t, "pods": {n: {"revision": v[1][:8], "phase": v[2], "terminating": v[3]} for n, v in pods.items()}}
        for t, pods in timeline
    ])  # fmt: skip


def _settled(names: set[str]):
    def done(now: dict[str, Any]) -> bool:
        return set(now) == names and all(v[2] == "Running" and not v[3] for v in now.values())

    return done


# release(namespace, *sets): installed with FAST and the test's --set values; uninstalled afterwards.
release = release_fixture(*FAST)


def test_serving_group_recreate_replaces_the_group_under_a_new_ordinal(cluster, release):
    api = cluster.client()
    namespace = "recover-group"
    release(namespace, *TWO_GROUPS)  # recoveryPolicy ServingGroupRecreate: the default
    before = watch(api, namespace, _settled({f"{RELEASE}-{g}-{r}-0-0" for g in (0, 1) for r in ("prefill", "decode")}))[
        -1
    ][1]
    fail(api, namespace, f"{RELEASE}-0-decode-0-0")
    after = {f"{RELEASE}-{g}-{r}-0-0" for g in (1, 2) for r in ("prefill", "decode")}
    timeline = watch(api, namespace, _settled(after))
    _record("ServingGroupRecreate, decode of group 0 failed", timeline)
    final = timeline[-1][1]
    # The whole of group 0 went, prefill too; group 1 was left alone (same pods).
    assert all(final[n][0] == before[n][0] for n in (f"{RELEASE}-1-prefill-0-0", f"{RELEASE}-1-decode-0-0"))
    assert not any(n.startswith(f"{RELEASE}-0-") for n in final)


def test_role_recreate_replaces_the_role_replica_under_a_new_index(cluster, release):
    api = cluster.client()
    namespace = "recover-role"
    release(namespace, *KTHENA_ROUTER, "recoveryPolicy=RoleRecreate", "decode.replicas=2")
    start = {f"{RELEASE}-0-prefill-0-0", f"{RELEASE}-0-decode-0-0", f"{RELEASE}-0-decode-1-0"}
    before = watch(api, namespace, _settled(start))[-1][1]
    fail(api, namespace, f"{RELEASE}-0-decode-0-0")
    after = {f"{RELEASE}-0-prefill-0-0", f"{RELEASE}-0-decode-1-0", f"{RELEASE}-0-decode-2-0"}
    timeline = watch(api, namespace, _settled(after))
    _record("RoleRecreate, decode-0 failed", timeline)
    final = timeline[-1][1]
    # Only the failed role replica went; prefill and the other decode replica stayed.
    for name in (f"{RELEASE}-0-prefill-0-0", f"{RELEASE}-0-decode-1-0"):
        assert final[name][0] == before[name][0], name


def test_serving_group_rolling_update_replaces_groups_highest_first(cluster, release):
    api = cluster.client()
    namespace = "rollout-groups"
    runner = release(namespace, *TWO_GROUPS)
    names = {f"{RELEASE}-{g}-{r}-0-0" for g in (0, 1) for r in ("prefill", "decode")}
    old = watch(api, namespace, _settled(names))[-1][1]
    revision = {v[1] for v in old.values()}

    def rolled(now: dict[str, Any]) -> bool:
        return len(now) == 4 and all(v[1] not in revision and v[2] == "Running" and not v[3] for v in now.values())

    sets = (*FAST, *TWO_GROUPS, "decode.args.max-num-seqs=4")
    timeline = upgrade_watching(runner, api, namespace, sets, rolled)
    _record("ServingGroupRollingUpdate, maxUnavailable 1, 2 groups", timeline)
    groups = sorted({n.split("-")[2] for n in timeline[-1][1]})
    assert groups != ["0", "1"], "the replaced groups keep their ordinals"

    # The first group to go is the highest ordinal (group 1), while group 0 still serves. A pod
    # is gone when it is terminating, missing, or another pod under its name: with no grace,
    # Kthena v1.0.0 deleted and recreated group 1 under the same names between two snapshots
    # (deleteOutdatedServingGroups, pkg/model-serving-controller/controller/
    # model_serving_controller.go at v1.0.0, deletes from the highest ordinal down).
    def gone(now: dict[str, Any]) -> set[str]:
        return {n for n in old if n not in now or now[n][3] or now[n][0] != old[n][0]}

    going = next((g for g in (gone(s) for _, s in timeline) if g), set())
    assert going and all(n.startswith(f"{RELEASE}-1-") for n in going), going


def test_role_rolling_update_rolls_only_the_changed_role(cluster, release):
    api = cluster.client()
    namespace = "rollout-roles"
    sets = (
        *KTHENA_ROUTER,
        "recoveryPolicy=RoleRecreate",
        "rolloutStrategy.type=RoleRollingUpdate",
        "decode.replicas=2",
    )
    runner = release(namespace, *sets)
    names = {f"{RELEASE}-0-prefill-0-0", f"{RELEASE}-0-decode-0-0", f"{RELEASE}-0-decode-1-0"}
    old = watch(api, namespace, _settled(names))[-1][1]

    def rolled(now: dict[str, Any]) -> bool:
        decode = [v for n, v in now.items() if "-decode-" in n]
        return len(decode) == 2 and all(
            v[0] not in {o[0] for o in old.values()} and v[2] == "Running" and not v[3] for v in decode
        )

    timeline = upgrade_watching(runner, api, namespace, (*FAST, *sets, "decode.args.max-num-seqs=4"), rolled)
    _record("RoleRollingUpdate, decode changed, 2 decode replicas", timeline)
    prefill = f"{RELEASE}-0-prefill-0-0"
    assert timeline[-1][1][prefill][0] == old[prefill][0], "prefill's template did not change: left alone"


def _selected(selector: dict[str, str], pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods if matches(selector, p["metadata"]["labels"])]


def test_a_lone_group_comes_back_under_its_own_name(cluster, release):
    """The defaults (one group, the PD proxy): the recreated group is deepseek-pd-0 again, and
    the proxy's Services select its new pods."""
    api = cluster.client()
    namespace = "recover-lone"
    runner = release(namespace)
    names = {f"{RELEASE}-0-prefill-0-0", f"{RELEASE}-0-decode-0-0"}
    before = watch(api, namespace, _settled(names))[-1][1]
    fail(api, namespace, f"{RELEASE}-0-prefill-0-0")
    watch(api, namespace, lambda now: _settled(names)(now) and all(now[n][0] != before[n][0] for n in names))
    pods = pods_of(api, namespace, RELEASE)
    services = {s["metadata"]["name"]: s for s in manifests.find(runner.manifest(RELEASE, namespace), "Service")}
    assert _selected(services[f"{RELEASE}-0-prefill-0"]["spec"]["selector"], pods) == [f"{RELEASE}-0-prefill-0-0"]
    assert _selected(services[f"{RELEASE}-0-decode-0"]["spec"]["selector"], pods) == [f"{RELEASE}-0-decode-0-0"]


def test_beside_another_group_the_ordinal_services_lose_it_and_the_router_does_not(cluster, release):
    """Why the chart refuses the proxy with several groups: after group 0 comes back as group 2,
    the per-replica Service of group 0 selects no pod and none selects group 2, while the Kthena
    router's ModelServer, which selects by role labels, binds the new group's entry pods."""
    api = cluster.client()
    namespace = "recover-services"
    runner = release(namespace, *TWO_GROUPS)
    watch(api, namespace, _settled({f"{RELEASE}-{g}-{r}-0-0" for g in (0, 1) for r in ("prefill", "decode")}))
    fail(api, namespace, f"{RELEASE}-0-prefill-0-0")
    watch(api, namespace, _settled({f"{RELEASE}-{g}-{r}-0-0" for g in (1, 2) for r in ("prefill", "decode")}))
    objects = runner.manifest(RELEASE, namespace)
    services = {s["metadata"]["name"]: s for s in manifests.find(objects, "Service")}
    pods = pods_of(api, namespace, RELEASE)
    assert _selected(services[f"{RELEASE}-0-prefill-0"]["spec"]["selector"], pods) == []
    assert _selected(services[f"{RELEASE}-1-prefill-0"]["spec"]["selector"], pods) == [f"{RELEASE}-1-prefill-0-0"]
    assert not any(f"{RELEASE}-2-prefill-0-0" in _selected(s["spec"]["selector"], pods) for s in services.values())
    selector = manifests.one(objects, "ModelServer")["spec"]["workloadSelector"]
    prefill = {**selector["matchLabels"], **selector["pdGroup"]["prefillLabels"]}
    bound = _selected(prefill, pods)
    assert sorted(bound) == [f"{RELEASE}-1-prefill-0-0", f"{RELEASE}-2-prefill-0-0"]
