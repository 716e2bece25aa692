"""The engines' API key (engine.apiKeySecret) comes by reference and reaches everything that calls
an engine: the engines read it from the Secret as VLLM_API_KEY, and the chart's clients (the PD
proxy, the helm test's chat check and KV canary, the canary's CronJob, the benchmark) read it as
OPENAI_API_KEY and send it as a bearer token; `mooncake-pd verify` sends it from its own
environment. The key never appears as a literal in values, argv or a ConfigMap. (The e2e proves
on real vLLM engines that /v1 answers 401 without it and PD works with it.)"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import Rendered, Renderer
from mooncake_pd import chartfiles, release_io, validate

SECRET = {"name": "llm-api-key", "key": "token"}
EVERYTHING = {
    "engine": {"apiKeySecret": SECRET},
    "benchmark": {"enabled": True},
    "test": {"kvCanary": {"cronJob": {"enabled": True}}},
}
REFERENCE = {"secretKeyRef": {"name": "llm-api-key", "key": "token"}}


def containers(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """Every container the release runs, as '<kind or role>/<container>' (the engines' as
    'ModelServing <role> <template>/<container>')."""
    found = {}
    for where, pod in validate.pod_templates(rendered.modelserving):
        for container in pod["spec"].get("containers", []):
            found[f"ModelServing {where.split(' role ')[1]}/{container['name']}"] = container
    for obj in rendered.objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        pod = spec.get("template", {}).get("spec") if obj["kind"] != "Pod" else spec
        for container in (pod or {}).get("containers", []) if obj["kind"] != "ModelServing" else []:
            found[f"{obj['kind']}/{container['name']}"] = container
    return found


def key_env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom") for e in container.get("env", []) if e["name"].endswith("API_KEY")}


@pytest.mark.parametrize("router", ["proxy", "kthena"])
def test_every_engine_reads_the_key_and_every_client_sends_it(render: Renderer, router: str):
    kthena = {"router": {"type": "kthena"}, "decode": {"port": 7100}}
    rendered = render(overrides={**EVERYTHING, **(kthena if router == "kthena" else {})})
    found = containers(rendered)
    engines = {name for name in found if name.startswith("ModelServing ")}
    clients = set(found) - engines
    assert engines and {"Pod/chat", "Pod/kv-canary", "CronJob/kv-canary", "Job/bench"} <= clients
    assert ("Deployment/proxy" in clients) == (router == "proxy")
    for name in engines:
        assert key_env(found[name]) == {"VLLM_API_KEY": REFERENCE}, name
    for name in clients:
        assert key_env(found[name]) == {"OPENAI_API_KEY": REFERENCE}, name


def test_without_a_key_nothing_asks_for_one(render: Renderer):
    rendered = render(overrides={k: v for k, v in EVERYTHING.items() if k != "engine"})
    assert {name: key_env(c) for name, c in containers(rendered).items() if key_env(c)} == {}
    assert "API_KEY" not in rendered.one("ConfigMap")["data"].get("prefill.sh", "")


def test_the_key_is_in_no_configmap_and_no_argv(render: Renderer):
    rendered = render(overrides=EVERYTHING)
    for configmap in rendered.find("ConfigMap"):
        assert "llm-api-key" not in str(configmap)
    for name, container in containers(rendered).items():
        argv = " ".join([*container.get("command", []), *container.get("args", [])])
        assert "--api-key" not in argv and "llm-api-key" not in argv, name


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"engine": {"env": {"VLLM_API_KEY": "sk-1"}}},
            "engine.env.VLLM_API_KEY: a key here is written into the scripts",
        ),
        ({"prefill": {"env": {"OPENAI_API_KEY": "sk-1"}}}, "prefill.env.OPENAI_API_KEY: a key here"),
        ({"decode": {"args": {"api-key": "sk-1"}}}, "decode.args.api-key: a key as a flag shows in the pod spec"),
    ],
)
def test_a_literal_key_is_refused_naming_the_secret_to_use(render: Renderer, values: dict[str, Any], message: str):
    error = render.error(overrides=values)
    assert message in error and "engine.apiKeySecret.name" in error


def test_the_chat_check_and_the_canary_send_the_key_as_a_bearer_token():
    chat = chartfiles.program("chat_check")
    assert chat.headers("sk-1")["Authorization"] == "Bearer sk-1"
    assert "Authorization" not in chat.headers("")
    canary = chartfiles.program("kv_canary")
    sent: list[dict[str, str]] = []

    def post(url: str, body: dict[str, Any], timeout: float, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        sent.append(headers)
        return 200, {}

    canary.with_api_key(post, "sk-1")("http://prefill:7100/v1/completions", {}, 1.0, {"X-Request-Id": "r"})
    canary.with_api_key(post, "")("http://prefill:7100/v1/completions", {}, 1.0, {"X-Request-Id": "r"})
    assert sent == [{"X-Request-Id": "r", "Authorization": "Bearer sk-1"}, {"X-Request-Id": "r"}]
    assert release_io.auth_headers("sk-1") == {"Authorization": "Bearer sk-1"} and release_io.auth_headers("") == {}
