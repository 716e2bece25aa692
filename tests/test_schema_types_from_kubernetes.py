"""The values schema types its pass-through Kubernetes fields from Kubernetes' own OpenAPI
(kubernetes v1.34.2's api/openapi-spec/swagger.json, vendored as an extract: mooncake_pd.kubeopenapi,
scripts/mooncake_pd/openapi/SOURCE.md): the extract is upstream's, holds what the schema names, is
of the Kubernetes the test cluster runs; fields valid there are accepted and unknown ones refused;
the chart's own objects stay within its kubeVersion floor. That the schema is regenerated from the
extract is tests/test_schema_and_docs.py's test_schema_machine_parts_are_current."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import Renderer
from mooncake_pd import commands, docs, kubeopenapi, paths, schemagen, validate

PRESETS: list[Path | None] = [
    None,
    *sorted(paths.VALUES_DIR.glob("*.yaml")),
    *sorted((paths.CHART / "ci").glob("*-values.yaml")),
]


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return docs.load_schema()


def test_the_extract_is_upstreams_file_trimmed():
    """The vendored definitions are exactly swagger.json's at the tag, trimmed to what the schema
    needs, with that file's sha256. Upstream is read from the Go module cache (no network), which
    holds the module wherever the local cluster's kube-apiserver was built from it; elsewhere this
    skips (the schema's currency against the extract is tested regardless)."""
    upstream = kubeopenapi.module_cache_file()
    if upstream is None:
        pytest.skip(f"{kubeopenapi.MODULE}@{kubeopenapi.VERSION} is not in the Go module cache")
    text = upstream.read_text()
    wanted = kubeopenapi.dump(kubeopenapi.extract(text, schemagen.kubernetes_roots()))
    assert kubeopenapi.EXTRACT.read_text() == wanted, "run `mooncake-pd schema --openapi`"


def test_the_extract_holds_what_the_schema_names_and_nothing_more():
    """Every definition a pass-through field names is there with every one it refers to, and no
    other: a new K8S_FIELDS entry fails here until the extract is made again."""
    definitions = kubeopenapi.vendored()
    assert kubeopenapi.closure(definitions, schemagen.kubernetes_roots()) == definitions


def test_the_extract_and_its_source_record_agree():
    content = json.loads(kubeopenapi.EXTRACT.read_text())
    source = content["source"]
    assert (source["tag"], source["file"]) == (kubeopenapi.VERSION, kubeopenapi.UPSTREAM_FILE)
    notes = (kubeopenapi.FOLDER / "SOURCE.md").read_text()
    for fact in (source["sha256"], source["tag"], source["file"], kubeopenapi.EXTRACT.name):
        assert fact in notes, fact
    assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])


def test_the_kubernetes_is_the_one_the_test_cluster_runs():
    """The schema's Kubernetes is the local cluster's kube-apiserver (cluster/components.yaml, and
    the module cluster/build/go.mod builds it from), so what the schema accepts is what the API
    server of the cluster tests judges."""
    components = yaml.safe_load((paths.REPO / "cluster" / "components.yaml").read_text())["components"]
    assert components["kubernetes"]["version"] == kubeopenapi.VERSION
    go_mod = (paths.REPO / "cluster" / "build" / "go.mod").read_text()
    assert re.search(rf"^\s*{re.escape(kubeopenapi.MODULE)} {re.escape(kubeopenapi.VERSION)}\b", go_mod, re.M)


def test_the_version_is_named_where_the_schema_is_described():
    """The regeneration command's help and the generator's own description name the Kubernetes
    its types come from (they said 1.27 while the types were 1.27's)."""
    version = kubeopenapi.VERSION
    assert version in commands.SUMMARIES["schema"]
    assert version in (schemagen.__doc__ or "")
    for doc in ("development.md", "troubleshooting.md"):
        assert version in (paths.REPO / "docs" / doc).read_text(), doc


def test_rendered_objects_are_checked_against_the_schemas_kubernetes():
    """`render` validates against the same minor release the schema types (kubernetes-validate
    ships x.y.0), so what the schema accepts also renders."""
    assert validate.KUBERNETES_VERSIONS[0] == kubeopenapi.minor_release() == "1.34.0"


def _floor() -> str:
    """Chart.yaml's kubeVersion floor as kubernetes-validate names its schemas (>=1.27.0-0 -> 1.27.0)."""
    constraint = yaml.safe_load((paths.CHART / "Chart.yaml").read_text())["kubeVersion"]
    found = re.fullmatch(r">=\s*v?(\d+)\.(\d+)(\.\d+)?(-0)?", constraint)
    assert found, constraint
    return f"{found[1]}.{found[2]}.0"


