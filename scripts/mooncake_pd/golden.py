"""Golden files: the rendered output of the chart defaults and of every values/ file."""

from __future__ import annotations

from pathlib import Path

from mooncake_pd import helm, paths

DEFAULTS = "defaults"


def cases(values_dir: Path = paths.VALUES_DIR) -> dict[str, tuple[Path, ...]]:
    """Golden case name -> values files: the defaults, then each values/*.yaml."""
    found: dict[str, tuple[Path, ...]] = {DEFAULTS: ()}
    for path in sorted(values_dir.glob("*.yaml")):
        found[path.stem] = (path,)
    return found


def golden_path(name: str, golden_dir: Path = paths.GOLDEN_DIR) -> Path:
    return golden_dir / f"{name}.yaml"


def write_all(helm_binary: Path, golden_dir: Path = paths.GOLDEN_DIR) -> list[Path]:
    """Render every case and write its golden file; remove golden files of vanished cases."""
    golden_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, values_files in cases().items():
        out = golden_path(name, golden_dir)
        out.write_text(helm.template(helm_binary, values_files))
        written.append(out)
    for stale in set(golden_dir.glob("*.yaml")) - set(written):
        stale.unlink()
    return written
