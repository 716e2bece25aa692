"""The Api preflight's checks ask, over the Kubernetes client's DynamicClient from the kubeconfig:
get, list, and server-side dry runs, a 403 raised as Forbidden."""

from __future__ import annotations

import json
from typing import Any

from mooncake_pd import kubeconfig
from mooncake_pd.clusterreport import (
    MANAGER,
    Forbidden,
    PreflightError,
)


class KubeApi:
    """Api over the Kubernetes client's DynamicClient (the client verify uses), from the kubeconfig."""

    def __init__(self, context: str | None = None) -> None:
        import tempfile

        from kubernetes import client
        from kubernetes.dynamic import DynamicClient

        kubeconfig.load(context, PreflightError)
        self._cache = tempfile.TemporaryDirectory(prefix="mooncake-pd-preflight-")
        try:
            self._dynamic = DynamicClient(client.ApiClient(), cache_file=f"{self._cache.name}/discovery.json")
        except Exception as e:  # connection refused, DNS, TLS, 401: the cluster cannot be asked
            raise PreflightError(f"no cluster: {e.__class__.__name__}: {_message(e)}") from None

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return None

    def served(self, api_version: str, kind: str) -> bool:
        return self._resource(api_version, kind) is not None

    def dry_run(self, obj: dict[str, Any]) -> str | None:
        from kubernetes.client.exceptions import ApiException

        resource = self._resource(obj["apiVersion"], obj["kind"])
        if resource is None:
            return f"the cluster serves no {obj['kind']} in {obj['apiVersion']}"
        namespace = obj["metadata"].get("namespace") if resource.namespaced else None
        if obj["kind"] == "Pod":
            return self._dry_run_create(resource, obj, namespace)
        try:
            self._dynamic.server_side_apply(
                resource,
                body=obj,
                namespace=namespace,
                field_manager=MANAGER,
                force_conflicts=True,
                dry_run="All",
                query_params=[("fieldValidation", "Strict")],
            )
        except ApiException as e:
            return _message(e)
        return None

    def _dry_run_create(self, resource: Any, pod: dict[str, Any], namespace: str | None) -> str | None:
        """A Pod is dry-run as its controller makes it, a create (POST): so that a pod of the same
        name already running (preflight before an upgrade) is not judged as an update of it. Where
        one exists (409), again under a name of its own."""
        from kubernetes.client.exceptions import ApiException

        for name in (pod["metadata"]["name"], pod["metadata"]["name"][:53] + "-preflight"):
            body = {**pod, "metadata": {**pod["metadata"], "name": name}}
            try:
                self._dynamic.create(
                    resource,
                    body=body,
                    namespace=namespace,
                    field_manager=MANAGER,
                    dry_run="All",
                    query_params=[("fieldValidation", "Strict")],
                )
            except ApiException as e:
                if e.status == 409:
                    continue
                return _message(e)
            return None
        return None

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        resource = self._resource(api_version, kind)
        if resource is None:
            return None
        try:
            found: dict[str, Any] = resource.get(name=name, namespace=namespace).to_dict()
        except ApiException as e:
            if e.status == 404:
                return None
            if e.status == 403:
                raise Forbidden(_message(e)) from None
            raise PreflightError(f"cannot get {kind} {name}: {_message(e)}") from None
        return found

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        resource = self._resource(api_version, kind)
        if resource is None:
            return []
        try:
            items: list[dict[str, Any]] = resource.get(namespace=namespace).to_dict().get("items") or []
        except ApiException as e:
            if e.status == 403:
                raise Forbidden(_message(e)) from None
            raise PreflightError(f"cannot list {kind}: {_message(e)}") from None
        return items


def _message(error: Exception) -> str:
    """The API server's own message of a refusal (its Status), else the error's text."""
    body = getattr(error, "body", None)
    if body:
        try:
            status = json.loads(body)
        except (TypeError, ValueError):
            return str(body)
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    return str(getattr(error, "reason", None) or error)
