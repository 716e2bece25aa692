"""The threat model's port table (docs/security.md, "Ports") stays true: every row has a stable,
unique id that tests and issues can name; every test a row says holds it exists (a row no test
proves says "(to be proven)" instead); and every port the chart renders on a pod has its row, so
a port added to a template without a word about who may reach it fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mooncake_pd import paths

PAGE = paths.REPO / "docs" / "security.md"
TESTS = paths.REPO / "tests"
UNPROVEN = "(to be proven)"
# A test named in a cell: tests/<file>.py::<function>[<parameter>], or ::<function> / <function>
# alone after the file was named once in the same cell (or anywhere in tests/).
NAMED_TEST = re.compile(r"(?:(tests/[\w/]+\.py))?(?:::)?\b(test_\w+)(?:\[([^\]]+)\])?")


def port_rows() -> dict[str, list[str]]:
    """Id -> cells of each row of the table under "## Ports"."""
    text = PAGE.read_text()
    start = text.index("\n## Ports\n")
    end = text.index("\n## ", start + 1)
    rows: dict[str, list[str]] = {}
    for line in text[start:end].splitlines():
        match = re.match(r"^\| `([^`]+)` \|", line)
        if match:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert match.group(1) not in rows, f"{match.group(1)}: two rows with one id"
            rows[match.group(1)] = cells
    return rows


def test_every_port_row_has_a_stable_unique_id_and_all_its_columns():
    rows = port_rows()
    header = next(line for line in PAGE.read_text().splitlines() if line.startswith("| Id | Port"))
    columns = len(header.strip().strip("|").split(" | "))
    assert columns == 7
    for row_id, cells in rows.items():
        assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", row_id), row_id
        assert len(cells) == columns, f"{row_id}: {len(cells)} cells, the header has {columns}"
    # The rows issue 50 asks for, by the ids other work refers to.
    assert {
        "engine-api",
        "engine-metrics",
        "engine-dp-rpc",
        "kv-mooncake-v1",
        "kv-mooncake",
        "kv-nixl",
        "te-rpc",
        "npu-fabric",
        "proxy-api",
        "proxy-admin",
        "kthena-router",
        "kv-canary",
        "helm-test",
        "benchmark",
    } <= set(rows)


def _defined(name: str, file: Path | None) -> bool:
    files = [file] if file else sorted(TESTS.glob("test_*.py"))
    return any(re.search(rf"^(?:async )?def {name}\(", f.read_text(), re.M) for f in files)


@pytest.mark.parametrize("row_id", sorted(port_rows()))
def test_every_test_a_row_names_exists_or_the_row_says_it_is_unproven(row_id: str):
    held_by = port_rows()[row_id][-1]
    named = NAMED_TEST.findall(held_by)
    assert named or UNPROVEN in held_by, f"{row_id}: name the test that proves it, or say {UNPROVEN}"
    file: Path | None = None
    for path, name, parameter in named:
        file = paths.REPO / path if path else file
        assert file is None or file.is_file(), f"{row_id}: {path} does not exist"
        assert _defined(name, file), f"{row_id}: no test {name} in {file or 'tests/'}"
        if parameter and file is not None:
            # The parameter is one the test is run with (a port, a router type).
            assert parameter in file.read_text(), f"{row_id}: {name} is never run with [{parameter}]"


# Each port the chart renders on a pod, by its name, and the row that says who may reach it
# (kv-N: the connector's side channels).
PORT_ROWS = {"server": "engine-api", "dp-rpc": "engine-dp-rpc", "http": "proxy-api"}
KV_ROWS = {"MooncakeConnectorV1": "kv-mooncake-v1", "MooncakeConnector": "kv-mooncake", "NixlConnector": "kv-nixl"}


def _pod_specs(objects: list[dict]) -> list[dict]:
    specs = []
    for obj in objects:
        if obj["kind"] == "ModelServing":
            for role in obj["spec"]["template"]["roles"]:
                specs += [role[t]["spec"] for t in ("entryTemplate", "workerTemplate") if role.get(t)]
        elif obj["kind"] in ("Deployment", "Job"):
            specs.append(obj["spec"]["template"]["spec"])
        elif obj["kind"] == "Pod":
            specs.append(obj["spec"])
        elif obj["kind"] == "CronJob":
            specs.append(obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return specs


@pytest.mark.parametrize(
    ("overrides", "connector"),
    [
        ({"benchmark": {"enabled": True}, "test": {"kvCanary": {"cronJob": {"enabled": True}}}}, "MooncakeConnectorV1"),
        (
            {
                "accelerator": {"type": "cpu"},
                "model": {"storage": {"type": "download"}, "download": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"}},
            },
            "NixlConnector",
        ),
        ({"accelerator": {"type": "nvidia"}, "kvTransfer": {"connector": "MooncakeConnector"}}, "MooncakeConnector"),
    ],
    ids=["ascend-defaults", "cpu-nixl", "nvidia-mooncake"],
)
def test_every_port_the_chart_renders_has_its_row(render, overrides: dict, connector: str):
    rows = port_rows()
    rendered = render(overrides=overrides)
    names = {
        port["name"]
        for spec in _pod_specs(rendered.objects)
        for container in [*spec.get("initContainers", []), *spec["containers"]]
        for port in container.get("ports", [])
    }
    assert {"server", "dp-rpc", "kv-0"} <= names, names
    for name in names:
        row = KV_ROWS[connector] if re.fullmatch(r"kv-[0-9]+", name) else PORT_ROWS.get(name)
        assert row is not None, f"port {name!r}: no row of docs/security.md's port table says who may reach it"
        assert row in rows, f"port {name!r}: row {row} is missing from docs/security.md"
