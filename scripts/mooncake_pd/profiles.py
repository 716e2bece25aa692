"""The accelerator profiles and engine versions of chart/files/profiles.yaml, as the tooling reads
them: the same file the chart's mooncake-pd.profile helpers read, so that `generate`, the schema's
enum of accelerator.type, the profile table in docs/models-and-accelerators.md and the tests never
hold a copy of it. `check` finds what the chart refuses at render (a row missing a field its table
requires, a family or engine version that does not exist), so the tooling refuses it too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mooncake_pd import manifests, paths
from mooncake_pd.errors import MooncakePdError

TABLES = ("accelerators", "families", "engines", "connectors", "kthena")


class ProfileError(MooncakePdError):
    """chart/files/profiles.yaml is incomplete; the message names each row and field."""


def profiles_file(chart: Path = paths.CHART) -> Path:
    return chart / "files" / "profiles.yaml"


def check(table: dict[str, Any]) -> list[str]:
    """What the chart's mooncake-pd.profile.table refuses, as `table.row.field: problem` lines."""
    problems: list[str] = []
    required = table.get("required") or {}
    for section in TABLES:
        if not required.get(section):
            problems.append(f"required.{section}: missing; list the fields every row of {section} must have")
    accelerators = table.get("accelerators") or {}
    families = table.get("families") or {}
    engines = table.get("engines") or {}
    for name, row in accelerators.items():
        problems += [
            f"accelerators.{name}.{field}: missing; every accelerator needs it (required.accelerators)"
            for field in required.get("accelerators") or ()
            if field not in row
        ]
        family, version = row.get("family"), row.get("engineVersion")
        if family and family not in families:
            problems.append(f"accelerators.{name}.family: {family!r} has no row in families")
        engine = engines.get(str(version)) if version else None
        if version and engine is None:
            problems.append(f"accelerators.{name}.engineVersion: {version!r} has no row in engines")
        elif engine is not None:
            if name not in (engine.get("images") or {}):
                problems.append(f"engines.{version}.images.{name}: missing; accelerator {name} runs {version}")
            for connector in (families.get(family) or {}).get("connectors") or ():
                if connector not in (engine.get("connectors") or {}):
                    problems.append(f"engines.{version}.connectors.{connector}: missing; family {family} lists it")
    for name, row in families.items():
        problems += [
            f"families.{name}.{field}: missing; every family needs it (required.families)"
            for field in required.get("families") or ()
            if field not in row
        ]
        if not row.get("connectors"):
            problems.append(f"families.{name}.connectors: empty; list the KV connectors that work there")
    for version, engine in engines.items():
        problems += [
            f"engines.{version}.{field}: missing; every engine version needs it (required.engines)"
            for field in required.get("engines") or ()
            if field not in engine
        ]
        for connector, row in (engine.get("connectors") or {}).items():
            problems += [
                f"engines.{version}.connectors.{connector}.{field}: missing; every connector needs it"
                for field in required.get("connectors") or ()
                if field not in row
            ]
    for version, row in (table.get("kthena") or {}).items():
        problems += [
            f"kthena.{version}.{field}: missing; every Kthena version needs it (required.kthena)"
            for field in required.get("kthena") or ()
            if field not in row
        ]
    if not table.get("kthena"):
        problems.append("kthena: empty; list the Kthena versions the chart renders for, the default first")
    return problems


@cache
def load(path: Path | None = None) -> dict[str, Any]:
    """The whole table, checked (ProfileError naming every problem)."""
    path = path or profiles_file()
    table = manifests.load(path.read_text())
    if not isinstance(table, dict):
        raise ProfileError(f"{path}: not a mapping")
    problems = check(table)
    if problems:
        raise ProfileError(f"{path} is incomplete:\n  - " + "\n  - ".join(problems))
    return table


@dataclass(frozen=True)
class Profile:
    """One accelerator type with its family's fields and the row of its engine version."""

    type: str
    row: dict[str, Any]
    family: dict[str, Any]
    engine: dict[str, Any]

    @property
    def family_name(self) -> str:
        return str(self.row["family"])

    @property
    def devices_per_node(self) -> int:
        return int(self.row["devicesPerNode"])

    @property
    def device_memory_gib(self) -> float:
        return float(self.row["deviceMemoryGiB"])

    @property
    def resource_name(self) -> str:
        return str(self.row["resourceName"])

    @property
    def image(self) -> str:
        image = self.engine["images"][self.type]
        return f"{image['repository']}:{image['tag']}"

    @property
    def connectors(self) -> list[str]:
        return list(self.family["connectors"])

    def connector(self, name: str | None = None) -> dict[str, Any]:
        """The engine version's row of a connector (default: the profile's first)."""
        return dict(self.engine["connectors"][name or self.connectors[0]])


