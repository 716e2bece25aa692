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
