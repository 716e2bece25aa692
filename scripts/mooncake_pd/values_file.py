"""Values files on disk: written new with a header, or edited in place with ruamel.yaml's
round trip (comments, key order and every other key kept), always atomically."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from mooncake_pd import paths
from mooncake_pd.generate import REMOVE

SCHEMA_MODELINE = "# yaml-language-server: $schema=../chart/values.schema.json"


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


def dump_new(values: dict[str, Any], header: list[str]) -> str:
    """A new values file: the schema modeline, `# ` header lines, then the values."""
    stream = io.StringIO()
    stream.write(SCHEMA_MODELINE + "\n")
    for line in header:
        stream.write(f"# {line}".rstrip() + "\n")
    _yaml().dump(_commented(values), stream)
    return stream.getvalue()


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
    written; with backup, the previous file is kept as <path>.bak first. Returns the backup."""
    path = Path(path)
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
