"""chart/files/engines/<version>/ is what each version's own packages say: the generator
(`mooncake-pd engines generate`, `make engines`) run again on the wheels PyPI serves must write
the same files, and its readers find what they read in real sources, not only in ours."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from mooncake_pd import enginedata, paths, profiles
from mooncake_pd.commands import engines as engines_command


# In `make test-all` only (marker `full`): it downloads every engine version's wheels (about
# 1.3 GB) and probes vLLM's parsers in each version's venv (.tools/e2e-v0.32.0 among them). What
# it catches is a hand edit of chart/files/engines/ or a re-tagged wheel; the data changes only
# through `make engines`, whose diff is read before commit, and the readers are checked in the
# gate on small sources (below).
@pytest.mark.full
def test_the_checked_in_data_is_what_the_packages_say():
    """Every version, every file: vLLM's parsers run on each vllm wheel (the probe), the
    vllm-ascend and vllm sources read; a hand edit or a re-tagged wheel shows here."""
    table = profiles.load()["engines"]
    problems = []
    for version, row in table.items():
        files = engines_command.generate(version, row)
        problems += engines_command.differences(paths.ENGINE_DATA / version, files)
    assert problems == [], "run `make engines` and read the diff:\n" + "\n".join(problems)


@pytest.mark.full  # reads the wheels the test above downloads
def test_the_wheels_are_the_ones_source_md_names():
    for version in profiles.load()["engines"]:
        source = (paths.ENGINE_DATA / version / "SOURCE.md").read_text()
        for wheel in sorted(engines_command.WHEELS.glob("*.whl")):
            if wheel.name in source:
                assert enginedata.read_wheel(wheel, wheel.name.split("-")[0] + "/").sha256 in source


def _wheel_of(tmp_path: Path, files: dict[str, str]) -> enginedata.Wheel:
    path = tmp_path / "fake-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return enginedata.read_wheel(path, "pkg/")


def test_the_readers_on_small_sources(tmp_path: Path):
    wheel = _wheel_of(
        tmp_path,
        {
            "pkg/__init__.py": "\ufeffx = 1\n",
            "pkg/reg.py": 'F.register_connector("A", "pkg.a", "A")\nF.register_connector(name, "pkg.b", "B")\n',
            "pkg/cfg.py": (
                'def f(additional_config, self):\n    additional_config.get("k1", 0)\n'
                '    self.additional_config["k2"]\n    helper(additional_config, "k3", "ENV", 1)\n'
                '    other.get("not_a_key")\n'
            ),
            # Syntax this interpreter may not parse is named, not dropped unseen.
            "pkg/newer.py": "def broken(:\n",
        },
    )
    assert enginedata.registered_connectors(wheel) == {"A": "pkg.a:A"}
    assert enginedata.additional_config_keys(wheel) == ["k1", "k2", "k3"]
    assert enginedata.trees(wheel)[1] == ["pkg/newer.py"]


def test_metrics_come_from_vllms_loggers(tmp_path: Path):
    path = tmp_path / "vllm-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            enginedata.METRICS_SOURCE,
            'a = self._gauge_cls(name="vllm:num_requests_running")\n'
            'b = self._counter_cls(name="vllm:prompt_tokens")\n'
            'c = self._histogram_cls(name="vllm:time_to_first_token_seconds")\n'
            'd = self._counter_cls(name="other:thing")\n',
        )
    registered = enginedata.registered_metrics(enginedata.read_wheel(path, "vllm/"))
    assert registered == {
        "vllm:num_requests_running": "gauge",
        "vllm:prompt_tokens": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
    }
    lines = [
        line for line in enginedata.metrics_text(registered, "9.9.9", "w").splitlines() if not line.startswith("#")
    ]
    assert lines == [
        "vllm:num_requests_running gauge",
        "vllm:time_to_first_token_seconds histogram",
        "vllm:prompt_tokens_total counter",
    ]


def test_bounds_are_read_from_pydantic_field_metadata():
    """engine_probe.field_bounds on a stand-in of a pydantic dataclass: the field's own metadata
    (Field(gt=0, le=1) keeps annotated_types.Gt/Le there) and Annotated[...] inside an optional
    type; fields without any, and unknown fields, have none."""
    from dataclasses import dataclass as plain_dataclass
    from typing import Annotated, ClassVar

    from mooncake_pd import engine_probe

    @plain_dataclass(frozen=True)
    class Gt:
        gt: float

    @plain_dataclass(frozen=True)
    class Le:
        le: float

    @plain_dataclass(frozen=True)
    class Ge:
        ge: int

    @plain_dataclass
    class Info:
        metadata: list
        annotation: object

    class CacheConfig:
        __pydantic_fields__: ClassVar[dict[str, Info]] = {
            "gpu_memory_utilization": Info([Gt(0), Le(1)], float),
            "block": Info([], Annotated[int, Ge(1)] | None),
            "plain": Info([], int),
            "flag": Info([Ge(True)], bool),
        }

    assert engine_probe.field_bounds(CacheConfig, "gpu_memory_utilization") == {
        "field": f"{__name__}.{test_bounds_are_read_from_pydantic_field_metadata.__name__}.<locals>.CacheConfig"
        ".gpu_memory_utilization",
        "gt": 0,
        "le": 1,
    }
    assert engine_probe.field_bounds(CacheConfig, "block")["ge"] == 1
    assert engine_probe.field_bounds(CacheConfig, "plain") == {}
    assert engine_probe.field_bounds(CacheConfig, "flag") == {}  # a bool is not a bound
    assert engine_probe.field_bounds(CacheConfig, "missing") == {}
    assert engine_probe.field_bounds(object, "x") == {}


def test_options_remember_the_config_field_they_came_from():
    """engine_probe.flags writes an option's bounds only where add_argument was handed the
    field's kwargs (record_sources marks them, keep_sources keeps the mark on the action): the
    mark never reaches argparse itself."""
    import argparse
    from dataclasses import dataclass as plain_dataclass
    from typing import ClassVar

    from mooncake_pd import engine_probe

    @plain_dataclass(frozen=True)
    class Ge:
        ge: int

    @plain_dataclass
    class Info:
        metadata: list
        annotation: object

    class SchedulerConfig:
        __pydantic_fields__: ClassVar[dict[str, Info]] = {"max_num_seqs": Info([Ge(1)], int)}

    parser = argparse.ArgumentParser()
    original = engine_probe.keep_sources()
    try:
        parser.add_argument("--max-num-seqs", type=int, **{engine_probe.SOURCE: (SchedulerConfig, "max_num_seqs")})
        parser.add_argument("--other", type=int)
    finally:
        argparse._ActionsContainer.add_argument = original  # type: ignore[method-assign]
    rows = {r["options"][0]: r for r in engine_probe.flags(parser, defaults=False)}
    assert rows["--max-num-seqs"]["bounds"]["ge"] == 1
    assert rows["--max-num-seqs"]["bounds"]["field"].endswith("SchedulerConfig.max_num_seqs")
    assert "bounds" not in rows["--other"]
    assert parser.parse_args(["--max-num-seqs", "3"]).max_num_seqs == 3


SERVE_CHECKS = '''
def validate_parsed_serve_args(args):
    """Quick checks."""
    if hasattr(args, "subparser") and args.subparser != "serve":
        return
    validate_chat_template(args.chat_template)
    if args.chat_template is not None:
        logger.warning("a warning refuses nothing")
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
    if getattr(args, "sse_keep_alive_interval", 0) < 0:
        raise ValueError("Error: --sse-keep-alive-interval must be a non-negative integer")
    if getattr(args, "enable_per_request_metrics", False) and getattr(args, "disable_log_stats", False):
        raise ValueError(f"Error: {args.x} requires statistics")
    if args.a or args.b:
        raise ValueError("a condition of another shape")
    if args.data_parallel_multi_port_external_lb:
        validate_multi_port_external_lb_args(args)
'''


def test_serve_checks_are_read_from_validate_parsed_serve_args(tmp_path: Path):
    """Each `if <flags>: raise` of the function becomes a check (requires: X and not Y; excludes:
    X and Y; a bound: X < 0); every other statement it runs is named in `unread`, never dropped;
    the subcommand guard, the docstring and a warning are not checks."""
    wheel = _wheel_of(tmp_path, {"pkg/cli_args.py": SERVE_CHECKS, "pkg/other.py": "def unrelated(): pass\n"})
    read = enginedata.serve_checks(wheel)
    assert read["source"] == "pkg/cli_args.py validate_parsed_serve_args"
    assert [c["when"] for c in read["checks"]] == [
        [{"dest": "enable_auto_tool_choice", "test": "true"}, {"dest": "tool_call_parser", "test": "false"}],
        [{"dest": "sse_keep_alive_interval", "test": "lt", "value": 0}],
        [{"dest": "enable_per_request_metrics", "test": "true"}, {"dest": "disable_log_stats", "test": "true"}],
    ]
    assert read["checks"][0]["message"] == "Error: --enable-auto-tool-choice requires --tool-call-parser"
    assert read["checks"][0]["error"] == "TypeError"
    assert read["checks"][2]["message"] == "Error: {...} requires statistics"
    assert [u.split(": ", 1)[1] for u in read["unread"]] == [
        "validate_chat_template(args.chat_template)",
        "if args.a or args.b:",
        "if args.data_parallel_multi_port_external_lb:",
    ]
    serve = [
        {"options": ["--enable-auto-tool-choice", "--no-enable-auto-tool-choice"], "dest": "enable_auto_tool_choice"},
        {"options": ["--tool-call-parser"], "dest": "tool_call_parser"},
        {"options": ["-x", "--sse-keep-alive-interval"], "dest": "sse_keep_alive_interval"},
    ]
    defaults = {"enable_auto_tool_choice": False, "tool_call_parser": None, "sse_keep_alive_interval": 0}
    data = json.loads(enginedata.serve_checks_json("9.9.9", read, serve, defaults))
    assert [c["flag"] for c in data["checks"][0]["when"]] == ["enable-auto-tool-choice", "tool-call-parser"]
    assert data["checks"][1]["when"][0]["flag"] == "sse-keep-alive-interval"  # the long spelling
    assert data["checks"][2]["when"][0]["flag"] is None  # no such serve option: a values file cannot set it
    assert data["defaults"]["tool_call_parser"] is None and data["defaults"]["disable_log_stats"] is None


def test_serve_checks_need_exactly_one_definition(tmp_path: Path):
    wheel = _wheel_of(tmp_path, {"pkg/a.py": "x = 1\n"})
    with pytest.raises(enginedata.EngineDataError, match="0 definitions of validate_parsed_serve_args"):
        enginedata.serve_checks(wheel)


def test_config_keys_are_the_config_classes_fields():
    """engine_probe.config_keys on stand-ins of vLLM's config classes: an option whose config
    field is a config class (alone or `| None`) takes that class's fields; a pydantic class says
    whether it forbids other keys, a plain dataclass refuses them (its constructor does); config
    classes among the fields are read one level down; a class inside a dict or list is not the
    option's keys."""
    import argparse
    from dataclasses import dataclass as plain_dataclass

    from mooncake_pd import engine_probe

    @plain_dataclass
    class PassConfig:
        fuse_norm_quant: bool = False

    @plain_dataclass
    class Info:
        annotation: object

    @plain_dataclass
    class CompilationConfig:  # a pydantic dataclass as vLLM declares it (extra="forbid")
        mode: int = 0

    CompilationConfig.__pydantic_config__ = {"extra": "forbid"}  # type: ignore[attr-defined]
    CompilationConfig.__pydantic_fields__ = {"mode": Info(int), "pass_config": Info(PassConfig)}  # type: ignore[attr-defined]

    @plain_dataclass
    class VllmConfig:
        compilation_config: object = None

    VllmConfig.__pydantic_config__ = {}  # type: ignore[attr-defined]
    VllmConfig.__pydantic_fields__ = {  # type: ignore[attr-defined]
        "compilation_config": Info(CompilationConfig | None),
        "speculative_config": Info(PassConfig | None),
        "limit_mm_per_prompt": Info(dict[str, PassConfig]),
    }
    parser = argparse.ArgumentParser()
    original = engine_probe.keep_sources()
    try:
        for name in ("compilation_config", "speculative_config", "limit_mm_per_prompt"):
            spelling = "--" + name.replace("_", "-")
            parser.add_argument(spelling, **{engine_probe.SOURCE: (VllmConfig, name)})
    finally:
        argparse._ActionsContainer.add_argument = original  # type: ignore[method-assign]
    keys = engine_probe.config_keys(parser)
    assert sorted(keys) == ["compilation-config", "speculative-config"]
    assert keys["compilation-config"]["extra"] == "forbid"
    assert keys["compilation-config"]["fields"] == ["mode", "pass_config"]
    assert keys["compilation-config"]["nested"]["pass_config"] == {
        "class": f"{__name__}.{test_config_keys_are_the_config_classes_fields.__name__}.<locals>.PassConfig",
        "extra": "forbid",
        "fields": ["fuse_norm_quant"],
    }
    assert "nested" not in keys["speculative-config"]


