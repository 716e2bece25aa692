"""Known advisories as data (scripts/mooncake_pd/advisories.yaml, mooncake_pd.advisories): the data
parses and every row carries its fields and a source; every engine version the chart offers gets
exactly the advisories its component versions (chart/files/profiles.yaml, through
mooncake_pd.profiles) fall in, in the layouts that open them; a version past a fix gets none of
that row; versions compare as PEP 440 orders them (post and rc releases)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from mooncake_pd import advisories, profiles
from mooncake_pd.advisories import Layout

OPEN = {"host_network": True, "network_policy": False, "api_key": True}
CLOSED = {"host_network": False, "network_policy": True, "api_key": True}


def ids(accelerator: str, version: str, connector: str, **layout: bool) -> set[str]:
    """The ids of the advisories that apply ("?" after an id whose component version is not recorded)."""
    table = advisories.load()
    family = str(profiles.load()["accelerators"][accelerator]["family"])
    found = advisories.components(profiles.load()["engines"][version], family)
    findings = advisories.applicable(table, found, Layout(connector=connector, **{**OPEN, **layout}))
    return {f.advisory.id + (" ?" if f.unknown else "") for f in findings}


# -- The data -------------------------------------------------------------------------------------


def test_the_data_parses_and_every_row_has_its_fields_and_a_source():
    raw = yaml.safe_load(advisories.DATA.read_text())
    assert advisories.check(raw) == []
    rows = raw["advisories"]
    assert len(rows) == len(advisories.load().advisories) >= 10
    for row in rows:
        missing = [field for field in raw["required"] if field not in row]
        assert missing == [], f"{row.get('id')}: missing {missing}"
        assert row["source"].startswith("https://github.com/CVEProject/cvelistV5/"), row["id"]
        assert row["id"].startswith(("CVE-", "GHSA-")), row["id"]
        assert isinstance(row["checked"], bool) and len(row["checkNote"]) > 20, row["id"]
        # The range is the record's: one bound, and a version that parses.
        assert (row["fixed"] is None) != (row["lastAffected"] is None), row["id"]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda row: row.pop("source"), "source: missing"),
        (lambda row: row.update(lastAffected="0.29.0"), "exactly one of fixed and lastAffected"),
        (lambda row: row.update(fixed="zero point eight"), "not a version"),
        (lambda row: row.update(component="torch"), "component: 'torch'"),
        (lambda row: row.update(checked="yes"), "checked: give true or false"),
        (lambda row: row.update(deployed=False), "notDeployedWhy: missing"),
    ],
)
def test_a_broken_row_is_refused_naming_the_field(change: Any, complaint: str):
    raw = yaml.safe_load(advisories.DATA.read_text())
    broken = copy.deepcopy(raw)
    change(broken["advisories"][0])  # CVE-2026-48746: fixed 0.22.0, deployed
    problems = advisories.check(broken)
    assert any(complaint in p and "advisories[0]" in p for p in problems), problems
    with pytest.raises(advisories.AdvisoryError, match=r"advisories\.yaml is incomplete"):
        advisories.parse(broken)


def test_every_connector_a_deployed_row_names_is_one_the_chart_offers():
    """A misspelt connector would silently keep a row from ever applying."""
    offered = {c for engine in profiles.load()["engines"].values() for c in engine["connectors"]}
    for advisory in advisories.load().advisories:
        if advisory.deployed and advisory.connectors is not None:
            assert set(advisory.connectors) <= offered, advisory.id
        if not advisory.deployed:
            assert advisory.reach == "none", advisory.id


def test_the_component_versions_come_from_the_profiles_engine_rows():
    assert {"vllm", "vllmAscend", "mooncake"} <= set(profiles.load()["required"]["engines"])
    engine = profiles.load()["engines"]["v0.13.0"]
    assert advisories.components(engine, "ascend") == {
        "vllm": "0.13.0",
        "vllmAscend": "0.13.0",
        "mooncake": "0.3.7.post2",
    }
    # vLLM's own images: the Mooncake and NIXL releases in them are not recorded.
    assert advisories.components(engine, "nvidia") == {"vllm": "0.13.0", "mooncake": None, "nixl": None}


# -- What applies ---------------------------------------------------------------------------------

# Hand-checked against the records' ranges (advisories.yaml) and profiles.yaml's component
# versions, in the most open layout (host network, no NetworkPolicy, an API key set):
# vLLM 0.13.0 and 0.18.0 lie below 0.22.0 (CVE-2026-48746, the key bypass); vLLM 0.13.0-0.23.0 lie
# at or below 0.29.0 (CVE-2026-94622 NIXL, -94625 and -94627 upstream MooncakeConnector); 0.32.0, 0.33.0
# and 0.34.0 are past both. The Ascend images ship Mooncake 0.3.7.post2, 0.3.9, 0.3.11.post1, all below
# 0.3.13 (CVE-2026-103764); vLLM's images carry no recorded Mooncake ("?": may apply).
MOST_OPEN = {
    ("ascend-a3", "v0.13.0", "MooncakeConnectorV1"): {"CVE-2026-48746", "CVE-2026-103764"},
    ("ascend-a3", "v0.18.0", "MooncakeConnectorV1"): {"CVE-2026-48746", "CVE-2026-103764"},
    ("ascend-a3", "v0.23.0", "MooncakeConnectorV1"): {"CVE-2026-103764"},
    ("ascend-a2", "v0.13.0", "MooncakeConnectorV1"): {"CVE-2026-48746", "CVE-2026-103764"},
    ("ascend-a2", "v0.18.0", "MooncakeConnectorV1"): {"CVE-2026-48746", "CVE-2026-103764"},
    ("ascend-a2", "v0.23.0", "MooncakeConnectorV1"): {"CVE-2026-103764"},
    ("nvidia", "v0.13.0", "NixlConnector"): {"CVE-2026-48746", "CVE-2026-94622"},
    ("nvidia", "v0.13.0", "MooncakeConnector"): {
        "CVE-2026-48746",
        "CVE-2026-103764 ?",
        "CVE-2026-94625",
        "CVE-2026-94627",
    },
    ("nvidia", "v0.18.0", "NixlConnector"): {"CVE-2026-48746", "CVE-2026-94622"},
    ("nvidia", "v0.18.0", "MooncakeConnector"): {
        "CVE-2026-48746",
        "CVE-2026-103764 ?",
        "CVE-2026-94625",
        "CVE-2026-94627",
    },
    ("nvidia", "v0.23.0", "NixlConnector"): {"CVE-2026-94622"},
    ("nvidia", "v0.23.0", "MooncakeConnector"): {"CVE-2026-103764 ?", "CVE-2026-94625", "CVE-2026-94627"},
    ("nvidia", "v0.32.0", "NixlConnector"): set(),
    ("nvidia", "v0.32.0", "MooncakeConnector"): {"CVE-2026-103764 ?"},
    ("nvidia", "v0.33.0", "NixlConnector"): set(),
    ("nvidia", "v0.33.0", "MooncakeConnector"): {"CVE-2026-103764 ?"},
    ("nvidia", "v0.34.0", "NixlConnector"): set(),
    ("nvidia", "v0.34.0", "MooncakeConnector"): {"CVE-2026-103764 ?"},
    ("cpu", "v0.13.0", "NixlConnector"): {"CVE-2026-48746", "CVE-2026-94622"},
    ("cpu", "v0.13.0", "MooncakeConnector"): {
        "CVE-2026-48746",
        "CVE-2026-103764 ?",
        "CVE-2026-94625",
        "CVE-2026-94627",
    },
    ("cpu", "v0.18.0", "NixlConnector"): {"CVE-2026-48746", "CVE-2026-94622"},
    ("cpu", "v0.18.0", "MooncakeConnector"): {
        "CVE-2026-48746",
        "CVE-2026-103764 ?",
        "CVE-2026-94625",
        "CVE-2026-94627",
    },
    ("cpu", "v0.23.0", "NixlConnector"): {"CVE-2026-94622"},
    ("cpu", "v0.23.0", "MooncakeConnector"): {"CVE-2026-103764 ?", "CVE-2026-94625", "CVE-2026-94627"},
    ("cpu", "v0.32.0", "NixlConnector"): set(),
    ("cpu", "v0.32.0", "MooncakeConnector"): {"CVE-2026-103764 ?"},
}


def test_the_expectations_cover_every_version_and_connector_the_chart_offers():
    """A new engine version or connector needs its hand-checked row here."""
    offered = {
        (accelerator, version, connector)
        for accelerator in profiles.load()["accelerators"]
        for version in profiles.versions_for(accelerator)
        for connector in profiles.profile(accelerator, version=version).connectors
    }
    assert offered == set(MOST_OPEN)


@pytest.mark.parametrize(("accelerator", "version", "connector"), sorted(MOST_OPEN))
def test_each_engine_version_gets_the_advisories_its_components_fall_in(accelerator, version, connector):
    assert ids(accelerator, version, connector) == MOST_OPEN[(accelerator, version, connector)]


def test_v0_13_0_ships_a_mooncake_below_the_fix_so_the_memory_advisory_applies_on_the_host_network():
    assert profiles.load()["engines"]["v0.13.0"]["mooncake"] == "0.3.7.post2"
    host_only = {"host_network": True, "network_policy": True, "api_key": False}
    assert ids("ascend-a3", "v0.13.0", "MooncakeConnectorV1", **host_only) == {"CVE-2026-103764"}


def test_a_version_past_the_fix_gets_none_of_that_row():
    # vLLM 0.23.0 is past the key bypass's fix (0.22.0); 0.32.0 past NIXL's last affected (0.29.0).
    assert "CVE-2026-48746" in ids("nvidia", "v0.18.0", "NixlConnector")
    assert "CVE-2026-48746" not in ids("nvidia", "v0.23.0", "NixlConnector")
    assert "CVE-2026-94622" in ids("cpu", "v0.23.0", "NixlConnector")
    assert "CVE-2026-94622" not in ids("cpu", "v0.32.0", "NixlConnector")
    # Mooncake 0.3.13 is the fix; 0.3.13.post1 is past it, 0.3.13rc1 and 0.3.12 are not.
    memory = next(a for a in advisories.load().advisories if a.id == "CVE-2026-103764")
    assert [memory.affects(v) for v in ("0.3.7.post2", "0.3.12", "0.3.13rc1", "0.3.13", "0.3.13.post1")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_the_layout_decides_what_is_open():
    # Pod network and the chart's NetworkPolicy: the engine ports are closed to others ...
    assert ids("cpu", "v0.13.0", "NixlConnector", **CLOSED) == set()
    # ... the host network opens them whatever the policy says, and so does no policy.
    assert ids("cpu", "v0.13.0", "NixlConnector", **{**CLOSED, "host_network": True}) == {
        "CVE-2026-48746",
        "CVE-2026-94622",
    }
    assert ids("cpu", "v0.13.0", "NixlConnector", **{**CLOSED, "network_policy": False}) == {
        "CVE-2026-48746",
        "CVE-2026-94622",
    }
    # The key bypass needs a key to bypass.
    assert ids("cpu", "v0.13.0", "NixlConnector", api_key=False) == {"CVE-2026-94622"}
    # What clients trigger through the router stays open in every layout.
    assert ids("cpu", "v0.18.0", "MooncakeConnector", **CLOSED) == {"CVE-2026-94625", "CVE-2026-94627"}


def test_rows_for_parts_the_chart_does_not_run_never_apply():
    table = advisories.load()
    not_run = {a.id for a in table.advisories if not a.deployed}
    assert {"CVE-2026-103765", "CVE-2026-106037", "CVE-2026-94624", "CVE-2025-47277"} <= not_run
    found = {"vllm": "0.13.0", "vllmAscend": "0.13.0", "mooncake": "0.3.7.post2", "nixl": None}
    for connector in ("MooncakeConnectorV1", "MooncakeConnector", "NixlConnector", "OffloadingConnector"):
        layout = Layout(connector=connector, **OPEN)
        assert not {f.advisory.id for f in advisories.applicable(table, found, layout)} & not_run


# -- Messages and values --------------------------------------------------------------------------


def test_a_message_names_the_key_the_problem_and_the_fix():
    messages = advisories.problems({"engine": {"apiKeySecret": {"name": "engine-key", "key": "api-key"}}})
    assert [m.split(" ")[1] for m in messages] == ["CVE-2026-48746", "CVE-2026-103764"]
    memory = messages[1]
    assert memory.startswith(
        "engine.version: CVE-2026-103764 applies to Mooncake transfer engine 0.3.7.post2 (< 0.3.13)"
    )
    assert "open here because the engines run on the node's network (engine.hostNetwork)" in memory
    # No engine version of the chart ships Mooncake 0.3.13 for Ascend: the fix is the layout's.
    assert "fix: no engine version the chart offers for ascend-a3 ships a Mooncake transfer engine" in memory
    assert "host policy" in memory
    bypass = messages[0]
    assert "fix: engine.version v0.23.0 ships a vLLM outside the affected range" in bypass


def test_an_unrecorded_version_says_what_to_check():
    values = {"accelerator": {"type": "nvidia"}, "kvTransfer": {"connector": "MooncakeConnector"}}
    unknown = [m for m in advisories.problems(values) if "may apply" in m]
    assert len(unknown) == 1 and "CVE-2026-103764" in unknown[0]
    assert "no profile records the Mooncake transfer engine release in the nvidia image of v0.13.0" in unknown[0]


def test_the_layout_follows_the_charts_defaults():
    assert advisories.layout_of({}) == (
        "ascend-a3",
        "v0.13.0",
        Layout(host_network=True, network_policy=False, api_key=False, connector="MooncakeConnectorV1"),
    )
    cpu = advisories.layout_of({"accelerator": {"type": "cpu"}, "networkPolicy": {"enabled": True}})
    assert cpu[2] == Layout(host_network=False, network_policy=True, api_key=False, connector="NixlConnector")


def test_the_first_fixed_engine_version_is_derived_from_the_profiles():
    table = {a.id: a for a in advisories.load().advisories}
    assert advisories.first_fixed_version(table["CVE-2026-48746"], "nvidia") == "v0.23.0"
    assert advisories.first_fixed_version(table["CVE-2026-94622"], "cpu") == "v0.32.0"
    assert advisories.first_fixed_version(table["CVE-2026-103764"], "ascend-a3") is None


# -- Versions -------------------------------------------------------------------------------------

ORDERED = [
    "0.3.7",
    "0.3.7.post1",
    "0.3.7.post2",
    "0.3.9",
    "0.3.11.post1",
    "0.3.13.dev1",
    "0.3.13a1",
    "0.3.13rc1",
    "0.3.13",
    "0.3.13.post1",
    "0.3.14-rc1",
    "0.3.14",
    "0.13.0",
    "0.22.0",
    "0.29.0",
    "0.30.0rc2",
    "0.30.0",
]


def test_versions_order_as_pep_440_does_with_post_and_rc_releases():
    keys = [advisories.version_key(v) for v in ORDERED]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert advisories.version_key("v0.3.13") == advisories.version_key("0.3.13.0")
    assert advisories.version_key("0.13.0+cpu") == advisories.version_key("0.13.0")
    with pytest.raises(advisories.AdvisoryError, match="not a version"):
        advisories.version_key("latest")


def test_the_order_agrees_with_packaging():
    """packaging comes with pytest (its dependency), not with the tool: the tool has its own
    comparison, and this holds it to packaging.version's on every pair."""
    version = pytest.importorskip("packaging.version")
    for a in ORDERED:
        for b in ORDERED:
            ours = advisories.version_key(a) < advisories.version_key(b)
            assert ours == (version.Version(a) < version.Version(b)), (a, b)


