"""Known advisories as data (advisories.yaml beside this module): which published advisories apply
to a release, from the component versions of its engine version (chart/files/profiles.yaml
engines.<version>: vllm, vllmAscend, mooncake, read through mooncake_pd.profiles) and its layout
(the engines on the host network or not, the chart's NetworkPolicy on or not, an API key set or
not, the KV connector). Each finding is a message `key: problem; fix`. docs/security.md explains
the layouts and ports the rows refer to.

Pure functions; the one file read is the data (`load`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from mooncake_pd import profiles
from mooncake_pd.errors import MooncakePdError

DATA = Path(__file__).resolve().parent / "advisories.yaml"
# What may make a reach open (advisories.yaml reaches.<reach>.openWhen).
CONDITIONS = ("always", "hostNetwork", "noNetworkPolicy")


class AdvisoryError(MooncakePdError):
    """advisories.yaml is incomplete, or a version cannot be read; the message names the field."""


# -- Versions -------------------------------------------------------------------------------------

# PEP 440's public version (packaging.version's grammar, without epochs), with a leading "v" and
# "-rc1"-style separators as the releases spell them (Mooncake's v0.3.14-rc1); a local part
# (+cpu, as in 0.13.0+cpu) is read and ignored.
_VERSION = re.compile(
    r"""^v?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>a|alpha|b|beta|rc|c|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?P<post>-(?P<post_n1>[0-9]+)|[-_.]?(?:post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?P<dev>[-_.]?dev[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?
    $""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "rc": 2, "c": 2, "pre": 2, "preview": 2}

VersionKey = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def version_key(text: str) -> VersionKey:
    """A sort key ordering versions as PEP 440 does: X.devN < X.aN < X.bN < X.rcN < X < X.postN,
    trailing zeros of the release ignored (0.3 == 0.3.0). AdvisoryError for what is no version."""
    match = _VERSION.match(str(text).strip())
    if not match:
        raise AdvisoryError(f"{text!r}: not a version; write it as PEP 440 does (0.3.13, 0.3.13.post1, 0.3.14rc1)")
    release = [int(part) for part in match["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre_label, dev = match["pre_l"], match["dev_n"]
    post = match["post_n1"] or match["post_n2"]
    has_post, has_dev = match["post"] is not None, match["dev"] is not None
    if pre_label:
        pre: tuple[int, ...] = (0, _PRE_RANK[pre_label.lower()], int(match["pre_n"] or 0))
    elif has_dev and not has_post:
        pre = (-1,)  # X.devN sorts before every pre-release of X
    else:
        pre = (1,)  # a final release (or its post releases) after every pre-release
    post_key = (0, int(post or 0)) if has_post else (-1,)
    dev_key = (0, int(dev or 0)) if has_dev else (1,)
    return (tuple(release), pre, post_key, dev_key)


# -- The data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Advisory:
    """One row of advisories.yaml."""

    id: str
    title: str
    component: str
    introduced: str
    fixed: str | None
    last_affected: str | None
    exposes: str
    connectors: tuple[str, ...] | None
    reach: str
    needs_api_key: bool
    deployed: bool
    source: str
    row: dict[str, Any]

    def affects(self, version: str) -> bool:
        """Whether `version` of the component lies in the record's range."""
        key = version_key(version)
        if self.introduced != "0" and key < version_key(self.introduced):
            return False
        if self.fixed is not None:
            return key < version_key(self.fixed)
        return self.last_affected is not None and key <= version_key(self.last_affected)

    @property
    def range_text(self) -> str:
        start = "" if self.introduced == "0" else f">= {self.introduced}, "
        end = f"< {self.fixed}" if self.fixed is not None else f"<= {self.last_affected}"
        return start + end


def check(table: dict[str, Any]) -> list[str]:
    """What is wrong with the table, as `advisories[i].field: problem; fix` lines."""
    problems: list[str] = []
    required = table.get("required") or []
    components = table.get("components") or {}
    reaches = table.get("reaches") or {}
    if not required:
        problems.append("required: missing; list the fields every advisory must have")
    for name, reach in reaches.items():
        unknown = [c for c in reach.get("openWhen") or [] if c not in CONDITIONS]
        if unknown or "openWhen" not in reach or not reach.get("fix"):
            problems.append(
                f"reaches.{name}: openWhen {reach.get('openWhen')!r}, fix {reach.get('fix')!r}; give openWhen among "
                f"{', '.join(CONDITIONS)} (empty: never open) and a fix"
            )
    seen: set[str] = set()
    for i, row in enumerate(table.get("advisories") or []):
        where = f"advisories[{i}] ({row.get('id', '?')})"
        problems += [f"{where}.{field}: missing; every advisory needs it" for field in required if field not in row]
        if row.get("id") in seen:
            problems.append(f"{where}.id: listed twice; keep one row per advisory")
        seen.add(str(row.get("id")))
        if row.get("component") not in components:
            problems.append(f"{where}.component: {row.get('component')!r}; use one of {', '.join(components)}")
        if row.get("reach") not in reaches:
            problems.append(f"{where}.reach: {row.get('reach')!r}; use one of {', '.join(reaches)}")
        if (row.get("fixed") is None) == (row.get("lastAffected") is None):
            problems.append(f"{where}: give exactly one of fixed and lastAffected (the other null), as the record says")
        for field in ("introduced", "fixed", "lastAffected"):
            value = row.get(field)
            if value is not None and str(value) != "0":
                try:
                    version_key(str(value))
                except AdvisoryError as error:
                    problems.append(f"{where}.{field}: {error}")
        if not str(row.get("source", "")).startswith("https://"):
            problems.append(f"{where}.source: {row.get('source')!r}; give the record's https URL")
        if not isinstance(row.get("checked"), bool) or not row.get("checkNote"):
            problems.append(
                f"{where}.checked: give true or false and a checkNote (what was read, or why it could not be)"
            )
        if row.get("deployed") is False and not row.get("notDeployedWhy"):
            problems.append(f"{where}.notDeployedWhy: missing; a row with deployed false says why")
        if row.get("deployed") is False and row.get("reach") != "none":
            problems.append(f"{where}.reach: {row.get('reach')!r} on a part the chart does not run; use none")
    return problems


def _advisory(row: dict[str, Any]) -> Advisory:
    connectors = row["connectors"]
    return Advisory(
        id=str(row["id"]),
        title=" ".join(str(row["title"]).split()),
        component=str(row["component"]),
        introduced=str(row["introduced"]),
        fixed=None if row["fixed"] is None else str(row["fixed"]),
        last_affected=None if row["lastAffected"] is None else str(row["lastAffected"]),
        exposes=" ".join(str(row["exposes"]).split()),
        connectors=None if connectors is None else tuple(str(c) for c in connectors),
        reach=str(row["reach"]),
        needs_api_key=bool(row["needsApiKey"]),
        deployed=bool(row["deployed"]),
        source=str(row["source"]),
        row=row,
    )


@dataclass(frozen=True)
class Table:
    advisories: tuple[Advisory, ...]
    components: dict[str, Any]
    reaches: dict[str, Any]


def parse(table: dict[str, Any]) -> Table:
    """The checked table (AdvisoryError naming every problem)."""
    problems = check(table)
    if problems:
        raise AdvisoryError("advisories.yaml is incomplete:\n  - " + "\n  - ".join(problems))
    return Table(
        advisories=tuple(_advisory(row) for row in table["advisories"]),
        components=dict(table["components"]),
        reaches=dict(table["reaches"]),
    )


@cache
def load(path: Path = DATA) -> Table:
    return parse(yaml.safe_load(path.read_text()))


# -- What a release runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What decides who reaches the engines' ports (docs/security.md)."""

    host_network: bool
    network_policy: bool
    api_key: bool
    connector: str


def components(engine: dict[str, Any], family: str) -> dict[str, str | None]:
    """The components an engine version's pods run on an accelerator family, with their versions
    (None: deployed, version not recorded). The Ascend images carry vLLM-Ascend and the Mooncake
    of profiles.yaml's row; elsewhere the image is vLLM's, whose Mooncake (for MooncakeConnector)
    and NIXL releases no profile records."""
    found: dict[str, str | None] = {"vllm": str(engine["vllm"])}
    if family == "ascend":
        found["vllmAscend"] = None if engine.get("vllmAscend") is None else str(engine["vllmAscend"])
        found["mooncake"] = None if engine.get("mooncake") is None else str(engine["mooncake"])
    else:
        found["mooncake"] = None
        found["nixl"] = None
    return found


def open_because(reach: dict[str, Any], layout: Layout) -> list[str]:
    """Why a reach (advisories.yaml reaches.<name>) is open in a layout; [] when closed."""
    why = {
        "always": "it is the API clients use",
        "hostNetwork": "the engines run on the node's network (engine.hostNetwork), which no NetworkPolicy binds",
        "noNetworkPolicy": "networkPolicy.enabled is false, so every pod of the cluster reaches the engines",
    }
    held = {"always": True, "hostNetwork": layout.host_network, "noNetworkPolicy": not layout.network_policy}
    return [why[c] for c in reach["openWhen"] if held[c]]


@dataclass(frozen=True)
class Finding:
    """An advisory that applies (version known and affected) or may (version not recorded)."""

    advisory: Advisory
    version: str | None
    because: tuple[str, ...]

    @property
    def unknown(self) -> bool:
        return self.version is None


def applicable(table: Table, found: dict[str, str | None], layout: Layout) -> list[Finding]:
    """The advisories that apply to a release running `found` (components()) in `layout`: its
    component is deployed at an affected (or unrecorded) version, its connector is the release's
    (or it names none), its reach is open in the layout, and it needs an API key only where one
    is set. In the data's order."""
    findings: list[Finding] = []
    for advisory in table.advisories:
        if not advisory.deployed or advisory.component not in found:
            continue
        if advisory.connectors is not None and layout.connector not in advisory.connectors:
            continue
        if advisory.needs_api_key and not layout.api_key:
            continue
        because = open_because(table.reaches[advisory.reach], layout)
        if not because:
            continue
        version = found[advisory.component]
        if version is not None and not advisory.affects(version):
            continue
        findings.append(Finding(advisory, version, tuple(because)))
    return findings


def first_fixed_version(advisory: Advisory, accelerator: str, path: Path | None = None) -> str | None:
    """The first engine version the chart offers for `accelerator` (profiles.yaml order) whose
    component is recorded at a version outside the advisory's range; None if there is none."""
    table = profiles.load(path)
    family = str(table["accelerators"][accelerator]["family"])
    for version in profiles.versions_for(accelerator, path):
        running = components(table["engines"][version], family).get(advisory.component)
        if running is not None and not advisory.affects(running):
            return version
    return None


def message(table: Table, finding: Finding, accelerator: str, engine_version: str, path: Path | None = None) -> str:
    """`key: problem; fix` for one finding."""
    advisory = finding.advisory
    name = table.components[advisory.component]["name"]
    reach = table.reaches[advisory.reach]
    if finding.unknown:
        problem = (
            f"{advisory.id} ({name} {advisory.range_text}) may apply: no profile records the {name} release in the "
            f"{accelerator} image of {engine_version}"
        )
        upgrade = f"check the image's {name} release against the record ({advisory.source})"
    else:
        problem = f"{advisory.id} applies to {name} {finding.version} ({advisory.range_text}): {advisory.title}"
        later = first_fixed_version(advisory, accelerator, path)
        bound = f"fixed in {advisory.fixed}" if advisory.fixed else f"none recorded after {advisory.last_affected}"
        upgrade = (
            f"engine.version {later} ships a {name} outside the affected range"
            if later
            else f"no engine version the chart offers for {accelerator} ships a {name} outside the range ({bound})"
        )
    layout_fix = " ".join(str(reach["fix"]).split())
    return f"engine.version: {problem}; open here because {'; '.join(finding.because)}; fix: {upgrade}; {layout_fix}"


# -- From values ----------------------------------------------------------------------------------


def _api_key_set(values: dict[str, Any]) -> bool:
    """engine.apiKeySecret names a Secret (the engines then read VLLM_API_KEY from it)."""
    secret = (values.get("engine") or {}).get("apiKeySecret") or {}
    return bool(secret.get("name")) if isinstance(secret, dict) else False


def layout_of(values: dict[str, Any], path: Path | None = None) -> tuple[str, str, Layout]:
    """(accelerator, engine version, layout) of a values set, with the chart's defaults: the
    profile's hostNetwork where engine.hostNetwork is null, its first connector where
    kvTransfer.connector is empty."""
    accelerator = str((values.get("accelerator") or {}).get("type") or "ascend-a3")
    version = profiles.engine_version(values, path)
    profile = profiles.profile(accelerator, path, version)
    host_network = (values.get("engine") or {}).get("hostNetwork")
    if host_network is None:
        host_network = bool(profile.family["hostNetwork"]["default"])
    connector = str((values.get("kvTransfer") or {}).get("connector") or profile.connectors[0])
    layout = Layout(
        host_network=bool(host_network),
        network_policy=bool((values.get("networkPolicy") or {}).get("enabled")),
        api_key=_api_key_set(values),
        connector=connector,
    )
    return accelerator, version, layout


def problems(values: dict[str, Any], path: Path | None = None, table: Table | None = None) -> list[str]:
    """The messages of every advisory that applies to a release of `values` (merged over the
    chart's defaults by the caller), in the data's order."""
    table = table or load()
    accelerator, version, layout = layout_of(values, path)
    family = str(profiles.load(path)["accelerators"][accelerator]["family"])
    found = components(profiles.load(path)["engines"][version], family)
    return [message(table, f, accelerator, version, path) for f in applicable(table, found, layout)]


# -- From a render --------------------------------------------------------------------------------


def _accelerator_of(container: dict[str, Any], path: Path | None = None) -> str:
    """The accelerator type an engine container was rendered for, by the device resource it
    requests (profiles.yaml resourceName; the one without a device for none)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    devices = {k for k in limits if "/" in k}
    for name, row in profiles.load(path)["accelerators"].items():
        if {str(row["resourceName"])} - {""} == devices:
            return str(name)
    raise AdvisoryError(f"an engine container requests {sorted(devices)}, which no accelerator profile names")


def layout_from_objects(objects: list[dict[str, Any]], path: Path | None = None) -> tuple[str, str, Layout]:
    """(accelerator, engine version, layout) of rendered manifests, read from what was rendered:
    the ModelServing's engine-version and kv-connector annotations, its engine pods' hostNetwork,
    device resource and VLLM_API_KEY, and a NetworkPolicy selecting the engines."""
    serving = next((o for o in objects if o.get("kind") == "ModelServing"), None)
    if serving is None:
        raise AdvisoryError("the render holds no ModelServing: nothing runs engines")
    annotations = serving["metadata"].get("annotations") or {}
    pod = serving["spec"]["template"]["roles"][0]["entryTemplate"]["spec"]
    container = pod["containers"][0]
    engine_policies = [
        o
        for o in objects
        if o.get("kind") == "NetworkPolicy"
        and any(
            e.get("key") == "app.kubernetes.io/component" and "prefill" in (e.get("values") or [])
            for e in (o["spec"].get("podSelector") or {}).get("matchExpressions") or []
        )
    ]
    layout = Layout(
        host_network=bool(pod.get("hostNetwork")),
        network_policy=bool(engine_policies),
        api_key=any(e.get("name") == "VLLM_API_KEY" for e in container.get("env") or []),
        connector=str(annotations["mooncake-pd/kv-connector"]),
    )
    return _accelerator_of(container, path), str(annotations["mooncake-pd/engine-version"]), layout


def problems_from_objects(
    objects: list[dict[str, Any]], path: Path | None = None, table: Table | None = None
) -> list[str]:
    """problems() for rendered manifests (`mooncake-pd render`, `verify`): what applies to what
    was rendered, whichever values made it."""
    table = table or load()
    accelerator, version, layout = layout_from_objects(objects, path)
    family = str(profiles.load(path)["accelerators"][accelerator]["family"])
    found = components(profiles.load(path)["engines"][version], family)
    return [message(table, f, accelerator, version, path) for f in applicable(table, found, layout)]
