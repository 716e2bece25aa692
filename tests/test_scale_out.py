"""Scale-out takes values changes only: serving groups, role replicas, multi-node roles and the
Kthena router render, validate, and wire exactly the pods Kthena creates."""

from __future__ import annotations

import itertools

import pytest

from conftest import Rendered, Renderer, assert_valid
from mooncake_pd import engines, scriptrun, validate
from support.kthena_pods import expected_pods, pod_labels, selects
from support.proxyargs import parse_proxy_args


def scenario(groups: int, prefills: int, decode_workers: int, router: str) -> dict:
    values: dict = {"servingGroups": groups, "prefill": {"replicas": prefills}, "router": {"type": router}}
    if decode_workers:
        values["decode"] = {
            "workerReplicas": decode_workers,
            "parallelism": {"tensor": 2, "data": 4 * (decode_workers + 1), "dataLocal": 4},
        }
    if router == "kthena":
        values.setdefault("decode", {})["port"] = 7100
    return values


MATRIX = list(itertools.product([1, 2], [1, 3], [0, 1], ["proxy", "kthena", "none"]))
IDS = [f"g{g}-p{p}-w{w}-{r}" for g, p, w, r in MATRIX]


@pytest.mark.parametrize(("groups", "prefills", "workers", "router"), MATRIX, ids=IDS)
def test_matrix_renders_validates_and_covers_every_pod(render: Renderer, crds, groups, prefills, workers, router):
    if router == "proxy" and groups > 1:
        # Kthena renumbers the serving groups it recreates; the proxy's Services could not follow.
        error = render.error(overrides=scenario(groups, prefills, workers, router))
        assert f"servingGroups: {groups} with router.type proxy" in error
        return
    rendered = render(overrides=scenario(groups, prefills, workers, router))
    assert_valid(rendered, crds)
    for obj in rendered.objects:
        if obj["apiVersion"].split("/")[0].endswith("serving.volcano.sh"):
            assert validate.missing_crd_defaults(obj, crds) == [], obj["kind"]

    ms = rendered.modelserving
    assert ms["spec"]["replicas"] == groups
    decode = rendered.role("decode")
    assert decode["workerReplicas"] == workers
    assert ("workerTemplate" in decode) == bool(workers)
    pods = expected_pods(ms)
    assert len(pods) == groups * (prefills + (workers + 1))

    # One Service per entry pod, selecting exactly it (never a worker).
    services = [s for s in rendered.find("Service") if not s["metadata"]["name"].endswith("-proxy")]
    assert len(services) == groups * (prefills + 1)
    for service in services:
        assert len([p for p in pods if selects(service, p, ms)]) == 1
        assert all(p.index == 0 for p in pods if selects(service, p, ms))

    # Every pod's start script runs (stub vllm) with its DP ranks inside the role's DP size.
    for role in ms["spec"]["template"]["roles"]:
        for index in range(role["workerReplicas"] + 1):
            pod = engines.PodIdentity(
                "deepseek-pd", groups - 1, role["name"], role["replicas"] - 1, index, workers=role["workerReplicas"]
            )
            template = role["entryTemplate"] if index == 0 else role["workerTemplate"]
            flags = engines.run_template(rendered.objects, template, pod).serve["flags"]
            local = int(flags.get("data-parallel-size-local", flags["data-parallel-size"]))
            start = int(flags.get("data-parallel-start-rank", 0))
            assert start >= 0 and start + local <= int(flags["data-parallel-size"])

    kinds = {o["kind"] for o in rendered.objects}
    assert ("Deployment" in kinds) == (router == "proxy")
    assert ({"ModelServer", "ModelRoute"} <= kinds) == (router == "kthena")
    if router == "kthena":
        check_model_server(rendered, pods)


