"""Where the commands that talk to a cluster (verify, preflight) find it: the kubeconfig's
context, else the pod's service account. The Kubernetes client is imported here, on use: the
commands that do not talk to a cluster never load it."""

from __future__ import annotations

from mooncake_pd.errors import MooncakePdError

NO_CLUSTER = "no cluster: no kubeconfig (KUBECONFIG or ~/.kube/config) and not in a pod"


def load(context: str | None, error: type[MooncakePdError]) -> None:
    """Configure the Kubernetes client from the kubeconfig (`context`, or its current one) or,
    without one, in-cluster; `error` (the command's own class) where neither is there."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_kube_config(context=context)
    except (ConfigException, FileNotFoundError, TypeError):
        try:
            config.load_incluster_config()
        except ConfigException:
            raise error(NO_CLUSTER) from None