# One helm: the objects are the same under both (test_golden), and the renders are shared with
# the other tests of the preset in this process.
@pytest.mark.parametrize("render", [paths.DEFAULT_HELM_VERSION], indirect=True)
@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: "defaults" if p is None else f"{p.parent.name}/{p.name}")
def test_the_charts_own_objects_stay_within_the_kubeversion_floor(render: Renderer, preset: Path | None):
    """The schema accepts 1.34's fields for a user to pass through; what the chart writes itself
    (every preset, the escape hatches' example among them) is valid on its oldest Kubernetes."""
    rendered = render((preset,) if preset else ())
    floor = (_floor(),)
    errors: list[str] = []
    custom = (*validate.KTHENA_GROUPS, *validate.PROMETHEUS_GROUPS)
    for obj in rendered.objects:
        if obj["kind"] == "ModelServing":
            for label, pod in validate.pod_templates(obj):
                errors += [f"{label}: {e}" for e in validate.validate_core_object(pod, floor)]
        elif obj["apiVersion"].split("/")[0] not in custom:
            errors += validate.validate_core_object(obj, floor)
    assert errors == [], "\n".join(errors)


def _valid(schema: dict[str, Any], values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]


SIDECAR = {"name": "exporter", "image": "docker.io/library/busybox:1.37"}


@pytest.mark.parametrize(
    ("values", "ok"),
    [
        # Fields Kubernetes added after 1.27 (issue 54: all three were refused).
        ({"engine": {"extraContainers": [SIDECAR | {"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}]}}, True),
        ({"engine": {"extraVolumeMounts": [{"name": "m", "mountPath": "/m", "readOnly": True,
                                             "recursiveReadOnly": "IfPossible"}]}}, True),
        ({"engine": {"podSecurityContext": {"supplementalGroupsPolicy": "Strict",
                                            "appArmorProfile": {"type": "RuntimeDefault"}}}}, True),
        ({"engine": {"extraVolumes": [{"name": "s", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]}}, True),
        # Still unknown fields, at any depth.
        ({"engine": {"extraContainers": [SIDECAR | {"lifecycle": {"preStop": {"sleep": {"seconds": 5, "x": 1}}}}]}},
         False),
        ({"engine": {"extraContainers": [SIDECAR | {"lifecycel": {}}]}}, False),
        ({"engine": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault", "profile": "x"}}}}, False),
        # The API server's rules on the newer fields (schemarules.newer_field_rules).
        ({"engine": {"extraContainers": [SIDECAR | {"lifecycle": {"preStop": {"sleep": {"seconds": -1}}}}]}}, False),
        ({"engine": {"extraContainers": [SIDECAR | {"restartPolicy": "Always"}]}}, False),
        ({"engine": {"extraContainers": [SIDECAR | {"lifecycle": {"stopSignal": "SIGTERM"}}]}}, False),
        ({"engine": {"extraVolumeMounts": [{"name": "m", "mountPath": "/m", "recursiveReadOnly": "Enabled"}]}}, False),
        ({"engine": {"podSecurityContext": {"seLinuxChangePolicy": "MountOption"}}}, False),
        ({"engine": {"securityContext": {"appArmorProfile": {"type": "Localhost"}}}}, False),
        ({"engine": {"securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": " p"}}}}, False),
        ({"engine": {"securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}}}, True),
        ({"prefill": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "matchLabelKeys": ["app"]}]}}}}, False),
        ({"prefill": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "mismatchLabelKeys": ["Not A Key"],
             "labelSelector": {"matchLabels": {"a": "b"}}}]}}}}, False),
        ({"prefill": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "matchLabelKeys": []}]}}}}, True),
        ({"proxy": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                   "whenUnsatisfiable": "ScheduleAnyway", "matchLabelKeys": ["a"]}]}},
         False),
    ],
)  # fmt: skip
def test_newer_fields_are_accepted_and_judged_as_the_api_server_does(schema, values: dict[str, Any], ok: bool):
    """On the schema alone (helm runs the same rules: tests/bad-values/ for the messages); each
    refusal is the API server's (kubernetes v1.34.2, schemarules.newer_field_rules names where)."""
    merged = copy.deepcopy(docs.load_defaults())
    for section, fields in values.items():
        merged[section] = {**merged[section], **fields}
    errors = _valid(schema, merged)
    assert (errors == []) is ok, errors


def test_the_regeneration_command_checks_the_extract_and_the_schema(capsys: pytest.CaptureFixture[str]):
    """`mooncake-pd schema --openapi --check`: the extract is upstream's and the schema the
    extract's (exit 0, nothing written); a stale extract is named with the command that remakes it."""
    if kubeopenapi.module_cache_file() is None:
        pytest.skip(f"{kubeopenapi.MODULE}@{kubeopenapi.VERSION} is not in the Go module cache")
    from mooncake_pd import cli

    assert cli.main(["schema", "--openapi", "--check"]) == 0, capsys.readouterr().err


def test_a_stale_extract_is_named_with_its_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys):
    from mooncake_pd.commands import schema as command

    if kubeopenapi.module_cache_file() is None:
        pytest.skip(f"{kubeopenapi.MODULE}@{kubeopenapi.VERSION} is not in the Go module cache")
    vendored = kubeopenapi.EXTRACT.read_text()
    stale = tmp_path / kubeopenapi.EXTRACT.name
    stale.write_text("{}\n")
    monkeypatch.setattr(kubeopenapi, "EXTRACT", stale)
    assert command._extract(check=True) == 1
    assert "is stale: run `mooncake-pd schema --openapi`" in capsys.readouterr().err
    assert stale.read_text() == "{}\n"
    assert command._extract(check=False) == 0
    assert stale.read_text() == vendored