def check_model_server(rendered: Rendered, pods) -> None:
    server = rendered.one("ModelServer")
    spec = server["spec"]
    assert spec["kvConnector"] == {"type": "mooncake"}
    assert spec["workloadPort"]["port"] == 7100
    assert spec["inferenceEngine"] == "vLLM"
    selector = spec["workloadSelector"]
    group_key = selector["pdGroup"]["groupKey"]
    for pod in pods:
        labels = pod_labels(rendered.modelserving, pod)
        # Kthena binds every Ready pod that matches matchLabels and polls it on workloadPort
        # (modelserver_controller.go): only entry pods serve, so workers must not match.
        bound = all(labels.get(k) == v for k, v in selector["matchLabels"].items())
        assert bound == (pod.index == 0), pod
        as_prefill = bound and all(labels.get(k) == v for k, v in selector["pdGroup"]["prefillLabels"].items())
        as_decode = bound and all(labels.get(k) == v for k, v in selector["pdGroup"]["decodeLabels"].items())
        assert as_prefill == (pod.role == "prefill" and pod.index == 0)
        assert as_decode == (pod.role == "decode" and pod.index == 0)
        assert group_key in labels
    route = rendered.one("ModelRoute")
    assert route["spec"]["modelName"] == "ds_r1"
    assert route["spec"]["rules"][0]["targetModels"] == [{"modelServerName": "deepseek-pd", "weight": 100}]
    test_env = {e["name"]: e["value"] for e in rendered.one("Pod")["spec"]["containers"][0]["env"]}
    assert test_env["CHAT_URL"] == "http://kthena-router.kthena-system.svc:80/v1/chat/completions"
    # One workloadPort for both roles: the chart keeps them on different nodes.
    for role in ("prefill", "decode"):
        other = "decode" if role == "prefill" else "prefill"
        terms = rendered.role(role)["entryTemplate"]["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert terms[-1]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == other
        assert terms[-1]["topologyKey"] == "kubernetes.io/hostname"


def test_proxy_lists_follow_replicas(render: Renderer):
    rendered = render(overrides={"prefill": {"replicas": 3}, "decode": {"replicas": 2}})
    proxy = parse_proxy_args(rendered.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    assert proxy.prefiller_hosts == tuple(f"deepseek-pd-0-prefill-{r}.default.svc" for r in range(3))
    assert proxy.decoder_hosts == tuple(f"deepseek-pd-0-decode-{r}.default.svc" for r in range(2))
    assert proxy.decoder_ports == (7101,) * 2


THREE_NODE_DECODE = {"decode": {"workerReplicas": 2, "parallelism": {"tensor": 1, "data": 12, "dataLocal": 4}}}


def test_multi_node_ranks_are_consistent(render: Renderer):
    """Entry and every worker of a 3-node decode instance: DP ranks 0..11 exactly once, one head
    address and RPC port, an engine_id per node, the connector's dp_size the global DP."""
    rendered = render(overrides=THREE_NODE_DECODE)
    role = rendered.role("decode")
    ranks: list[int] = []
    heads, engine_ids, rank_ids = set(), set(), set()
    for index in range(role["workerReplicas"] + 1):
        pod = engines.PodIdentity("deepseek-pd", 0, "decode", 0, index, workers=role["workerReplicas"])
        template = role["entryTemplate"] if index == 0 else role["workerTemplate"]
        run = engines.run_template(rendered.objects, template, pod)
        flags = run.serve["flags"]
        local = int(flags["data-parallel-size-local"])
        start = int(flags.get("data-parallel-start-rank", 0))
        ranks += range(start, start + local)
        assert flags["data-parallel-size"] == "12"
        assert flags["tensor-parallel-size"] == "1"
        assert ("headless" in flags) == (index > 0)
        assert ("port" in flags) == (index == 0)
        heads.add((flags["data-parallel-address"], flags["data-parallel-rpc-port"]))
        kv = flags["kv-transfer-config"]
        assert kv["kv_connector_extra_config"]["decode"] == {"tp_size": 1, "dp_size": 12}
        engine_ids.add(kv["engine_id"])
        # vLLM appends the *local* DP rank to engine_id (vllm/v1/engine/core.py, 0.13.0).
        rank_ids.update(f"{kv['engine_id']}_dp{r}" for r in range(local))
    assert sorted(ranks) == list(range(12))
    assert heads == {("deepseek-pd-0-decode-0-0.default", "12322")}
    assert engine_ids == {f"deepseek-pd-0_decode-0_node{i}" for i in range(3)}
    assert len(rank_ids) == 12, "every DP rank of the instance needs its own engine_id"


@pytest.mark.parametrize("index", ["0", "x", ""])
def test_worker_script_refuses_a_bad_worker_index(render: Renderer, index: str):
    rendered = render(overrides=THREE_NODE_DECODE)
    role = rendered.role("decode")
    pod = engines.PodIdentity("deepseek-pd", 0, "decode", 0, 1, workers=2)
    container = role["workerTemplate"]["spec"]["containers"][0]
    env = {**engines.container_env(container, pod), "WORKER_INDEX": index}
    with pytest.raises(scriptrun.ScriptFailed, match="WORKER_INDEX must be a worker number"):
        engines.run_script(rendered.objects, role["workerTemplate"], env)


def test_worker_pods_run_no_server(render: Renderer):
    rendered = render(overrides=THREE_NODE_DECODE)
    worker = rendered.role("decode")["workerTemplate"]["spec"]["containers"][0]
    assert worker["args"] == ["/workspace/decode-worker.sh"]
    assert "readinessProbe" not in worker and "livenessProbe" not in worker
    assert {p["name"] for p in worker["ports"]} == {f"kv-{i}" for i in range(12)}
    assert worker["resources"]["limits"]["huawei.com/ascend-1980"] == "4"
    scripts = rendered.one("ConfigMap")["data"]
    assert set(scripts) == {
        "prefill.sh",
        "decode.sh",
        "decode-worker.sh",
        "preflight.py",
        "engine_args.py",
        "kv_transfer_config.py",
        "chat_check.py",
        "kv_canary.py",
        "proxy_guard.py",
    }


def test_scheduling_and_placement(render: Renderer, crds):
    rendered = render(
        overrides={
            "volcano": {"queue": "llm-serving"},
            "prefill": {
                "replicas": 2,
                "nodeSelector": {"pool": "npu"},
                "tolerations": [{"key": "npu", "operator": "Exists"}],
            },
            "gangPolicy": {"minRoleReplicas": {"prefill": 1, "decode": 1}},
            "networkTopology": {"groupPolicy": {"mode": "hard", "highestTierAllowed": 1}},
            "placement": {"separateRoles": True},
            "decode": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                            ]
                        }
                    }
                }
            },
        }
    )
    assert_valid(rendered, crds)
    ms = rendered.modelserving
    assert ms["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "llm-serving"
    assert ms["spec"]["template"]["gangPolicy"] == {"minRoleReplicas": {"prefill": 1, "decode": 1}}
    assert ms["spec"]["template"]["networkTopology"]["groupPolicy"]["highestTierAllowed"] == 1
    prefill = rendered.role("prefill")["entryTemplate"]["spec"]
    assert prefill["nodeSelector"] == {"pool": "npu"}
    assert prefill["tolerations"] == [{"key": "npu", "operator": "Exists"}]
    decode = rendered.role("decode")["entryTemplate"]["spec"]["affinity"]
    assert "nodeAffinity" in decode, "the user's affinity is kept"
    anti = decode["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "prefill"


def test_separated_roles_may_share_port_numbers(render: Renderer, crds):
    """On different nodes the roles may reuse each other's ports; within a role they still may not."""
    same = {"port": 7100, "dataParallelRpcPort": 12321, "kvPort": 18000}
    assert_valid(render(overrides={"placement": {"separateRoles": True}, "decode": same}), crds)
    message = render.error(overrides={"placement": {"separateRoles": True}, "decode": {"dataParallelRpcPort": 18100}})
    assert "decode.kvPort: ports 18100-18107 overlap decode.dataParallelRpcPort" in message
