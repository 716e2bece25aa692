"""mooncake-pd kv_transfer_config: prints an engine's --kv-transfer-config.

The chart renders the connector's config as JSON from structured values; engine_id is the one
field known only when the pod starts (Kthena's group and role labels, the worker index and, for
NIXL, the start time), so the start script passes it here as data in MOONCAKE_ENGINE_ID rather
than splicing it into JSON text.

Usage: MOONCAKE_ENGINE_ID=<id> python3 kv_transfer_config.py '<JSON rendered by the chart>'
  stdout: the JSON with "engine_id" set.
Python 3.8+, standard library only: it runs with the image's own python3.
"""

from __future__ import annotations

import json
import os
import sys


def with_engine_id(config_json: str, engine_id: str) -> str:
    """The rendered config with engine_id set, as vLLM's --kv-transfer-config reads it."""
    config = json.loads(config_json)
    config["engine_id"] = engine_id
    return json.dumps(config)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: kv_transfer_config.py '<JSON config>' (engine_id from MOONCAKE_ENGINE_ID)", file=sys.stderr)
        return 2
    print(with_engine_id(argv[1], os.environ["MOONCAKE_ENGINE_ID"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
