"""mooncake-pd chat_check: the `helm test` pod. Sends the guide's chat request through the
router; passes on HTTP 200 with a non-empty completion. Retries while the router is not
reachable yet (12 attempts, 10 s apart); an HTTP error fails at once.

Env: CHAT_URL (the router's /v1/chat/completions), CHAT_REQUEST (the request body, JSON),
OPENAI_API_KEY (engine.apiKeySecret, optional: sent as a bearer token, which Kthena's router
forwards to the engines).
Python 3.8+, standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

ATTEMPTS = 12
RETRY_SECONDS = 10
TIMEOUT_SECONDS = 300


def completion(payload: dict[str, Any]) -> str:
    """The first choice's message content ("" when there is none)."""
    return ((payload.get("choices") or [{}])[0].get("message") or {}).get("content") or ""


def headers(api_key: str) -> dict[str, str]:
    """The request's headers: the engines' key as a bearer token where there is one."""
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}


def post(url: str, body: bytes, api_key: str = "") -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=body, headers=headers(api_key))
    with urllib.request.urlopen(req, timeout=TIMEOUT_SECONDS) as resp:
        return resp.status, json.load(resp)


def main(env: dict[str, str]) -> int | str:
    url = env["CHAT_URL"]
    body = env["CHAT_REQUEST"].encode()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            status, payload = post(url, body, env.get("OPENAI_API_KEY", ""))
            break
        except urllib.error.HTTPError as err:
            return f"FAIL: {url} answered HTTP {err.code}: {err.read()[:500]!r}"
        except (urllib.error.URLError, OSError) as err:
            print(f"attempt {attempt}: {url} not reachable ({err}); retrying in {RETRY_SECONDS}s", flush=True)
            time.sleep(RETRY_SECONDS)
    else:
        return f"FAIL: {url} not reachable"
    content = completion(payload)
    if status != 200 or not content.strip():
        return f"FAIL: HTTP {status}, empty completion: {json.dumps(payload)[:500]}"
    print(f"PASS: HTTP {status}, {len(content)} characters: {content[:200]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
