"""Every CEL rule of the vendored Kthena CRDs is evaluated: for each, an object that keeps it and
one that breaks it (mooncake_pd.cel; the cases are written against the rules at
volcano-sh/kthena@3cc0572, and every rule of each vendored Kthena version must have one).

The local cluster's API server evaluates the same rules for real (tests/test_cluster_admission.py);
these cases stay because they name each rule and run without the cluster."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from mooncake_pd import cel, manifests, paths

ASP = "workload.serving.volcano.sh_autoscalingpolicies.yaml"
MR = "networking.serving.volcano.sh_modelroutes.yaml"
MS = "workload.serving.volcano.sh_modelservings.yaml"
MSRV = "networking.serving.volcano.sh_modelservers.yaml"
API = {
    ASP: "workload.serving.volcano.sh/v1alpha1",
    MR: "networking.serving.volcano.sh/v1alpha1",
    MS: "workload.serving.volcano.sh/v1alpha1",
}


MAIN = "main-3cc0572"
VERSIONS = ("v1.0.0", MAIN)


@cache
def crd(name: str, version: str = MAIN) -> dict[str, Any]:
    # The ModelServing CRD is large: parsed once per session.
    return manifests.load((paths.KTHENA_CRDS / version / name).read_text())


def obj(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API[name], "kind": "X", "metadata": {"name": "x"}, "spec": spec}


PROM = {"prometheus": {"serverURL": "http://p:9090", "query": "up"}}
POD = {"pod": {"port": 8000}}


def disagg(decode_source: dict[str, Any] | None = None, roles: int = 2, ratio: dict[str, Any] | None = None):
    """prefill's metric source is always valid; decode's is the one under test."""

    def role(source: dict[str, Any]) -> dict[str, Any]:
        return {"minReplicas": 1, "maxReplicas": 2, "metricSources": {"m": source}}

    all_roles = {"prefill": role(POD), "decode": role(POD if decode_source is None else decode_source)}
    names = ["prefill", "decode"][:roles]
    target: dict[str, Any] = {"targetRef": {"name": "ms"}, "roles": {n: all_roles[n] for n in names}}
    if ratio is not None:
        target["ratioConstraint"] = ratio
    return {"disaggregatedTarget": target}


RATIO_OK = {"numeratorRole": "prefill", "denominatorRole": "decode", "minRatio": "1", "maxRatio": "2"}
RATIO_SAME = {**RATIO_OK, "denominatorRole": "prefill"}
HOMO = "spec.homogeneousTarget.target.metricSources[*]"
HETERO = "spec.heterogeneousTarget.params[].target.metricSources[*]"
ROLE_SOURCES = "spec.disaggregatedTarget.roles[*].metricSources[*]"


def homo(source: dict[str, Any]) -> dict[str, Any]:
    return {
        "homogeneousTarget": {
            "minReplicas": 1,
            "maxReplicas": 2,
            "target": {"targetRef": {"name": "m"}, "metricSources": {"m": source}},
        }
    }


def hetero(source: dict[str, Any]) -> dict[str, Any]:
    param = {"minReplicas": 0, "maxReplicas": 2, "target": {"targetRef": {"name": "m"}, "metricSources": {"m": source}}}
    return {"heterogeneousTarget": {"params": [param]}}


def roles(*names: str, gang: bool = False) -> dict[str, Any]:
    template: dict[str, Any] = {"roles": [{"name": n, "workerReplicas": 0, "entryTemplate": {}} for n in names]}
    if gang:
        template["gangPolicy"] = {"minRoleReplicas": {names[0]: 1}}
    return {"template": template}


# (crd, rule path, rule start, passing (spec, old spec), failing (spec, old spec), expected error)
CASES = [
    (
        ASP,
        "spec.disaggregatedTarget.ratioConstraint",
        "self.numeratorRole",
        (disagg(ratio=RATIO_OK), None),
        (disagg(ratio=RATIO_SAME), None),
        "spec.disaggregatedTarget.ratioConstraint: numeratorRole and denominatorRole must differ",
    ),
    (
        ASP,
        ROLE_SOURCES,
        "has(self.pod) ||",
        (disagg(PROM), None),
        (disagg({}), None),
        "spec.disaggregatedTarget.roles[decode].metricSources[m]: one metric source backend config is required",
    ),
    (
        ASP,
        ROLE_SOURCES,
        "!(has(self.pod)",
        (disagg(POD), None),
        (disagg({**POD, **PROM}), None),
        "spec.disaggregatedTarget.roles[decode].metricSources[m]: pod and prometheus configs are mutually exclusive",
    ),
    (
        ASP,
        "spec.disaggregatedTarget",
        "!has(self.ratioConstraint)",
        (disagg(roles=1), None),
        (disagg(roles=1, ratio=RATIO_OK), None),
        "spec.disaggregatedTarget: roles must contain at least two entries when ratioConstraint is configured",
    ),
    (
        ASP,
        HOMO,
        "has(self.pod) ||",
        (homo(POD), None),
        (homo({}), None),
        "spec.homogeneousTarget.target.metricSources[m]: one metric source backend config is required",
    ),
    (
        ASP,
        HOMO,
        "!(has(self.pod)",
        (homo(PROM), None),
        (homo({**POD, **PROM}), None),
        "spec.homogeneousTarget.target.metricSources[m]: pod and prometheus configs are mutually exclusive",
    ),
    (
        ASP,
        HETERO,
        "has(self.pod) ||",
        (hetero(PROM), None),
        (hetero({}), None),
        "spec.heterogeneousTarget.params[0].target.metricSources[m]: one metric source backend config is required",
    ),
    (
        ASP,
        HETERO,
        "!(has(self.pod)",
        (hetero(POD), None),
        (hetero({**POD, **PROM}), None),
        "spec.heterogeneousTarget.params[0].target.metricSources[m]: pod and prometheus configs are mutually exclusive",
    ),
    (
        MR,
        "spec",
        'self.modelName != ""',
        ({"modelName": "m", "rules": []}, None),
        ({"modelName": "", "loraAdapters": [], "rules": []}, None),
        "spec: ModelName and LoraAdapters cannot both be empty",
    ),
    (
        MR,
        "spec.modelName",
        "self == oldSelf",
        ({"modelName": "m"}, {"modelName": "m"}),
        ({"modelName": "m"}, {"modelName": "n"}),
        "spec.modelName: modelName is immutable",
    ),
    (
        MR,
        "spec.rules[].targetModels[]",
        "(has(self.modelServerName)",
        ({"modelName": "m", "rules": [{"targetModels": [{"modelServerName": "s"}]}]}, None),
        (
            {
                "modelName": "m",
                "rules": [{"targetModels": [{"modelServerName": "s", "externalModelProviderName": "e"}]}],
            },
            None,
        ),
        "spec.rules[0].targetModels[0]: exactly one of modelServerName or externalModelProviderName must be set",
    ),
    (
        MS,
        "spec.template.roles",
        "self.all(",
        (roles("prefill", "decode"), None),
        (roles("prefill", "prefill"), None),
        "spec.template.roles: roles name must be unique",
    ),
    (
        MS,
        "spec.template.gangPolicy.minRoleReplicas",
        "self == oldSelf",
        (roles("a", gang=True), roles("a", gang=True)),
        ({"template": {**roles("a")["template"], "gangPolicy": {"minRoleReplicas": {"a": 2}}}}, roles("a", gang=True)),
        "spec.template.gangPolicy.minRoleReplicas: minRoleReplicas is immutable",
    ),
    (
        MS,
        "spec.template",
        "!has(oldSelf.gangPolicy)",
        (roles("a", gang=True), roles("a", gang=True)),
        (roles("a"), roles("a", gang=True)),
        "spec.template: gangPolicy is required once set",
    ),
]


def _errors(name: str, spec: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    return cel.errors(crd(name), obj(name, spec), None if old is None else obj(name, old))


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].split('_')[1]}:{c[1]}:{c[2]}" for c in CASES])
def test_rule_kept_and_broken(case):
    name, _, _, (good, good_old), (bad, bad_old), expected = case
    assert _errors(name, good, good_old) == []
    assert _errors(name, bad, bad_old) == [expected]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_vendored_rule_has_a_case(version):
    covered = {(c[0], c[1], c[2]) for c in CASES}
    for name in (ASP, MR, MS, MSRV):
        for rule in cel.rules(cel.schema_for(crd(name, version))):
            cel.check_supported(rule.rule)
            assert any(n == name and p == rule.path and rule.rule.startswith(s) for n, p, s in covered), rule


def test_transition_rules_are_skipped_on_create():
    assert _errors(MR, {"modelName": "m", "rules": []}, None) == []
    assert _errors(MS, roles("a"), None) == []


def test_a_missing_field_is_an_evaluation_error_as_in_the_api_server():
    rule = 'self.modelName != "" || size(self.loraAdapters) > 0'
    assert _errors(MR, {"rules": []}, None) == [f"spec: no such key: modelName, loraAdapters evaluating rule: {rule}"]


def test_an_unsupported_function_raises_even_when_short_circuited():
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "true || self.items.isSorted()"}]}
    fake = {
        "spec": {"group": "g", "versions": [{"name": "v1", "storage": True, "schema": {"openAPIV3Schema": schema}}]}
    }
    with pytest.raises(cel.CelUnsupported, match="isSorted"):
        cel.errors(fake, {"apiVersion": "g/v1", "items": [1]})
    with pytest.raises(cel.CelUnsupported, match="quantity"):
        cel.evaluate("quantity(self) > quantity('1')", "2")


def test_an_unknown_version_is_an_error():
    with pytest.raises(cel.CelError, match="no version"):
        cel.errors(crd(MR), {"apiVersion": "networking.serving.volcano.sh/v9", "spec": {}})
