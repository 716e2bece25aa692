"""Every string that reaches the start scripts arrives literally: adversarial values (spaces,
both quotes, $(...), backticks, ;, globs, non-ASCII) end up byte for byte in vllm's argv and
environment, and nothing they contain is executed. Control characters (newlines, tabs) are
refused by the schema before any script sees them; nested JSON may still carry them, escaped."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Renderer
from mooncake_pd import engines


def nasty(marker: Path, tag: str) -> str:
    return (
        f"{tag} a b  'single' \"double\" $(touch {marker}-{tag}-dollar) `touch {marker}-{tag}-tick` "
        f"; touch {marker}-{tag}-semi && echo \\ $HOME ${{PATH}} ünïcødé 模型 *?[x] ~ !"
    )


# A NIC name: at most 15 characters, no whitespace, '/' or ':', and still hostile.
NIC = "e'\"$(x)`y`;*?!"


@pytest.fixture(scope="module")
def marker() -> Iterator[Path]:
    # A short path: the served name holds it three times and is at most 256 characters.
    folder = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    yield folder / "ran"
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def overrides(marker: Path) -> dict:
    return {
        "model": {
            "servedName": nasty(marker, "served"),
            "path": "/models/" + nasty(marker, "path"),
            "hfOverrides": {"head_dim": 128, "note": nasty(marker, "hf")},
        },
        "network": {"interface": NIC},
        "engine": {
            "env": {"SHARED_VALUE": nasty(marker, "env")},
            "args": {"tokenizer": nasty(marker, "flag")},
        },
        "prefill": {
            "args": {
                "override-generation-config": {"note": nasty(marker, "json")},
                "allowed-origins": [nasty(marker, "list1"), nasty(marker, "list2")],
            }
        },
        "kvTransfer": {"extraConfig": {"note": nasty(marker, "kv") + "\n second line\ttab"}},
    }


def test_values_arrive_literally(render: Renderer, overrides, marker: Path):
    rendered = render(overrides=overrides)
    runs = {r.role: r for r in engines.entry_runs(rendered.objects)}
    for role, run in runs.items():
        flags = run.serve["flags"]
        assert run.serve["model"] == overrides["model"]["path"]
        assert flags["served-model-name"] == overrides["model"]["servedName"]
        assert flags["hf-overrides"] == overrides["model"]["hfOverrides"]
        assert flags["tokenizer"] == overrides["engine"]["args"]["tokenizer"]
        assert run.run.env["SHARED_VALUE"] == overrides["engine"]["env"]["SHARED_VALUE"]
        for var in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME"):
            assert run.run.env[var] == overrides["network"]["interface"]
        assert (
            flags["kv-transfer-config"]["kv_connector_extra_config"]["note"]
            == overrides["kvTransfer"]["extraConfig"]["note"]
        )
        if role == "prefill":
            assert (
                json.loads(flags["override-generation-config"])
                == overrides["prefill"]["args"]["override-generation-config"]
            )
            assert flags["allowed-origins"] == overrides["prefill"]["args"]["allowed-origins"]
    ran = sorted(p.name for p in marker.parent.iterdir())
    assert ran == [], f"commands inside values were executed: {ran}"
