"""Where the adapter's Kubernetes credentials come from: an explicit kubeconfig, the pod's service account, or none.

The kubernetes client is imported only when there are credentials to load: a standalone adapter never needs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from kubernetes.client import Configuration

    from adapter.kube.api import KubeClient

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubeConfigError(Exception):
    """Kubernetes credentials that were asked for but cannot be used; the message is one line naming the source."""


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _from_kubeconfig(path: str) -> KubeClient:
    from adapter.kube.api import KubeClient

    return KubeClient(kubeconfig_configuration(path))


def kubeconfig_configuration(path: str) -> Configuration:
    """The current context's server and credentials from the kubeconfig at ``path``, one-line errors."""
    file = Path(path)
    if not file.is_file():
        raise KubeConfigError(f"kubeconfig {path}: no such file")
    try:
        document = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"kubeconfig {path}: unreadable: {_one_line(exc)}") from None
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (expected a YAML mapping with clusters, users, "
                              "contexts and current-context)")
    from kubernetes.client import Configuration
    from kubernetes.config.kube_config import load_kube_config

    configuration = Configuration()
    try:
        # persist_config=False: never write refreshed credentials back into the user's file.
        load_kube_config(config_file=path, persist_config=False, client_configuration=configuration)
        return configuration
    except Exception as exc:  # the loader raises ConfigException, KeyError, TypeError... for bad content
        raise KubeConfigError(f"kubeconfig {path}: {_one_line(exc)}") from None


def _in_cluster(environ: Mapping[str, str], service_account_dir: str) -> KubeClient | None:
    token = os.path.join(service_account_dir, "token")
    if not environ.get("KUBERNETES_SERVICE_HOST") or not os.path.isfile(token):
        return None
    from kubernetes.client import Configuration
    from kubernetes.config.incluster_config import InClusterConfigLoader

    from adapter.kube.api import KubeClient

    configuration = Configuration()
    loader = InClusterConfigLoader(token_filename=token, cert_filename=os.path.join(service_account_dir, "ca.crt"),
                                   environ=environ)
    try:
        loader.load_and_set(configuration)  # re-reads the (rotated) token file every minute
    except Exception as exc:
        raise KubeConfigError(f"in-cluster configuration ({service_account_dir}): {_one_line(exc)}") from None
    return KubeClient(configuration)


def load_api_client(kubeconfig: str | None, *, environ: Mapping[str, str] | None = None,
                    service_account_dir: str = SERVICE_ACCOUNT_DIR) -> KubeClient | None:
    """An API client from ``kubeconfig`` when given, else from the pod's service account, else ``None``.

    ``~/.kube/config`` and ``$KUBECONFIG`` are deliberately not consulted: an adapter that silently picks up a
    developer's credentials would serve another cluster's objects.
    """
    if kubeconfig:
        return _from_kubeconfig(kubeconfig)
    return _in_cluster(os.environ if environ is None else environ, service_account_dir)
