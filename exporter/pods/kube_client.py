"""The exporter's Kubernetes API client: the pod's service account, or an explicit kubeconfig outside a cluster."""

from __future__ import annotations

from typing import Any


class KubeClientError(Exception):
    """No usable Kubernetes credentials; the message is one line naming where they were looked for."""


def api_client(kubeconfig: str | None = None) -> Any:
    """An ``ApiClient`` from ``kubeconfig`` when given (``--kubeconfig``), else in-cluster (as dcgm-exporter's
    ``rest.InClusterConfig``). ``~/.kube/config`` is never read implicitly: a DaemonSet must not pick up a
    developer's credentials."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, persist_config=False,
                                    client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except Exception as exc:  # ConfigException, OSError, YAML and key errors from a bad file
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "no in-cluster configuration"
        raise KubeClientError(f"{where}: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    return client.ApiClient(configuration)
