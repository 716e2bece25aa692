"""The vendor guide's own start scripts, read from the seed document in ../shared/seeds."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mooncake_pd import paths

SEED = paths.REPO.parent / "shared" / "seeds" / "000_43c801b797d86e0a.txt"


def scripts(seed: Path = SEED) -> dict[str, str]:
    """{"prefill": ..., "decode": ...}: the ConfigMap's prefill.sh and decode.sh as written."""
    lines = seed.read_text().splitlines()
    found: dict[str, str] = {}
    for role in ("prefill", "decode"):
        start = lines.index(f"  {role}.sh: |") + 1
        body = []
        for line in lines[start:]:
            if line and not line.startswith("    "):
                break
            body.append(line)
        found[role] = textwrap.dedent("\n".join(body)).strip() + "\n"
    return found
