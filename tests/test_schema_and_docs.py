"""values.schema.json documents and guards every key; the values reference (docs/values.md) is
generated from it."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from conftest import Renderer
from mooncake_pd import docs, paths


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return docs.load_schema()


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    return docs.load_defaults()


def test_defaults_satisfy_schema(schema, defaults):
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(defaults)


def _undocumented(values: Any, node: dict[str, Any], path: str) -> list[str]:
    missing = []
    if not isinstance(values, dict) or "properties" not in node:
        return missing
    for key, value in values.items():
        sub = node["properties"].get(key)
        if sub is None or not sub.get("description"):
            missing.append(f"{path}{key}")
        else:
            missing += _undocumented(value, sub, f"{path}{key}.")
    return missing


def test_every_values_key_is_described(schema, defaults):
    assert _undocumented(defaults, schema, "") == []


def _objects(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path or "(root)", node)] if "properties" in node else []
    for key, sub in node.get("properties", {}).items():
        found += _objects(sub, f"{path}{key}.")
    return found


# Maps passed through to vLLM that still document (and type) the keys the chart knows about.
OPEN_MAPS = {"model.hfOverrides."}


def test_every_schema_property_is_described_and_closed(schema):
    for path, node in _objects(schema):
        closed = node.get("additionalProperties") is False
        assert closed or (path in OPEN_MAPS and node.get("additionalProperties") is True), (
            f"{path} accepts unknown keys"
        )
        for key, sub in node["properties"].items():
            assert sub.get("description"), f"{path}{key} has no description"
            assert "type" in sub, f"{path}{key} has no type"


def test_values_reference_is_current(schema, defaults):
    page = docs.VALUES_PAGE.read_text()
    assert page == docs.render_readme(page, docs.table(schema, defaults)), "run `make docs`"


def test_readme_links_every_docs_page():
    readme = (paths.REPO / "README.md").read_text()
    for page in sorted((paths.REPO / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in readme, f"README does not link docs/{page.name}"


def test_readme_table_lists_every_schema_key(schema, defaults):
    listed = {row[0] for row in docs.rows(schema, defaults)}
    assert "prefill.parallelism.dataLocal" in listed
    assert "proxy.service.type" in listed
    assert len(listed) == sum(len(n["properties"]) for _, n in _objects(schema))


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"prefill": {"replicas": "two"}}, "prefill.replicas|/prefill/replicas"),
        ({"decode": {"parallelism": {"tensor": 0}}}, "decode.parallelism.tensor|/decode/parallelism/tensor"),
        ({"proxy": {"prot": 8080}}, "prot"),
        ({"replicas": 2}, "replicas"),
        ({"decode": {"kvPort": None}}, "kvPort"),
        ({"model": {"servedName": None}}, "servedName"),
        ({"accelerator": {"type": "tpu"}}, "accelerator.type|/accelerator/type"),
        ({"prefill": {"env": {"BAD-NAME": "x"}}}, "BAD-NAME|/prefill/env"),
        ({"engine": {"args": {"--seed": 1}}}, "--seed|/engine/args"),
    ],
    ids=[
        "wrong-type",
        "below-minimum",
        "unknown-key",
        "unknown-top-level-key",
        "missing-required",
        "missing-required-model",
        "not-in-enum",
        "bad-env-name",
        "bad-flag-name",
    ],
)
def test_schema_errors_name_the_key(render: Renderer, overrides, key):
    message = render.error(overrides=overrides)
    assert "schema" in message
    assert re.search(key, message), message


def test_schema_machine_parts_are_current(schema):
    """`make schema` (mooncake_pd.schemagen) has been run: Kubernetes types, bounds, required
    keys and the control-character rule are as the generator writes them."""
    from mooncake_pd import schemagen

    assert schemagen.generate(schema) == schema, "run `make schema`"


def test_pass_through_fields_use_kubernetes_definitions(schema):
    """Typed from Kubernetes' own OpenAPI (kubeopenapi.VERSION, tests/test_schema_types_from_kubernetes.py),
    unknown fields refused, with the rules OpenAPI leaves out."""
    from mooncake_pd import schemagen, schemarules

    resources = schema["properties"]["prefill"]["properties"]["resources"]
    assert resources["allOf"][0] == {"$ref": "#/$defs/io.k8s.api.core.v1.ResourceRequirements"}
    definitions = schema["$defs"]
    assert definitions["io.k8s.api.core.v1.ResourceRequirements"]["additionalProperties"] is False
    quantity = definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"]["oneOf"]
    assert quantity == [
        {"type": "string", "pattern": schemarules.NONNEGATIVE_QUANTITY},
        {"type": "number", "minimum": 0},
    ], "resources are never negative"
    assert definitions["io.k8s.api.core.v1.Toleration"]["properties"]["operator"]["enum"][:2] == ["Exists", "Equal"]
    assert not set(schemagen.PROBE_HANDLERS) & set(definitions["mooncake-pd.ProbeTimings"]["properties"])
    period = definitions["mooncake-pd.ProbeTimings"]["properties"]["periodSeconds"]
    assert (period["type"], period["maximum"]) == ("integer", 2**31 - 1)
    # Fields 1.27 lacked (issue 54), each closed to unknown fields.
    assert "sleep" in definitions["io.k8s.api.core.v1.LifecycleHandler"]["properties"]
    assert definitions["io.k8s.api.core.v1.SleepAction"]["additionalProperties"] is False
    assert {"matchLabelKeys", "mismatchLabelKeys"} <= set(
        definitions["io.k8s.api.core.v1.PodAffinityTerm"]["properties"]
    )
    claim = definitions["io.k8s.api.core.v1.PersistentVolumeClaimSpec"]["properties"]["resources"]
    assert claim == {
        "$ref": "#/$defs/io.k8s.api.core.v1.VolumeResourceRequirements",
        "description": claim["description"],
    }


@pytest.mark.parametrize(
    ("quantity", "ok"),
    [("350Gi", True), ("500m", True), ("1e3", True), ("1.5", True), (".5Ki", True), ("900GB", False), ("1 Gi", False)],
)
def test_quantity_grammar(quantity: str, ok: bool):
    from mooncake_pd import schemagen

    assert bool(re.match(schemagen.QUANTITY, quantity)) is ok


def test_schema_generation_is_deterministic(schema):
    """The same input gives the same bytes, and the machine parts do not depend on what the file
    held before (a schema without them regenerates to the committed file)."""
    import copy

    from mooncake_pd import schemagen

    once = schemagen.dump(schemagen.generate(schema))
    assert schemagen.dump(schemagen.generate(json.loads(once))) == once
    stripped = copy.deepcopy(schema)
    stripped.pop("$defs")
    assert schemagen.dump(schemagen.generate(stripped)) == once


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("10.0.0.0/8", True),
        ("010.000.0.1/32", True),  # ParseCIDRSloppy takes leading zeros
        ("192.168.1.7/24", True),  # host bits may be set
        ("2001:db8::/64", True),
        ("::/0", True),
        ("::ffff:10.0.0.1/120", True),
        ("10.0.0.0", False),
        ("10.0.0.0/33", False),
        ("256.0.0.0/8", False),
        ("2001:db8:::/64", False),
        ("2001:db8::/129", False),
        ("1:2:3:4:5:6:7:8:9/64", False),
    ],
)
def test_cidr_grammar(value: str, ok: bool):
    from mooncake_pd import schemarules

    assert bool(re.match(schemarules.CIDR, value)) is ok


def test_cidr_grammar_takes_every_network_python_writes():
    import ipaddress
    import random

    from mooncake_pd import schemarules

    rng = random.Random(18)
    for _ in range(2000):
        groups = [rng.choice([0, 0, rng.randrange(0x10000)]) for _ in range(8)]
        v6 = ipaddress.IPv6Address(int("".join(f"{g:04x}" for g in groups), 16))
        v4 = ipaddress.IPv4Address(rng.getrandbits(32))
        for text in (f"{v6.compressed}/{rng.randint(0, 128)}", f"{v6.exploded}/64", f"{v4}/{rng.randint(0, 32)}"):
            assert re.match(schemarules.CIDR, text), text


@pytest.mark.parametrize(
    ("value", "ok"),
    [("1", True), ("8", True), ("2000m", True), ("1Ki", True), ("1e3", True), ("0.5", False), ("500m", False)],
)
def test_extended_resources_are_whole_numbers(value: str, ok: bool):
    from mooncake_pd import schemarules

    assert bool(re.match(schemarules.INTEGER_QUANTITY, value)) is ok


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("cpu", True),
        ("memory", True),
        ("ephemeral-storage", True),
        ("hugepages-2Mi", True),
        ("nvidia.com/gpu", True),
        ("gpu", False),
        ("storage", False),
        ("nvidia.com/", False),
        ("Example.com/fpga", False),
    ],
)
def test_resource_names_are_standard_or_extended(name: str, ok: bool):
    from mooncake_pd import schemarules

    assert bool(re.match(schemarules.STANDARD_RESOURCE, name) or re.match(schemarules.EXTENDED_RESOURCE, name)) is ok


def test_probe_rules_of_the_api_server(schema):
    definitions = schema["$defs"]
    for name in ("mooncake-pd.ProbeTimings", "mooncake-pd.SingleSuccessProbeTimings"):
        fields = definitions[name]["properties"]
        assert all(fields[k]["minimum"] == 0 for k in ("timeoutSeconds", "periodSeconds", "failureThreshold"))
    # validateReadinessProbe: "must not be set for readinessProbes"; positive on the others.
    assert "terminationGracePeriodSeconds" not in definitions["mooncake-pd.ProbeTimings"]["properties"]
    single = definitions["mooncake-pd.SingleSuccessProbeTimings"]["properties"]
    assert single["terminationGracePeriodSeconds"]["minimum"] == 1
    assert definitions["mooncake-pd.SingleSuccessProbeTimings"]["properties"]["successThreshold"]["maximum"] == 1
    engine = schema["properties"]["engine"]["properties"]
    for probe in ("startupProbe", "livenessProbe"):
        assert engine[probe]["allOf"] == [{"$ref": "#/$defs/mooncake-pd.SingleSuccessProbeTimings"}]


def test_regenerate_checks_or_rewrites_a_generated_file(tmp_path, capsys):
    from mooncake_pd import values_file

    page = tmp_path / "page.md"
    page.write_text("old\n")
    assert values_file.regenerate(page, "old\n", "new\n", check=True, target="docs") == 1
    assert page.read_text() == "old\n", "--check changes nothing"
    assert "run `make docs`" in capsys.readouterr().err
    assert values_file.regenerate(page, "old\n", "new\n", check=False, target="docs") == 0
    assert page.read_text() == "new\n"
    assert values_file.regenerate(page, "new\n", "new\n", check=True, target="docs") == 0
