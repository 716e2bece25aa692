"""Every rule in validate-values.yaml and the schema refuses bad values at `helm template`,
naming the key: a catalog of bad values files (tests/bad-values/, one rule each, the expected
message in an `# expect:` regex on the first line), plus values that must still render."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import Renderer, assert_valid

CATALOG = Path(__file__).parent / "bad-values"
FILES = sorted(CATALOG.glob("*.yaml"))


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: <regex>'"
    return first.removeprefix("# expect: ")


def test_catalog_is_large_enough():
    assert len(FILES) >= 30


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_bad_values_fail_with_their_message(render: Renderer, path: Path):
    message = render.error((path,))
    assert re.search(expected(path), message), f"{path.name}: expected /{expected(path)}/ in:\n{message}"


def test_all_broken_rules_are_reported_together(render: Renderer):
    message = render.error(overrides={"decode": {"port": 7100, "kvPort": 28100}, "prefill": {"args": {"port": 1}}})
    assert message.count("\n  - ") == 3, message


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": {"mla": True}, "prefill": {"parallelism": {"tensor": 3}}},
        {
            "accelerator": {"type": "ascend-a2"},
            "image": {"tag": "v0.13.0"},
            "prefill": {"kvPort": 30000},
            "decode": {"kvPort": 30100},
        },
        {
            "decode": {"parallelism": {"tensor": 4, "data": 4, "dataLocal": 4}},
            "prefill": {"parallelism": {"tensor": 4}},
        },
        {"fullnameOverride": "a" * 49},
        {"prefill": {"kvPort": 36001}, "decode": {"kvPort": 17001}},
    ],
    ids=[
        "mla-relaxes-tp-multiple",
        "a2-random-range-ends-at-28000",
        "16-devices-fit-a3",
        "name-at-limit",
        "ports-just-outside-range",
    ],
)
def test_values_at_the_edges_still_render(render: Renderer, overrides, crds):
    assert_valid(render(overrides=overrides), crds)
