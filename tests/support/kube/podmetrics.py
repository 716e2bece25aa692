"""Stand-in for the engines' /metrics, where Kthena's autoscaler scrapes them: `python
podmetrics.py FILE PORT...`. It runs inside the Kthena controller's network namespace, where the
pod and node address ranges are local routes (cluster.isolated), so a scrape of
http://<pod IP>:<port>/metrics lands here; it answers with the Prometheus text the JSON file FILE
holds for that address and port ({"10.1.0.3:7100": {"vllm:num_requests_running": 300}}), read on
every request so that a test changes the load by rewriting the file. No pods run in the local
cluster (KWOK only marks them Running): this is what their engines' exporter would say.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def exposition(values: dict[str, float]) -> str:
    """Prometheus text exposition of gauges, as vLLM's exporter writes them."""
    lines = []
    for name, value in sorted(values.items()):
        lines += [f"# TYPE {name} gauge", f'{name}{{engine="0",model_name="stand-in"}} {float(value)}']
    return "\n".join(lines) + "\n"


def serve(file: Path, ports: list[int]) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host, port = self.connection.getsockname()[:2]
            try:
                table = json.loads(file.read_text())
            except (OSError, ValueError):
                table = {}
            values = table.get(f"{host}:{port}")
            if self.path.split("?")[0] != "/metrics" or values is None:
                self.send_error(404)
                return
            body = exposition(values).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    # Every interface of the namespace: its loopback and the local pod and node ranges, nothing
    # that leaves it.
    servers = [ThreadingHTTPServer(("0.0.0.0", port), Handler) for port in ports]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    print(f"podmetrics: serving {file} on {ports}", flush=True)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    serve(Path(sys.argv[1]), [int(p) for p in sys.argv[2:]])
