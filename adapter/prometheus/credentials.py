"""Prometheus credentials from a kubeconfig-format file or the pod's service account, as prometheus-adapter takes
them (``--prometheus-auth-config``, ``--prometheus-auth-incluster``; cmd/adapter/adapter.go, makePromClient).

Only the credentials are used: the CA, client certificate, bearer token or basic-auth user, and
insecure-skip-tls-verify. The server address always comes from ``--prometheus-url``. Upstream's precedence holds:
with ``--prometheus-ca-file`` the kubeconfig is not read at all; ``--prometheus-token-file`` wins over a token
from the kubeconfig.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapter.kube.config import SERVICE_ACCOUNT_DIR, KubeConfigError, kubeconfig_configuration

if TYPE_CHECKING:
    from kubernetes.client import Configuration


@dataclass(frozen=True)
class PrometheusCredentials:
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    insecure_skip_verify: bool = False
    authorization: str | None = None  # a whole Authorization header value: "Bearer ..." or "Basic ..."
    bearer_token_file: str | None = None  # re-read on change (the service account's rotated token)


def from_configuration(configuration: Configuration) -> PrometheusCredentials:
    """The credentials in a loaded kubeconfig (the kubernetes client writes inline ``*-data`` to files)."""
    # The client keeps the kubeconfig's token (or basic-auth pair) as a whole header value under "BearerToken"
    # ("authorization" in releases before 33).
    keys = configuration.api_key or {}
    authorization = keys.get("BearerToken") or keys.get("authorization")
    if not authorization and configuration.username:
        pair = f"{configuration.username}:{configuration.password or ''}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
    return PrometheusCredentials(ca_file=configuration.ssl_ca_cert or None,
                                 client_cert_file=configuration.cert_file or None,
                                 client_key_file=configuration.key_file or None,
                                 insecure_skip_verify=not configuration.verify_ssl,
                                 authorization=authorization or None)


def from_kubeconfig(path: str) -> PrometheusCredentials:
    try:
        return from_configuration(kubeconfig_configuration(path))
    except KubeConfigError as exc:
        raise KubeConfigError(f"--prometheus-auth-config: {exc}") from None


def in_cluster(environ: Mapping[str, str] | None = None, service_account_dir: str | None = None
               ) -> PrometheusCredentials:
    """The pod's service account token (re-read as it rotates) and cluster CA, as client-go's InClusterConfig."""
    env = os.environ if environ is None else environ
    service_account_dir = service_account_dir or SERVICE_ACCOUNT_DIR
    token = os.path.join(service_account_dir, "token")
    if not env.get("KUBERNETES_SERVICE_HOST") or not env.get("KUBERNETES_SERVICE_PORT"):
        raise KubeConfigError("--prometheus-auth-incluster: not in a pod (KUBERNETES_SERVICE_HOST and "
                              "KUBERNETES_SERVICE_PORT must be defined)")
    if not os.path.isfile(token):
        raise KubeConfigError(f"--prometheus-auth-incluster: no service account token at {token}")
    ca = os.path.join(service_account_dir, "ca.crt")
    return PrometheusCredentials(ca_file=ca if os.path.isfile(ca) else None, bearer_token_file=token)
