"""A stand-in of one API server call for the conformance run: GET
/api/v1/namespaces/<namespace>/pods, over TLS with a CA of its own, answering a bearer token it
issued with a PodList of given pods and 401 to anything else.

Conformance runs every client container's real command in its image's Python against stand-in
engines, with no cluster (tests/test_conformance.py); behind Kthena's router the KV canary lists
the engine pods first, and this lets its real code path (the projected token and CA files, TLS,
the bearer header, the PodList JSON) run in the image's Python. The real API server, RBAC
included, judges the same request in tests/test_cluster_kv_canary_follows_the_pods.py and
tests/test_e2e_kthena.py. Binds 127.0.0.1; close() stops the thread."""

from __future__ import annotations

import json
import secrets
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from support.kube import certs


def engine_pod(name: str, group: str, role: str, address: str) -> dict[str, Any]:
    """A Ready entry pod as Kthena v1.0.0 labels it."""
    labels = {
        "modelserving.volcano.sh/group-name": group,
        "modelserving.volcano.sh/role": role,
        "modelserving.volcano.sh/entry": "true",
    }
    status = {"podIP": address, "conditions": [{"type": "Ready", "status": "True"}]}
    return {"metadata": {"name": name, "labels": labels}, "status": status}


class PodListing:
    def __init__(self, folder: Path, namespace: str, pods: list[dict[str, Any]]):
        authority = certs.ca(folder, "listing-ca")
        serving = certs.serving(folder, authority, "listing")
        self.ca = authority.cert
        self.token = secrets.token_hex(16)
        self.requests: list[str] = []
        token, path, requests = self.token, f"/api/v1/namespaces/{namespace}/pods", self.requests
        body = json.dumps({"kind": "PodList", "apiVersion": "v1", "items": pods}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                requests.append(self.path)
                if self.headers.get("Authorization") != f"Bearer {token}":
                    self._answer(401, b'{"kind":"Status","code":401}')
                elif self.path.split("?", 1)[0] != path:
                    self._answer(404, b'{"kind":"Status","code":404}')
                else:
                    self._answer(200, body)

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(serving.cert), str(serving.key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def lay_out(self, folder: Path) -> dict[str, str]:
        """Write the token and CA where the pod's projected volume is; the kubelet's env."""
        (folder / "token").write_text(self.token)
        (folder / "ca.crt").write_bytes(self.ca.read_bytes())
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.server.server_address[1])}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def __enter__(self) -> PodListing:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
