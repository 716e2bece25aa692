"""The install-time copies of the engine pod templates (validation.podTemplates,
chart/templates/validate-podtemplates.yaml): one core/v1 PodTemplate per role template, each the
very template Kthena gets, as a pre-install/pre-upgrade hook deleted once admitted. What the API
server makes of them is tests/test_cluster_pod_templates_judged_at_install.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import Renderer
from mooncake_pd import helm, manifests, paths

PRESETS: list[Path | None] = [
    None,
    *sorted(paths.VALUES_DIR.glob("*.yaml")),
    *sorted((paths.CHART / "ci").glob("*-values.yaml")),
]
HOOK = {
    "helm.sh/hook": "pre-install,pre-upgrade",
    "helm.sh/hook-delete-policy": "before-hook-creation,hook-succeeded",
}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: "defaults" if p is None else f"{p.parent.name}/{p.name}")
def test_each_role_template_is_judged_as_it_is_given_to_kthena(render: Renderer, preset: Path | None):
    """Every entry and worker template of the ModelServing has its PodTemplate, equal to it, so
    what the API server admits at install is what Kthena creates pods from; nothing else."""
    rendered = render((preset,) if preset else ())
    fullname = rendered.modelserving["metadata"]["name"]
    expected = {
        f"{fullname}-{role['name']}-{kind.removesuffix('Template')}-check": role[kind]
        for role in rendered.modelserving["spec"]["template"]["roles"]
        for kind in ("entryTemplate", "workerTemplate")
        if role.get(kind)
    }
    found = {t["metadata"]["name"]: t for t in rendered.find("PodTemplate")}
    assert set(found) == set(expected)
    for name, template in found.items():
        assert template["template"] == expected[name], name
        assert template["metadata"]["annotations"] == HOOK, name
        assert template["metadata"]["namespace"] == paths.NAMESPACE


def test_a_multi_node_role_has_its_worker_template_judged(render: Renderer):
    rendered = render((paths.VALUES_DIR / "deepseek-r1-w8a8-a3-2p1d-multinode.yaml",))
    names = sorted(t["metadata"]["name"] for t in rendered.find("PodTemplate"))
    assert any(n.endswith("-worker-check") for n in names), names


def test_off_renders_no_pod_template_and_nothing_else_changes(render: Renderer):
    on = render()
    off = render(overrides={"validation": {"podTemplates": False}})
    assert off.find("PodTemplate") == []
    assert [o for o in on.objects if o["kind"] != "PodTemplate"] == off.objects


# Kubernetes 1.34 forms that are valid (issue 54): preStop sleep, matchLabelKeys in a pod affinity
# term, a generic ephemeral volume with a storage request. The API server admits them as
# PodTemplates and Pods (test_cluster_pod_templates_judged_at_install).
VALID_134 = {
    "engine": {
        "extraVolumes": [
            {
                "name": "scratch",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                    }
                },
            }
        ],
        "extraContainers": [
            {
                "name": "exporter",
                "image": "docker.io/library/busybox:1.37",
                "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
            }
        ],
    },
    "prefill": {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "decode"}},
                            "matchLabelKeys": ["app.kubernetes.io/instance"],
                        },
                    }
                ]
            }
        }
    },
}


@pytest.mark.parametrize("version", paths.HELM_VERSIONS)
def test_the_chart_renders_the_valid_kubernetes_134_forms(tmp_path: Path, version: str):
    """The schema types the pass-through fields from Kubernetes v1.34.2's own OpenAPI
    (mooncake_pd.kubeopenapi), so helm 3 and 4 take the three forms; each reaches the pod
    templates as given."""
    values = tmp_path / "valid-134.yaml"
    values.write_text(yaml.safe_dump(VALID_134))
    objects = manifests.parse(helm.template(paths.helm_binary(version), (values,)))
    templates = {t["metadata"]["name"]: t["template"]["spec"] for t in manifests.find(objects, "PodTemplate")}
    assert len(templates) == 2
    for name, spec in templates.items():
        assert VALID_134["engine"]["extraVolumes"][0] in spec["volumes"], name
        sidecar = next(c for c in spec["containers"] if c["name"] == "exporter")
        assert sidecar["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}, name
    prefill = next(spec for name, spec in templates.items() if "-prefill-" in name)
    assert prefill["affinity"] == VALID_134["prefill"]["affinity"]