def test_enum_names_are_the_members_in_order():
    import enum

    from mooncake_pd import engine_probe

    class Backend(enum.Enum):
        FLASH_ATTN = "a"
        TRITON_ATTN = "b"

    assert engine_probe.enum_names(Backend | None) == ["FLASH_ATTN", "TRITON_ATTN"]
    assert engine_probe.enum_names(int | None) == []


# In the gate (about 6 s: one import of vLLM's serve parser): the newer files of the v0.13.0 data
# against the vLLM 0.13.0 the e2e venv installs, without downloading a wheel. The full test above
# regenerates every version from its wheels.
def test_the_gate_engines_facts_are_what_its_installed_vllm_says():
    """config-keys.json and registered-names.json of v0.13.0 from engine_probe.py run on the
    e2e venv's vLLM 0.13.0, and serve-checks.json from that vLLM's own cli_args.py."""
    python = paths.e2e_venv(paths.E2E_FIRST_CPU) / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {python}: make e2e-venv")
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(python), str(engines_command.PROBE)], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    version = found["vllm"]
    assert version == profiles.load()["engines"][paths.E2E_FIRST_CPU]["vllm"]
    folder = paths.ENGINE_DATA / paths.E2E_FIRST_CPU
    assert (folder / "config-keys.json").read_text() == enginedata.config_keys_json(version, found["configKeys"])
    assert (folder / "registered-names.json").read_text() == enginedata.registered_names_json(
        version, found["registered"]
    )
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    source = "vllm/entrypoints/openai/cli_args.py"
    wheel = enginedata.Wheel("installed", "", {source: (site / source).read_text()})
    checks = enginedata.serve_checks_json(
        version, enginedata.serve_checks(wheel), found["serve"], found["serveDefaults"]
    )
    assert (folder / "serve-checks.json").read_text() == checks


def test_words_beside_the_enum_are_asked_of_the_class():
    """engine_probe.accepts builds the config class with the word: "auto" is recorded for
    --attention-backend only where the class takes it (vLLM >= 0.18), never assumed."""
    from mooncake_pd import engine_probe

    class Takes:
        def __init__(self, backend: str | None = None):
            if backend not in (None, "auto", "FLASH_ATTN"):
                raise ValueError(backend)

    assert engine_probe.accepts(Takes, "backend", "auto")
    assert not engine_probe.accepts(Takes, "backend", "nope")
