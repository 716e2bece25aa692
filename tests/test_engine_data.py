"""chart/files/engines/<version>/ is what each version's own packages say: the generator
(`mooncake-pd engines generate`, `make engines`) run again on the wheels PyPI serves must write
the same files, and its readers find what they read in real sources, not only in ours."""

from __future__ import annotations

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
