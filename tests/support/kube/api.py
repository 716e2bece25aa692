"""A small client of the Kubernetes API for the tests: the REST calls they make (server-side
apply with dry-run and strict field validation, get, list, delete, status patches), with the
resource of each kind found by discovery. urllib only, so what the tests send is what the API
server receives, and a refusal comes back with the API server's own message."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
Obj = dict[str, Any]


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str, body: Obj | None = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body or {}


@dataclass(frozen=True)
class Resource:
    path: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool


@dataclass
class Client:
    server: str
    token: str
    ca_file: Path
    _context: ssl.SSLContext | None = field(default=None, repr=False)
    _resources: dict[tuple[str, str], Resource] = field(default_factory=dict, repr=False)

    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context(cafile=str(self.ca_file))
        return self._context

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 60,
        query: dict[str, str] | None = None,
    ) -> Obj:
        url = self.server + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        data = (
            None
            if body is None
            else (body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode())
        )
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._ssl()) as answer:
                text = answer.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                status = json.loads(raw)
            except ValueError:
                raise ApiError(e.code, raw.decode(errors="replace")) from None
            raise ApiError(e.code, status.get("message", str(status)), status) from None
        if not text:
            return {}
        try:
            parsed: Obj = json.loads(text)
        except ValueError:  # /readyz and /healthz answer in plain text
            return {"text": text.decode(errors="replace")}
        return parsed

    def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for entry in self.request("GET", base).get("resources", []):
                if "/" not in entry["name"]:
                    self._resources[(api_version, entry["kind"])] = Resource(base, entry["name"], entry["namespaced"])
            if key not in self._resources:
                raise ApiError(404, f"the API server serves no {kind} in {api_version}")
        return self._resources[key]

    def path(self, obj: Obj, namespace: str = "default", name: bool = True) -> str:
        res = self.resource(obj["apiVersion"], obj["kind"])
        ns = obj.get("metadata", {}).get("namespace") or namespace
        prefix = f"{res.path}/namespaces/{ns}/{res.plural}" if res.namespaced else f"{res.path}/{res.plural}"
        return f"{prefix}/{obj['metadata']['name']}" if name else prefix

    def apply(
        self, obj: Obj, manager: str = "mooncake-pd-tests", dry_run: bool = False, namespace: str = "default"
    ) -> Obj:
        """Server-side apply with strict field validation (an unknown or duplicate field is an
        error, as `kubectl apply --validate=strict` makes it), optionally as a dry run: every
        admission step (built-in, CRD schema and CEL, webhooks) runs, nothing is stored."""
        query = {"fieldManager": manager, "fieldValidation": "Strict", "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        # UTF-8 as helm and kubectl send it: the apply-patch YAML parser refuses the JSON
        # surrogate escapes (\ud800...) that ensure_ascii would write for characters above U+FFFF.
        body = json.dumps(obj, ensure_ascii=False).encode()
        return self.request("PATCH", self.path(obj, namespace), body, "application/apply-patch+yaml", query=query)

    def get(self, api_version: str, kind: str, name: str, namespace: str = "default") -> Obj:
        probe = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        return self.request("GET", self.path(probe, namespace))

    def list(self, api_version: str, kind: str, namespace: str | None = "default", **query: str) -> list[Obj]:
        probe = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "-"}}
        res = self.resource(api_version, kind)
        path = self.path(probe, namespace or "default", name=False)
        if namespace is None and res.namespaced:
            path = f"{res.path}/{res.plural}"
        items: list[Obj] = self.request("GET", path, query=query).get("items", [])
        return items

    def delete(self, obj: Obj, namespace: str = "default", **query: str) -> None:
        try:
            self.request("DELETE", self.path(obj, namespace), query=query)
        except ApiError as e:
            if e.status != 404:
                raise

    def patch_status(self, obj: Obj, patch: Obj, namespace: str = "default") -> Obj:
        return self.request("PATCH", self.path(obj, namespace) + "/status", patch, "application/merge-patch+json")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Call `probe` until it returns something other than None or False, at most `timeout`
    seconds; TimeoutError naming `what` and the last exception, if any."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except (ApiError, OSError) as e:
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s" + (f" (last: {last})" if last else ""))
