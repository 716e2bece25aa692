"""The chart refuses what an engine version's own data (chart/files/engines/<version>/
config-keys.json, registered-names.json, serve-checks.json) say vLLM refuses, and only that: the
valid forms next to each refused one render (tests/bad-values/engine-config-key-*,
engine-name-*, engine-check-* hold the refused ones, and the sidecar-* ones the sidecars' checks
whose valid forms are here too)."""

from __future__ import annotations

import json

import pytest

from conftest import Renderer
from mooncake_pd import paths

V033 = {"accelerator": {"type": "nvidia"}, "engine": {"version": "v0.33.0"}}

VALID = {
    # Known keys at both levels of --compilation-config, and its JSON as text.
    "compilation-config-known-keys": {
        "engine": {"args": {"compilation-config": {"mode": 3, "pass_config": {"fuse_norm_quant": True}}}}
    },
    "compilation-config-as-json-text": {"decode": {"args": {"compilation-config": '{"cudagraph_mode": "FULL"}'}}},
    # Registered names, an attention backend in any case (vLLM upper-cases it), and a parser a
    # plugin registers (not checked: the plugin may add it).
    "registered-parsers": {
        "engine": {
            "args": {
                "reasoning-parser": "deepseek_r1",
                "enable-auto-tool-choice": True,
                "tool-call-parser": "hermes",
                "attention-backend": "flash_attn",
            }
        }
    },
    "parser-from-a-plugin": {
        "engine": {"args": {"reasoning-parser": "mine", "reasoning-parser-plugin": "/plugins/mine.py"}}
    },
    # vLLM only looks a tool-call parser up beside --enable-auto-tool-choice.
    "tool-call-parser-without-auto-choice": {"engine": {"args": {"tool-call-parser": "not-looked-up"}}},
    "log-outputs-with-log-requests": {"engine": {"args": {"enable-log-outputs": True, "enable-log-requests": True}}},
    # "auto" is a word vLLM 0.33's AttentionConfig takes beside the enum's names.
    "attention-backend-auto-v0.33": {**V033, "engine": {"version": "v0.33.0", "args": {"attention-backend": "auto"}}},
    "sidecar-valid": {
        "engine": {
            "extraContainers": [
                {
                    "name": "exporter",
                    "image": "quay.io/prometheus/node-exporter:v1.8.2",
                    "ports": [{"name": "metrics", "containerPort": 9100}],
                    "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                    "env": [
                        {"name": "GROUP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "PLAIN", "value": "1"},
                    ],
                    "securityContext": {"privileged": True, "allowPrivilegeEscalation": True},
                }
            ]
        }
    },
}


@pytest.mark.parametrize("overrides", list(VALID.values()), ids=list(VALID))
def test_valid_forms_render(render: Renderer, overrides):
    render(overrides=overrides)


def test_the_rules_read_each_versions_own_data(render: Renderer):
    """A name registered at one version and not at another is refused by the version's data,
    not by a list of ours: a reasoning parser vLLM 0.33.0 registers that 0.13.0 does not."""
    names = {
        v: set(json.loads((paths.ENGINE_DATA / v / "registered-names.json").read_text())["reasoningParsers"])
        for v in ("v0.13.0", "v0.33.0")
    }
    newer = sorted(names["v0.33.0"] - names["v0.13.0"])
    assert newer, "no reasoning parser is new in 0.33.0; pick another pair of versions"
    args = {"reasoning-parser": newer[0]}
    render(overrides={**V033, "engine": {"version": "v0.33.0", "args": args}})
    message = render.error(overrides={"engine": {"args": args}})
    assert f'engine.args.reasoning-parser: "{newer[0]}" is not a reasoning parser vLLM 0.13.0 registers' in message
