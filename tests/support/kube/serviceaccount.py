"""A pod's projected API access, as the kubelet lays it out (kubelet's projected volume plugin,
pkg/volume/projected at kubernetes v1.34.2): for each projected volume a container mounts, a
token the API server issues for the pod's ServiceAccount (TokenRequest), the keys of the
ConfigMaps it names (kube-root-ca.crt, which kube-controller-manager publishes in every
namespace), the downward API's metadata.namespace; and the environment the kubelet gives every
container to find the API server (KUBERNETES_SERVICE_HOST and _PORT). The local cluster's API
server listens on 127.0.0.1, which its serving certificate names.

Used where a chart pod that talks to the API server runs as a process (the KV canary behind
Kthena's router, tests/test_e2e_kthena.py), so the real API server authenticates it and the
chart's own Role decides what it may do."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from support.kube.api import Client

# The token lifetime the kubelet asks for when the volume names none (and its floor: 10 min).
DEFAULT_EXPIRATION_SECONDS = 3600


def token(api: Client, namespace: str, account: str, expiration: int = DEFAULT_EXPIRATION_SECONDS) -> str:
    """A token of `account` from the API server (TokenRequest, authentication.k8s.io/v1)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": expiration}}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    return str(api.request("POST", path, body)["status"]["token"])


def project(
    api: Client, namespace: str, spec: dict[str, Any], mounts: dict[str, Path], mounted: list[dict[str, Any]]
) -> dict[str, str]:
    """Write each projected volume of `spec` that the container mounts (`mounted`: its
    volumeMounts; `mounts`: mountPath -> the local folder prepare() gave it); the env the
    kubelet adds for the API server."""
    volumes = {v["name"]: v for v in spec.get("volumes", []) if "projected" in v}
    account = spec.get("serviceAccountName") or "default"
    for mount in mounted:
        volume = volumes.get(mount["name"])
        if volume is None:
            continue
        folder = mounts[mount["mountPath"]]
        for source in volume["projected"]["sources"]:
            if "serviceAccountToken" in source:
                item = source["serviceAccountToken"]
                expiration = int(item.get("expirationSeconds", DEFAULT_EXPIRATION_SECONDS))
                (folder / item["path"]).write_text(token(api, namespace, account, expiration))
            elif "configMap" in source:
                data = api.get("v1", "ConfigMap", source["configMap"]["name"], namespace).get("data") or {}
                for item in source["configMap"].get("items") or [{"key": k, "path": k} for k in data]:
                    (folder / item["path"]).write_text(data[item["key"]])
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    if item.get("fieldRef", {}).get("fieldPath") != "metadata.namespace":
                        raise ValueError(f"projected downwardAPI {item}: only metadata.namespace is laid out here")
                    (folder / item["path"]).write_text(namespace)
            else:
                raise ValueError(f"projected source {sorted(source)}: not laid out here")
    return api_env(api)


def api_env(api: Client) -> dict[str, str]:
    """The environment the kubelet gives every container to find the API server."""
    server = urlsplit(api.server)
    return {"KUBERNETES_SERVICE_HOST": server.hostname or "", "KUBERNETES_SERVICE_PORT": str(server.port)}