# -- From a render ----------------------------------------------------------------------------------


def test_a_render_gives_the_same_findings_as_its_values(render):
    """`render` and `verify` read the layout from the manifests: the same answer as from values."""
    defaults = render()
    assert advisories.layout_from_objects(defaults.objects) == advisories.layout_of({})
    assert advisories.problems_from_objects(defaults.objects) == advisories.problems({})
    values = {
        "accelerator": {"type": "cpu"},
        "networkPolicy": {"enabled": True},
        "model": {"storage": {"type": "download"}, "download": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"}},
    }
    closed = render(overrides=values)
    assert advisories.layout_from_objects(closed.objects) == advisories.layout_of(values)
    assert advisories.problems_from_objects(closed.objects) == []
    # An API key in the engines' env (engine.apiKeySecret renders VLLM_API_KEY from its Secret).
    keyed = copy.deepcopy(defaults.objects)
    serving = next(o for o in keyed if o["kind"] == "ModelServing")
    for role in serving["spec"]["template"]["roles"]:
        role["entryTemplate"]["spec"]["containers"][0]["env"].append(
            {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "engine-key", "key": "api-key"}}}
        )
    assert [m.split(" ")[1] for m in advisories.problems_from_objects(keyed)] == ["CVE-2026-48746", "CVE-2026-103764"]
