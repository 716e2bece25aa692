"""A one-screen summary of a rendered deployment."""

from __future__ import annotations

import json
import re

from mooncake_pd import profiles
from mooncake_pd.engines import EngineRun
from mooncake_pd.manifests import Manifest, find, one


def _side_channel(run: EngineRun) -> str:
    """Where the connector's side channel listens: kv_port in its config, or the variable its
    row of chart/files/profiles.yaml names (NIXL, upstream Mooncake)."""
    kv = run.serve["flags"]["kv-transfer-config"]
    if "kv_port" in kv:
        return f"kv_port {kv['kv_port']}"
    for engine in profiles.load()["engines"].values():
        name = (engine["connectors"].get(kv["kv_connector"]) or {}).get("portEnv")
        if name and name in run.run.env:
            return f"{name} {run.run.env[name]}"
    return "side channel port not set"


def _profile(container: dict) -> profiles.Profile | None:
    """The accelerator profile an engine container was rendered for, found by the device resource
    it requests (chart/files/profiles.yaml resourceName; none for the cpu profile)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    devices = {k for k in limits if "/" in k}
    return next((p for p in profiles.all_profiles().values() if {p.resource_name} - {""} == devices), None)


def engine_name(version: str, profile: profiles.Profile | None) -> str:
    """The engine a render runs, as its version's row says it, for the accelerator's family:
    vLLM-Ascend on a family that reads its settings (families.<f>.additionalConfig, "vLLM-Ascend's
    settings"), upstream vLLM elsewhere; the version's description names vLLM-Ascend (v0.13.0:
    "vLLM-Ascend v0.13.0 on vLLM 0.13.0, the guide's"), which an NVIDIA render does not run."""
    engine = profiles.load()["engines"][version]
    if profile is not None and profile.family["additionalConfig"] and engine["vllmAscend"]:
        return str(engine["description"])
    return f"upstream vLLM {engine['vllm']}"


def _engine_id(kv: dict, version: str | None) -> str:
    """The connector config's engine_id as the summary shows it. Where the connector's engine_id
    changes with every start (profiles.yaml engineIdPerStart: NIXL), the start script appends
    `_start$(date +%s%N)` (chart/templates/_script.tpl, mooncake-pd.script.engineIdExport): the
    time the render's stand-in run started the script, not one a pod will have, so it is shown
    as a placeholder."""
    engine_id = str(kv["engine_id"])
    rows = [profiles.load()["engines"][version]] if version else profiles.load()["engines"].values()
    per_start = any((row["connectors"].get(kv["kv_connector"]) or {}).get("engineIdPerStart") for row in rows)
    if per_start:
        return re.sub(r"_start[0-9]+$", "_start<ns at each start>", engine_id)
    return engine_id


def dropped_guide_args(modelserving: Manifest) -> list[str]:
    """The guide's flags (<role>.guideArgs) the chart left out because the engine version or the
    model refuses them, as "key: why" (the ModelServing's annotation mooncake-pd/dropped-guide-args,
    a JSON list, written by chart/templates/_vllm.tpl mooncake-pd.vllm.droppedGuideArgs)."""
    text = (modelserving["metadata"].get("annotations") or {}).get("mooncake-pd/dropped-guide-args")
    return [str(item) for item in json.loads(text)] if text else []


def _accelerator(resources: dict) -> str:
    limits = resources.get("limits", {})
    devices = [f"{v} x {k}" for k, v in limits.items() if "/" in k]
    return ", ".join(devices) or "none"


def summarize(objects: list[Manifest], runs: list[EngineRun]) -> str:
    modelserving = one(objects, "ModelServing")
    spec = modelserving["spec"]
    lines = [
        f"ModelServing {modelserving['metadata']['name']}: {spec['replicas']} serving group(s), "
        f"scheduler {spec['schedulerName']}, recovery {spec['recoveryPolicy']}",
    ]
    version = (modelserving["metadata"].get("annotations") or {}).get("mooncake-pd/engine-version")
    if version:
        container = spec["template"]["roles"][0]["entryTemplate"]["spec"]["containers"][0]
        lines.append(f"Engine version {version} ({engine_name(version, _profile(container))}): {container['image']}")
    lines += [f"  guide's default left out: {d}" for d in dropped_guide_args(modelserving)]
    by_role = {r.role: r for r in runs}
    for role in spec["template"]["roles"]:
        container = role["entryTemplate"]["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        kv = sorted(v for k, v in ports.items() if k.startswith("kv-"))
        flags = by_role[role["name"]].serve["flags"]
        # With autoscaling the chart leaves replicas to Kthena's autoscaler (the CRD starts at 1).
        replicas = role.get("replicas", "autoscaled")
        lines.append(
            f"  {role['name']:<8} replicas {replicas} (+{role['workerReplicas']} workers), "
            f"TP {flags['tensor-parallel-size']} x DP {flags['data-parallel-size']}, "
            f"devices per pod {_accelerator(container['resources'])}"
        )
        lines.append(
            f"           ports: serve {ports['server']}, dp-rpc {ports['dp-rpc']}, kv {kv[0]}-{kv[-1]}" if kv else ""
        )
    first = runs[0].serve["flags"]["kv-transfer-config"]
    sizes = first.get("kv_connector_extra_config", {})
    views = ", ".join(
        f"{role} TP {sizes[role]['tp_size']} / DP {sizes[role]['dp_size']}"
        for role in ("prefill", "decode")
        if role in sizes
    )
    lines.append(
        f"KV connector: {first['kv_connector']} ({first.get('kv_connector_module_path', 'built-in')})"
        + (f"; connector's view: {views}" if views else "")
    )
    for run in runs:
        kv = run.serve["flags"]["kv-transfer-config"]
        lines.append(f"  {run.role}: {kv['kv_role']}, {_side_channel(run)}, engine_id {_engine_id(kv, version)}")
    proxies = [s for s in find(objects, "Service") if s["metadata"]["name"].endswith("-proxy")]
    for svc in proxies:
        port = svc["spec"]["ports"][0]["port"]
        name = svc["metadata"]["name"]
        namespace = svc["metadata"].get("namespace", "default")
        lines.append(f"Proxy: http://{name}.{namespace}.svc:{port}/v1/chat/completions")
    if not proxies:
        lines.append("Proxy: none (router.type)")
    replica_services = [s["metadata"]["name"] for s in find(objects, "Service") if s not in proxies]
    lines.append(f"Replica Services: {', '.join(replica_services) or 'none'}")
    return "\n".join(line for line in lines if line)
