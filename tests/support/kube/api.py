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

from support.waits import DETAIL_CHARS, brief, record_wait

T = TypeVar("T")
Obj = dict[str, Any]
# One API call: an apply may wait on Kthena's webhook, which the API server gives 30 s
# (timeoutSeconds of its registration, cluster._webhooks); twice that, for a loaded machine.
# No other call comes near it: the 61 cluster tests, thousands of calls and waits, take 269-343 s.
REQUEST_TIMEOUT = 60.0


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
        timeout: float = REQUEST_TIMEOUT,
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


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    interval: float = 0.5,
    seen: Callable[[], object] | None = None,
    detail: Callable[[], str] | None = None,
) -> T:
    """Call `probe` until it returns something other than None or False, at most `timeout`
    seconds (it is called at least once, and once more at the deadline). On time out a
    TimeoutError whose first line names `what`, what `seen()` says there is (the pods and their
    states, an object's status, the last answer...; trimmed) and the last ApiError or OSError a
    probe raised; `detail()` follows on the next lines (a log's tail, at most DETAIL_CHARS)."""
    start = time.monotonic()
    deadline = start + timeout
    last: BaseException | None = None
    last_at = probes = 0
    while True:
        probes += 1
        try:
            value = probe()
            if value is not None and value is not False:
                record_wait(what, time.monotonic() - start, timeout, True)
                return value
        except (ApiError, OSError) as e:
            last, last_at = e, probes
        left = deadline - time.monotonic()
        if left <= 0:
            break
        time.sleep(min(interval, left))
    record_wait(what, time.monotonic() - start, timeout, False)
    message = f"{what}: not after {timeout:.0f} s ({probes} probes)"
    if seen is not None:
        try:
            message += f"; saw: {brief(seen())}"
        except Exception as e:  # the timeout is the failure: say why there is no view of it
            message += f"; saw: (could not look: {brief(e, 120)})"
    if last is not None:
        message += f"; last error (probe {last_at}): {brief(last, 160)}"
    if detail is not None:
        try:
            message += "\n" + detail()[-DETAIL_CHARS:]
        except Exception as e:  # as above
            message += f"\n(no detail: {brief(e, 120)})"
    raise TimeoutError(message)


def conditions(obj: Obj) -> dict[str, str]:
    """An object's status conditions, type -> status."""
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def pod_brief(pod: Obj) -> str:
    """A pod as a timeout names it: `name (phase, Ready or not, why not scheduled, terminating,
    restarts, a container waiting and why)`."""
    status = pod.get("status") or {}
    parts = [status.get("phase") or "no phase"]
    found = {c["type"]: c for c in status.get("conditions") or []}
    if "Ready" in found:
        parts.append("Ready" if found["Ready"]["status"] == "True" else "not Ready")
    scheduled = found.get("PodScheduled")
    if scheduled and scheduled["status"] != "True":
        parts.append(f"unscheduled: {scheduled.get('reason', '')} {brief(scheduled.get('message', ''), 60)}".strip())
    if pod["metadata"].get("deletionTimestamp"):
        parts.append("terminating")
    restarts = sum(int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or [])
    if restarts:
        parts.append(f"{restarts} restarts")
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            parts.append(f"{container['name']} waiting: {waiting.get('reason', '')}")
    if status.get("reason"):
        parts.append(f"{status['reason']}: {brief(status.get('message', ''), 60)}")
    return f"{pod['metadata']['name']} ({', '.join(parts)})"


def pods_brief(pods: list[Obj]) -> str:
    """Every pod's pod_brief, or `no pods`."""
    return "; ".join(pod_brief(p) for p in sorted(pods, key=lambda p: p["metadata"]["name"])) or "no pods"
