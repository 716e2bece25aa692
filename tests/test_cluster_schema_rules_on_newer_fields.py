"""The schema's judgement of the Kubernetes fields newer than 1.27 is the local cluster's
kube-apiserver v1.34.2's (the release whose OpenAPI types them, mooncake_pd.kubeopenapi):
- what the schema refuses by the API server's rules (schemarules.newer_field_rules, and the
  topology spread's matchLabelKeys rule helm had ignored), rendered by a copy of the chart
  without its schema and its own rules, is refused by the API server with the message of
  pkg/apis/core/validation;
- what it refuses because its feature gate is off by default (schemarules.GATED_OFF) is admitted
  by the API server and stored without it: dropped unsaid;
- what it accepts is admitted and stored as given.
tests/test_guards.py checks the schema's messages (tests/bad-values/); the three valid forms of
issue 54 are test_cluster_pod_templates_judged_at_install's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from mooncake_pd import helm, manifests, paths
from test_cluster_admission import refusals

pytestmark = pytest.mark.cluster
BAD = Path(__file__).parent / "bad-values"
SIDECAR = {"name": "exporter", "image": "docker.io/library/busybox:1.37"}

# bad-values case -> what kube-apiserver v1.34.2 says (pkg/apis/core/validation/validation.go).
REFUSED = {
    "affinity-match-label-keys-without-selector": "must not be specified when labelSelector is not set",
    "spread-match-label-keys-without-selector": "must not be specified when labelSelector is not set",
    "mount-recursive-read-only-on-writable-mount": "may only be specified when readOnly is true",
    "security-apparmor-localhost-without-profile": "must be set when AppArmor type is Localhost",
    "security-selinux-change-policy-mount-option": 'Unsupported value: "MountOption"',
}
# Gated off by default: values -> (where in the stored pod spec, what is left there).
DROPPED: dict[str, tuple[dict[str, Any], str, Any]] = {
    "sidecar-restart-policy": ({"engine": {"extraContainers": [SIDECAR | {"restartPolicy": "Always"}]}},
                               "sidecar.restartPolicy", None),
    "sidecar-stop-signal": ({"engine": {"extraContainers": [SIDECAR | {"lifecycle": {"stopSignal": "SIGUSR1"}}]}},
                            "sidecar.lifecycle", None),
    "extra-volume-image-source": ({"engine": {"extraVolumes": [
        {"name": "tools", "image": {"reference": "docker.io/library/busybox:1.37"}}]}}, "volume.tools", None),
    "projected-cluster-trust-bundle": ({"engine": {"extraVolumes": [{"name": "tools", "projected": {"sources": [
        {"clusterTrustBundle": {"signerName": "example.com/signer", "path": "bundle.pem"}}]}}]}},
        "volume.tools", {"name": "tools", "projected": {"sources": [{}], "defaultMode": 420}}),
}  # fmt: skip
# Valid on a 1.34 API server with its default gates, and stored as given.
ACCEPTED: dict[str, tuple[dict[str, Any], str, Any]] = {
    "sleep-zero": ({"engine": {"extraContainers": [SIDECAR | {"lifecycle": {"preStop": {"sleep": {"seconds": 0}}}}]}},
                   "sidecar.lifecycle", {"preStop": {"sleep": {"seconds": 0}}}),
    "apparmor-runtime-default": ({"engine": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}},
                                 "engine.securityContext.appArmorProfile", {"type": "RuntimeDefault"}),
    "supplemental-groups-strict": ({"engine": {"podSecurityContext": {"supplementalGroupsPolicy": "Strict"}}},
                                   "pod.securityContext.supplementalGroupsPolicy", "Strict"),
    "selinux-change-recursive": ({"engine": {"podSecurityContext": {"seLinuxChangePolicy": "Recursive"}}},
                                 "pod.securityContext.seLinuxChangePolicy", "Recursive"),
    "recursive-read-only": ({"engine": {"extraVolumes": [{"name": "tools", "emptyDir": {}}], "extraVolumeMounts": [
        {"name": "tools", "mountPath": "/tools", "readOnly": True, "recursiveReadOnly": "IfPossible"}]}},
        "engine.mount.tools", {"name": "tools", "mountPath": "/tools", "readOnly": True,
                               "recursiveReadOnly": "IfPossible"}),
    "mismatch-label-keys": ({"prefill": {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "prefill"}},
            "mismatchLabelKeys": ["app.kubernetes.io/instance"]}]}}}},
        "pod.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.0.mismatchLabelKeys",
        ["app.kubernetes.io/instance"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def schemaless_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart without values.schema.json and with validate-values.yaml emptied."""
    chart = tmp_path_factory.mktemp("schemaless") / "mooncake-pd"
    shutil.copytree(paths.CHART, chart)
    (chart / "templates" / "validate-values.yaml").write_text("{{- /* the refusal, bypassed */ -}}\n")
    (chart / "values.schema.json").unlink()
    return chart


def _values(folder: Path, values: dict[str, Any]) -> Path:
    path = folder / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _stored(spec: dict[str, Any], where: str) -> Any:
    """A part of a stored pod spec: sidecar.<key>, volume.<name>, engine.mount.<name>,
    engine.securityContext.<key...>, pod.<key...>."""
    head, _, rest = where.partition(".")
    if head == "sidecar":
        return next(c for c in spec["containers"] if c["name"] == SIDECAR["name"]).get(rest)
    if head == "volume":
        return next((v for v in spec["volumes"] if v["name"] == rest), None)
    node: Any = spec if head == "pod" else spec["containers"][0]
    if rest.startswith("mount."):
        return next(m for m in node["volumeMounts"] if m["name"] == rest.removeprefix("mount."))
    for key in rest.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _prefill_template(cluster, chart: Path, values: Path) -> dict[str, Any]:
    """The prefill role's PodTemplate as the API server would store it (server dry run)."""
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,), chart=chart))
    template = next(t for t in manifests.find(objects, "PodTemplate") if "-prefill-" in t["metadata"]["name"])
    return cluster.client().apply(template, dry_run=True)["template"]["spec"]


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_the_schema_refuses_the_api_server_refuses(cluster, schemaless_chart: Path, case: str):
    values = BAD / f"{case}.yaml"
    with pytest.raises(helm.HelmError):  # the chart as it is refuses it when it renders
        helm.template(paths.helm_binary(), (values,))
    objects = manifests.parse(helm.template(paths.helm_binary(), (values,), chart=schemaless_chart))
    found = refusals(cluster.client(), objects)
    assert any(REFUSED[case] in message for message in found), found


@pytest.mark.parametrize("case", sorted(DROPPED))
def test_what_is_gated_off_the_api_server_drops_unsaid(cluster, schemaless_chart: Path, tmp_path: Path, case: str):
    given, where, left = DROPPED[case]
    values = _values(tmp_path, given)
    with pytest.raises(helm.HelmError):
        helm.template(paths.helm_binary(), (values,))
    assert _stored(_prefill_template(cluster, schemaless_chart, values), where) == left


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_what_the_schema_accepts_is_admitted_as_given(cluster, tmp_path: Path, case: str):
    given, where, kept = ACCEPTED[case]
    assert _stored(_prefill_template(cluster, paths.CHART, _values(tmp_path, given)), where) == kept
