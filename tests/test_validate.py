"""mooncake_pd.validate refuses what the API server would, also when schemas and results are
remembered between calls (kubernetes-validate's schema files are read once per process)."""

from __future__ import annotations

import copy

from mooncake_pd import validate

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "s", "namespace": "default"},
    "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "x"}},
}


def test_core_objects_are_checked_strictly_on_every_call():
    assert validate.validate([SERVICE]) == []
    for _ in range(2):  # the second round runs on the remembered schemas
        unknown = copy.deepcopy(SERVICE)
        unknown["spec"]["portz"] = []
        wrong_type = copy.deepcopy(SERVICE)
        wrong_type["spec"]["ports"][0]["port"] = "eighty"
        errors = validate.validate([unknown, wrong_type])
        assert len(errors) == 4, errors  # each against Kubernetes 1.34 (the schema's) and the newest schemas
        assert any("portz" in e for e in errors) and any("eighty" in e for e in errors)
    assert validate.validate([SERVICE]) == []
