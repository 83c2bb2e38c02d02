"""Where the adapter's Kubernetes credentials come from: an explicit kubeconfig, the pod's service account, or none.

The kubernetes client's loaders read the kubeconfig and the service account; ``adapter.kube.credentials`` keeps
what they give current off the serving loop (read again every minute: a rotated token file or client
certificate is picked up). A kubeconfig whose user is an exec plugin (``aws eks get-token``) is loaded without
it, and the plugin is run by ``adapter.kube.execplugin`` instead: when its credential expires, never on the loop.
The kubernetes client is imported only when there are credentials to load: a standalone adapter never needs it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from adapter.kube.errors import KubeConfigError, one_line

if TYPE_CHECKING:
    from kubernetes.client import Configuration

    from adapter.kube.api import KubeClient

__all__ = ["SERVICE_ACCOUNT_DIR", "KubeConfigError", "kubeconfig_configuration", "load_api_client"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def read_kubeconfig(path: str) -> dict[str, Any]:
    """The kubeconfig document, one-line errors naming the file."""
    file = Path(path)
    if not file.is_file():
        raise KubeConfigError(f"kubeconfig {path}: no such file")
    try:
        document = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KubeConfigError(f"kubeconfig {path}: unreadable: {one_line(exc)}") from None
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (expected a YAML mapping with clusters, users, "
                              "contexts and current-context)")
    return document


def configuration_from(document: dict[str, Any], path: str) -> Configuration:
    """The current context's server and credentials (an exec plugin it names is run once, here)."""
    from kubernetes.client import Configuration
    from kubernetes.config.kube_config import KubeConfigLoader

    configuration = Configuration()
    try:
        # Relative paths are relative to the kubeconfig's directory; refreshed credentials are never written back.
        KubeConfigLoader(document, config_base_path=os.path.dirname(os.path.abspath(path))).load_and_set(
            configuration)
        return configuration
    except Exception as exc:  # the loader raises ConfigException, KeyError, TypeError... for bad content
        raise KubeConfigError(f"kubeconfig {path}: {one_line(exc)}") from None


def kubeconfig_configuration(path: str) -> Configuration:
    """The current context's server and credentials from the kubeconfig at ``path``, one-line errors."""
    return configuration_from(read_kubeconfig(path), path)


def _from_kubeconfig(path: str) -> KubeClient:
    from adapter.kube import execplugin
    from adapter.kube.api import KubeClient
    from adapter.kube.credentials import Credentials, ExecPluginCredentials, ReloadedConfiguration

    def load() -> Configuration:
        return configuration_from(execplugin.without_exec(read_kubeconfig(path)), path)

    document = read_kubeconfig(path)
    configuration = configuration_from(execplugin.without_exec(document), path)
    chosen = execplugin.chosen_exec(document)
    if chosen is None:
        return KubeClient(configuration, Credentials(ReloadedConfiguration(load, f"kubeconfig {path}")))
    settings = execplugin.exec_settings(chosen[0], chosen[1], where=f"kubeconfig {path}",
                                        base_dir=os.path.dirname(os.path.abspath(path)))
    source = ExecPluginCredentials(settings, configuration, f"the exec plugin {settings.name} of kubeconfig {path}")
    return KubeClient(configuration, Credentials(source))


def _in_cluster(environ: Mapping[str, str], service_account_dir: str) -> KubeClient | None:
    token = os.path.join(service_account_dir, "token")
    if not environ.get("KUBERNETES_SERVICE_HOST") or not os.path.isfile(token):
        return None
    from adapter.kube.api import KubeClient
    from adapter.kube.credentials import Credentials, ReloadedConfiguration

    def load() -> Configuration:
        from kubernetes.client import Configuration
        from kubernetes.config.incluster_config import InClusterConfigLoader

        configuration = Configuration()
        loader = InClusterConfigLoader(token_filename=token, cert_filename=os.path.join(service_account_dir, "ca.crt"),
                                       try_refresh_token=False, environ=environ)
        try:
            loader.load_and_set(configuration)  # the (rotated) token file read now; again in a minute
        except Exception as exc:
            raise KubeConfigError(f"in-cluster configuration ({service_account_dir}): {one_line(exc)}") from None
        return configuration

    return KubeClient(load(), Credentials(ReloadedConfiguration(load, f"the service account ({service_account_dir})")))


def load_api_client(kubeconfig: str | None, *, environ: Mapping[str, str] | None = None,
                    service_account_dir: str = SERVICE_ACCOUNT_DIR) -> KubeClient | None:
    """An API client from ``kubeconfig`` when given, else from the pod's service account, else ``None``.

    ``~/.kube/config`` and ``$KUBECONFIG`` are deliberately not consulted: an adapter that silently picks up a
    developer's credentials would serve another cluster's objects.
    """
    if kubeconfig:
        return _from_kubeconfig(kubeconfig)
    return _in_cluster(os.environ if environ is None else environ, service_account_dir)
