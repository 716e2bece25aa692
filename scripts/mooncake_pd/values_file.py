"""Values files on disk: written new with a header, or edited in place with ruamel.yaml's
round trip (comments, key order and every other key kept), always atomically; and checked before
the tool reads one or hands it to helm (a key given twice, a tab in the indentation)."""

from __future__ import annotations

import copy
import io
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mooncake_pd import paths
from mooncake_pd.errors import MooncakePdError

# The editor's schema line (yaml-language-server) a new values file starts with; schema_ref says
# what it points at.
MODELINE = "# yaml-language-server: $schema="


class ValuesFileError(MooncakePdError):
    """A values file the tool reads cannot be read as the person meant it (a duplicate key, a tab
    in the indentation, not YAML): the message names the file and line, the problem and the fix."""


def _yaml() -> YAML:
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    # Write null as `null`, not as an empty value, so "no override" reads as intended.
    yaml.representer.add_representer(type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null"))
    return yaml


def _commented(value: Any) -> Any:
    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _commented(v)
        return out
    return value


def chart_field(chart: Path, field: str) -> str:
    """A top-level scalar of the chart's Chart.yaml (version, home), as written there."""
    for line in (chart / "Chart.yaml").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return line.split(":", 1)[1].strip().strip("\"'")
    raise paths.Missing(f"{chart / 'Chart.yaml'}: {field}: missing; the chart must give it")


def schema_ref(chart: Path, output: Path | None, cwd: Path | None = None) -> str:
    """What a new values file's schema line points at, so that an editor finds the chart's
    values.schema.json wherever the file is written:
    - the chart of a checkout, or one given with --chart: that folder's schema, relative to the
      folder the file is written to (the current folder for stdout, where `> file` puts it);
      presets in values/ get ../chart/values.schema.json;
    - the copy installed with the package: the schema at the chart version's release tag on the
      project's home (Chart.yaml `home`; a release tag vX.Y.Z is the chart's version,
      .github/workflows/release.yaml). A path into site-packages would break with the next venv,
      and `../chart/` pointed nowhere outside a checkout."""
    schema = chart.resolve() / "values.schema.json"
    if not chart.resolve().is_relative_to(paths.PACKAGE):
        folder = (output.parent if output else cwd or Path.cwd()).resolve()
        return os.path.relpath(schema, folder)
    home = chart_field(chart, "home").rstrip("/").removeprefix("https://github.com/")
    return f"https://raw.githubusercontent.com/{home}/v{chart_field(chart, 'version')}/chart/values.schema.json"


def dump_new(values: dict[str, Any], header: list[str], schema: str) -> str:
    """A new values file: the schema line pointing at `schema` (schema_ref), `# ` header lines,
    then the values."""
    stream = io.StringIO()
    stream.write(MODELINE + schema + "\n")
    release = re.search(r"/v([^/]+)/chart/values\.schema\.json$", schema) if schema.startswith("https://") else None
    if release:
        # The tag is made when the chart version is released (.github/workflows/release.yaml): a
        # tool installed from a checkout of an unreleased version names a tag that is not there yet.
        stream.write(
            f"# The schema above is chart {release[1]}'s, at its release tag v{release[1]}: it resolves once "
            f"{release[1]} is released; before that, point it at chart/values.schema.json of a checkout.\n"
        )
    for line in header:
        stream.write(f"# {line}".rstrip() + "\n")
    _yaml().dump(_commented(values), stream)
    return stream.getvalue()


def _duplicates(node: Node, name: str, path: str, seen: set[int]) -> list[str]:
    """One line per key given twice in a mapping of `node`'s tree (`path`: where `node` is, as
    dotted keys). Keys compare as the strings they are written as: helm turns values into JSON,
    whose keys are strings, so `1:` and `"1":` are one key there too."""
    if id(node) in seen:  # an alias of a node already walked
        return []
    seen.add(id(node))
    found: list[str] = []
    if isinstance(node, MappingNode):
        first: dict[str, int] = {}
        for key, value in node.value:
            label = str(key.value) if isinstance(key, ScalarNode) else "?"
            where = f"{path}.{label}" if path else label
            line = key.start_mark.line + 1
            if label in first:
                found.append(
                    f"{name}:{line}: duplicate key {where}; remove one (line {first[label]} gives it too, "
                    "and helm would keep only the last, silently)"
                )
            else:
                first[label] = line
            found += _duplicates(value, name, where, seen)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            found += _duplicates(item, name, f"{path}[{index}]", seen)
    return found


def _tab_at(error: MarkedYAMLError, text: str) -> str | None:
    """Where a YAML error stops at a tab: "indentation" where only whitespace precedes it on its
    line (YAML never allows that: YAML 1.2.2, 6.1 "Indentation Spaces", and helm refuses it with a
    bare "found character that cannot start any token"), "line" elsewhere, None at no tab."""
    mark = error.problem_mark
    lines = text.splitlines()
    if mark is None or mark.line >= len(lines) or lines[mark.line][mark.column : mark.column + 1] != "\t":
        return None
    return "line" if lines[mark.line][: mark.column].strip() else "indentation"


def problems(text: str, name: str, *, strict: bool) -> list[str]:
    """What makes `text` (a values file called `name`) one helm misreads or refuses unhelpfully:
    duplicate keys (helm keeps the last one silently) and tabs in the indentation, one line each
    as `name:line[:column]: problem; fix`. With strict, any YAML error too (the tool edits the
    file: it must read it); without, a YAML error other than a tab is left to helm, whose reader
    (go-yaml) takes some YAML this one (ruamel.yaml) does not, such as a tab after `key:`."""
    try:
        documents = list(YAML().compose_all(text))
    except YAMLError as e:
        if not isinstance(e, MarkedYAMLError):  # a character YAML does not take (ruamel's ReaderError)
            return [f"{name}: not valid YAML ({' '.join(str(e).split())}); correct it"] if strict else []
        mark = e.problem_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        tab = _tab_at(e, text)
        if tab == "indentation":
            return [f"{where}: a tab in the indentation; tabs are not allowed in YAML indentation: indent with spaces"]
        if not strict:
            return []
        if tab == "line":
            return [f"{where}: a tab this tool's YAML reader (ruamel.yaml) does not take; replace it with a space"]
        return [f"{where}: not valid YAML ({e.problem}); correct it"]
    found: list[str] = []
    seen: set[int] = set()
    for document in documents:
        if document is not None:
            found += _duplicates(document, name, "", seen)
    return found


def check(path: Path, *, strict: bool) -> str:
    """The text of the values file at `path`, or ValuesFileError naming every problem (problems)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValuesFileError(
            f"{path}: cannot read it ({getattr(e, 'strerror', None) or e}); give a values file"
        ) from None
    found = problems(text, str(path), strict=strict)
    if found:
        raise ValuesFileError("\n".join(found))
    return text


def load_text(text: str) -> Any:
    return _yaml().load(text)


def apply(text: str, keys: dict[str, Any]) -> str:
    """`text` with the dotted keys set (REMOVE deletes one), everything else as it was."""
    yaml = _yaml()
    data = yaml.load(text) or CommentedMap()
    for key, value in keys.items():
        parts = key.split(".")
        node = data
        trail = [node]
        missing = False
        for part in parts[:-1]:
            if part not in node or not isinstance(node[part], dict):
                if value is REMOVE:
                    missing = True
                    break
                node[part] = CommentedMap()
            node = node[part]
            trail.append(node)
        if missing:
            continue
        if value is REMOVE:
            node.pop(parts[-1], None)
            for parent, part in zip(reversed(trail[:-1]), reversed(parts[:-1]), strict=True):
                if len(parent[part]) == 0:
                    del parent[part]
        elif node.get(parts[-1], REMOVE) != value or parts[-1] not in node:
            node[parts[-1]] = value
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


def write_atomic(path: Path, text: str, *, backup: bool) -> Path | None:
    """Write `text` to `path` through a temporary file and a rename, so the file is never half
    written; with backup, the previous file is kept as <path>.bak first. Returns the backup.
    A path that is not a regular file (/dev/null, /dev/stdout, a pipe) is written in place: a
    rename would put a regular file where the device was (as root, `render --out /dev/null`
    replaced the machine's /dev/null, and every later non-root open of it failed)."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with path.open("w") as out:
            out.write(text)
        return None
    saved = None
    if backup and path.exists():
        saved = path.with_name(path.name + ".bak")
        shutil.copy2(path, saved)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            shutil.copymode(path, tmp)
        else:
            # mkstemp creates 0600; a new file gets the mode open() would give it (umask).
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return saved


def regenerate(path: Path, current: str, wanted: str, *, check: bool, target: str) -> int:
    """A generated file brought up to date: with `check`, only report a stale one (exit 1,
    naming the make target that rewrites it); otherwise write it atomically if it changed."""
    shown = path.relative_to(paths.REPO) if path.is_relative_to(paths.REPO) else path
    if current == wanted:
        return 0
    if check:
        print(f"{shown} is stale: run `make {target}`", file=sys.stderr)
        return 1
    write_atomic(path, wanted, backup=False)
    print(f"{shown} updated")
    return 0


# A derived key that must be absent from the values file (None, by contrast, writes null,
# which makes helm drop the chart's default: `head_dim: null` means "no head_dim override").
REMOVE = "<remove>"


def chart_defaults(chart: Path | None = None) -> dict[str, Any]:
    """The chart's values.yaml (`chart`, else the checkout's or the installed package's)."""
    return yaml.safe_load((paths.chart_dir(chart) / "values.yaml").read_text())


def merged(base: Any, override: Any) -> Any:
    """override over base, maps merged key by key as helm merges values files."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merged(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)
