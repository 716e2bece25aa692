"""mooncake-pd download_model: the init container that fetches the model into the pod, once.

Fetches DOWNLOAD_REPO at DOWNLOAD_REVISION from DOWNLOAD_HUB (huggingface or modelscope) into
MODEL_LOCATION, unless a marker file there says that exact repository and revision is already
present. A lock beside the target keeps pods that share a claim from downloading together: the
second waits, then finds the marker.

Env: MODEL_LOCATION, DOWNLOAD_HUB, DOWNLOAD_REPO, DOWNLOAD_REVISION; HF_TOKEN or
MODELSCOPE_API_TOKEN when the chart's model.download.tokenSecret is set.
Python 3.8+; imports only the hub's own client, and only when it downloads.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import sys
from collections.abc import Mapping

MARKER = ".mooncake-pd-download"


def wanted(env: Mapping[str, str]) -> str:
    """What the marker records: hub:repo@revision."""
    return f"{env['DOWNLOAD_HUB']}:{env['DOWNLOAD_REPO']}@{env['DOWNLOAD_REVISION']}"


def present(target: pathlib.Path, what: str) -> bool:
    marker = target / MARKER
    return marker.is_file() and marker.read_text().strip() == what


def fetch(env: Mapping[str, str], target: pathlib.Path) -> None:
    """The hub's own snapshot download into target (each client reads its token itself, but
    ModelScope's needs a login first)."""
    repo, revision = env["DOWNLOAD_REPO"], env["DOWNLOAD_REVISION"]
    if env["DOWNLOAD_HUB"] == "modelscope":
        from modelscope import snapshot_download

        if env.get("MODELSCOPE_API_TOKEN"):
            from modelscope.hub.api import HubApi

            HubApi().login(env["MODELSCOPE_API_TOKEN"])
        snapshot_download(repo, revision=revision, local_dir=str(target))
    else:
        from huggingface_hub import snapshot_download  # reads HF_TOKEN itself

        snapshot_download(repo_id=repo, revision=revision, local_dir=str(target))


def main(env: Mapping[str, str]) -> int:
    target = pathlib.Path(env["MODEL_LOCATION"])
    what = wanted(env)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if present(target, what):
            print(f"{target} already holds {what}; no download", flush=True)
            return 0
        print(f"downloading {what} into {target}", flush=True)
        target.mkdir(exist_ok=True)
        fetch(env, target)
        (target / MARKER).write_text(what + "\n")
        print(f"downloaded {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(os.environ))
