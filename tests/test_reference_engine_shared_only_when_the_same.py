"""The e2e shares a plain reference engine between modules only where it is the engine the module
would have started (tests/support/reference.py): the rule that decides it, on the records the plain
engine's shim writes, and the model digest. No engine runs here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.reference import NOT_THE_ENGINES, flags_key, model_digest

MODELS = Path("/var/tmp/run-a/models")


def record(models: Path = MODELS, **changes: Any) -> dict[str, Any]:
    """A record as the shim writes it: the vllm it runs, its argv and env."""
    env = {
        "MODEL_LOCATION": f"{models}/tiny",
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "PATH": "/work/main/.tools/e2e/bin:/usr/bin:/bin",
        "PWD": f"{models.parent}/pods/plain",
        "MOONCAKE_ENGINE_ID": "deepseek-pd-0_decode-0_start1765000000000000000",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "18100",
    }
    argv = ["serve", f"{models}/tiny", "--port", "7199", "--max-num-seqs", "4", "--seed", "1024"]
    base = {"vllm": "/work/main/.tools/e2e/bin/vllm", "argv": argv, "env": env}
    for key, value in changes.items():
        if key == "env":
            base["env"] = {**env, **value}
        else:
            base[key] = value
    return base


def test_the_same_engine_in_another_run_folder_and_with_another_side_channel_port_is_shared():
    other = Path("/var/tmp/run-b/models")
    elsewhere = record(
        other,
        env={
            "MODEL_LOCATION": f"{other}/tiny",
            "PWD": "/var/tmp/run-b/pods/plain",
            "MOONCAKE_ENGINE_ID": "deepseek-pd-0_decode-0_start1765000000999999999",
            # Kthena's render moves decode's kvPort; only the connector the shim drops reads it.
            "VLLM_NIXL_SIDE_CHANNEL_PORT": "18000",
        },
    )
    assert flags_key(record(), MODELS) == flags_key(elsewhere, other)


def test_another_flag_another_engine_setting_or_another_vllm_is_another_engine():
    key = flags_key(record(), MODELS)
    block_size = record(argv=[*record()["argv"], "--block-size", "32"])
    assert flags_key(block_size, MODELS) != key
    assert flags_key(record(env={"VLLM_CPU_KVCACHE_SPACE": "2"}), MODELS) != key
    assert flags_key(record(env={"PYTHONPATH": "/work/main/.tools/mooncake/0.3.13.post1"}), MODELS) != key
    assert flags_key(record(vllm="/work/main/.tools/e2e-v0.32.0/bin/vllm"), MODELS) != key


def test_only_what_the_plain_engine_does_not_read_is_left_out():
    # The connector's own settings, the per-start engine_id and the shell's variables: nothing the
    # engine's answers depend on. A new entry here needs the same argument.
    assert {
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "MOONCAKE_ENGINE_ID",
        "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "VLLM_NIXL_SIDE_CHANNEL_PORT",
        "VLLM_MOONCAKE_BOOTSTRAP_PORT",
    } == NOT_THE_ENGINES
    key = json.loads(flags_key(record(), MODELS))
    assert key["argv"][1] == "<models>/tiny" and key["env"]["MODEL_LOCATION"] == "<models>/tiny"


def test_a_model_with_one_byte_changed_has_another_digest(tmp_path: Path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text('{"hidden_size": 128}')
        (tmp_path / name / "model.safetensors").write_bytes(bytes(range(256)))
    assert model_digest(tmp_path / "a") == model_digest(tmp_path / "b")
    (tmp_path / "b" / "model.safetensors").write_bytes(bytes([1, *range(1, 256)]))
    assert model_digest(tmp_path / "a") != model_digest(tmp_path / "b")
