"""Stand-ins of the node a pod runs on, holding the model of a values set (the fixture
config.json of that model, by the folder name of model.path)."""

from __future__ import annotations

from pathlib import Path

from mooncake_pd import engines, manifests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def config_text(model_path: str) -> str | None:
    """The fixture config.json of the model at `model_path` (by its folder name), if any."""
    config = FIXTURES / Path(model_path).name / "config.json"
    return config.read_text() if config.is_file() else None


def for_objects(objects: list[manifests.Manifest], **node) -> engines.Node:
    """A node holding the rendered ModelServing's model (model.path), with `node`'s settings."""
    modelserving = manifests.one(objects, "ModelServing")
    container = modelserving["spec"]["template"]["roles"][0]["entryTemplate"]["spec"]["containers"][0]
    model_path = next(e["value"] for e in container["env"] if e["name"] == "MODEL_LOCATION")
    return engines.Node(model_config=config_text(model_path) or engines.STAND_IN_MODEL, **node)