# A release tag: v<major>.<minor>.<patch>, alone or with suffixes (-a3, -openeuler, -310p), or
# a post release of it (v0.23.0.post1-a3), which names the release's version; the chart's
# mooncake-pd.profile.tagVersion. A release candidate (v0.23.0rc1) names none.
_RELEASE_TAG = re.compile(r"^(v[0-9]+\.[0-9]+\.[0-9]+)(\.post[0-9]+)?(-[a-z0-9]+)*$")


def tag_version(tag: str | None) -> str:
    """The engine version a release tag names ("v0.23.0" of v0.23.0-a3 and of v0.23.0.post1-a3),
    or ""."""
    match = _RELEASE_TAG.match(str(tag or ""))
    return match.group(1) if match else ""


def engine_version(values: dict[str, Any], path: Path | None = None) -> str:
    """The engine version a values set runs, as the chart's mooncake-pd.profile.engineVersion
    picks it: engine.version, else image.tag's release, else the accelerator's default."""
    explicit = str((values.get("engine") or {}).get("version") or "")
    if explicit:
        return explicit
    from_tag = tag_version((values.get("image") or {}).get("tag"))
    if from_tag:
        return from_tag
    accelerator = (values.get("accelerator") or {}).get("type") or "ascend-a3"
    return str(profile(accelerator, path).row["engineVersion"])


def versions_for(accelerator: str, path: Path | None = None) -> list[str]:
    """The engine versions with an image for `accelerator`, in the table's order."""
    return [v for v, row in load(path)["engines"].items() if accelerator in (row.get("images") or {})]


def profile(accelerator: str, path: Path | None = None, version: str | None = None) -> Profile:
    """An accelerator's profile at an engine version (default: the accelerator's own);
    ProfileError, as the chart's, for a version the table lacks or without this accelerator."""
    table = load(path)
    row = table["accelerators"].get(accelerator)
    if row is None:
        known = ", ".join(sorted(table["accelerators"]))
        raise ProfileError(f"accelerator.type: {accelerator!r} is not a known profile; use one of: {known}")
    version = version or row["engineVersion"]
    engine = table["engines"].get(version)
    if engine is None or accelerator not in (engine.get("images") or {}):
        runs = ", ".join(v for v, e in table["engines"].items() if accelerator in (e.get("images") or {}))
        raise ProfileError(
            f"engine.version: {version!r} is not an engine version {accelerator} runs; use one of {runs}"
        )
    return Profile(accelerator, row, table["families"][row["family"]], {"version": version, **engine})


def kthena_versions(path: Path | None = None) -> list[str]:
    """The Kthena versions of the kthena table, the default first."""
    return list(load(path)["kthena"])


def all_profiles(path: Path | None = None) -> dict[str, Profile]:
    """Every accelerator type, in the file's order."""
    return {name: profile(name, path) for name in load(path)["accelerators"]}


def markdown_table(path: Path | None = None) -> str:
    """The profile table of docs/models-and-accelerators.md, from the data alone."""
    lines = [
        "| Profile | Device resource | Devices per node | Image (default) | KV connectors (default first) "
        "| Host mounts | NIC env | CPU / memory (requests, limits) | Host network |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, p in all_profiles(path).items():
        nic = p.family["nic"]
        mounts = ", ".join(f"`{m['mountPath']}`" for m in p.family["hostMounts"]) or "none"
        env = ", ".join([*nic["addressEnv"], *nic["interfaceEnv"], *p.family["valuesEnv"]])
        resource = f"`{p.resource_name}`" if p.resource_name else "none"
        devices = str(p.devices_per_node) if p.devices_per_node else "no device"
        host = p.row["hostResources"]
        sizes = "; ".join(f"{host[kind]['cpu']} / {host[kind]['memory']}" for kind in ("requests", "limits"))
        network = p.family["hostNetwork"]
        on = "on" if network["default"] else "off"
        host_network = f"{on} (required)" if network["required"] else f"{on} (`engine.hostNetwork`)"
        lines.append(
            f"| `{name}`: {p.row['description']} | {resource} | {devices} | `{p.image}` "
            f"| {', '.join(p.connectors)} | {mounts} | {env} | {sizes} per {host['per']} | {host_network} |"
        )
    return "\n".join(lines) + "\n"
