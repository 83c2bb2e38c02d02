"""A kubeconfig's exec credential plugin (``aws eks get-token``, ``gke-gcloud-auth-plugin``, ``kubelogin``), run as
client-go runs it (plugin/pkg/client/auth/exec/exec.go, refreshCredsLocked).

Pure parts: which kubeconfig user section makes the plugin the credential (``chosen_exec``), its settings checked
(``exec_settings``), the ``KUBERNETES_EXEC_INFO`` it is given (``exec_info``) and its ``ExecCredential`` answer read
(``read_credential``). ``run`` executes it once; ``adapter.kube.credentials`` decides when (never on the serving loop).

The adapter is a server: the plugin never gets a terminal (``spec.interactive`` is false, stdin is empty), so a
plugin that insists on one (``interactiveMode: Always``) is refused when the kubeconfig is read. Unlike client-go,
its run is bounded (``EXEC_TIMEOUT_S``, then it is killed) and its stderr is kept for the error message rather
than passed through.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapter.kube.errors import KubeConfigError, KubeCredentialError

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT_S = 60.0
CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"  # the cluster extension given as spec.cluster.config
# A user with any of these authenticates with them and never runs its exec plugin (client-go's
# UpdateTransportConfig: HasTokenAuth, HasBasicAuth, HasCertAuth); an auth-provider wins in the Python loader too.
_OTHER_CREDENTIALS = ("token", "tokenFile", "username", "client-certificate", "client-certificate-data",
                      "auth-provider")


@dataclass(frozen=True)
class ExecSettings:
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api_version: str
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = None  # spec.cluster, given only with provideClusterInfo

    @property
    def name(self) -> str:
        return os.path.basename(self.command)


@dataclass(frozen=True)
class ExecResult:
    token: str
    cert_pem: bytes | None
    key_pem: bytes | None
    expires_at: float | None  # seconds since the epoch; None: valid until the API server refuses it


def _named(items: Any, name: str) -> Mapping[str, Any] | None:
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def _current(document: Any) -> tuple[dict[str, Any], Mapping[str, Any]] | None:
    """The current context's user and cluster sections (None when the document is malformed: the kubeconfig
    loader says how)."""
    if not isinstance(document, dict):
        return None
    context = _named(document.get("contexts"), str(document.get("current-context") or ""))
    context_body = (context or {}).get("context")
    if not isinstance(context_body, dict):
        return None
    user = (_named(document.get("users"), str(context_body.get("user") or "")) or {}).get("user")
    cluster = (_named(document.get("clusters"), str(context_body.get("cluster") or "")) or {}).get("cluster")
    if not isinstance(user, dict) or not isinstance(cluster, dict):
        return None
    return user, cluster


def chosen_exec(document: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The current user's ``exec`` section and its cluster section, when the plugin is what authenticates."""
    current = _current(document)
    if current is None or not isinstance(current[0].get("exec"), dict):
        return None
    if any(current[0].get(key) for key in _OTHER_CREDENTIALS):
        return None
    return current[0]["exec"], current[1]


def without_exec(document: dict[str, Any]) -> dict[str, Any]:
    """A copy of the kubeconfig whose current user has no ``exec`` (for the Python loader, which would run the
    plugin itself, on whichever thread asks, and even beside a client certificate)."""
    stripped = copy.deepcopy(document)
    current = _current(stripped)
    if current is not None:
        current[0].pop("exec", None)
    return stripped


def exec_settings(section: Mapping[str, Any], cluster: Mapping[str, Any], *, where: str,
                  base_dir: str) -> ExecSettings:
    """The plugin's settings, checked as client-go checks them (newAuthenticator, isInteractive); ``where`` names
    the kubeconfig in errors. A command with a directory in it is relative to the kubeconfig's directory
    (clientcmd's ResolveLocalPaths); a bare name is looked up in ``PATH``."""
    api_version = str(section.get("apiVersion") or "")
    if api_version not in API_VERSIONS:
        raise KubeConfigError(f"{where}: exec plugin: invalid apiVersion {api_version!r}")
    command = section.get("command")
    if not isinstance(command, str) or not command:
        raise KubeConfigError(f"{where}: exec plugin: no command")
    if os.sep in command:
        command = os.path.normpath(os.path.join(base_dir, command))
    args = section.get("args") or []
    env = section.get("env") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise KubeConfigError(f"{where}: exec plugin: args must be a list of strings")
    if not isinstance(env, list) or not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in env):
        raise KubeConfigError(f"{where}: exec plugin: env must be a list of {{name, value}}")
    _check_interactive_mode(section.get("interactiveMode"), api_version, where)
    info = cluster_info(cluster, base_dir, where) if section.get("provideClusterInfo") else None
    return ExecSettings(command, tuple(args), tuple((e["name"], str(e.get("value") or "")) for e in env),
                        api_version, " ".join(str(section.get("installHint") or "").split()), info)


def _check_interactive_mode(mode: Any, api_version: str, where: str) -> None:
    if not mode and api_version.endswith("/v1beta1"):
        mode = "IfAvailable"  # clientcmd's SetDefaults_ExecConfig; v1 must say
    if mode == "Always":
        raise KubeConfigError(f"{where}: exec plugin cannot support interactive mode: standard input is not a "
                              "terminal (the adapter never gives the plugin one)")
    if mode not in ("Never", "IfAvailable"):
        raise KubeConfigError(f'{where}: exec plugin cannot support interactive mode: unknown interactiveMode: '
                              f'"{mode or ""}"')


def cluster_info(cluster: Mapping[str, Any], base_dir: str, where: str) -> dict[str, Any]:
    """``spec.cluster`` as client-go's rest.ConfigToExecCluster fills it from the kubeconfig's cluster."""
    info: dict[str, Any] = {"server": str(cluster.get("server") or "")}
    for key in ("tls-server-name", "proxy-url"):
        if cluster.get(key):
            info[key] = str(cluster[key])
    for key in ("insecure-skip-tls-verify", "disable-compression"):
        if cluster.get(key):
            info[key] = True
    if cluster.get("certificate-authority-data"):
        info["certificate-authority-data"] = str(cluster["certificate-authority-data"])
    elif cluster.get("certificate-authority"):
        path = os.path.join(base_dir, str(cluster["certificate-authority"]))
        try:
            with open(path, "rb") as file:
                info["certificate-authority-data"] = base64.b64encode(file.read()).decode()
        except OSError as exc:
            raise KubeConfigError(f"{where}: failed to load CA bundle for the exec plugin: {path}: "
                                  f"{exc.strerror}") from None
    extension = _named(cluster.get("extensions"), CLUSTER_EXTENSION)
    if extension is not None and extension.get("extension") is not None:
        info["config"] = extension["extension"]
    return info


def exec_info(settings: ExecSettings) -> str:
    """``KUBERNETES_EXEC_INFO``: the ExecCredential the plugin is given."""
    spec: dict[str, Any] = {"interactive": False}
    if settings.cluster is not None:
        spec["cluster"] = dict(settings.cluster)
    return json.dumps({"apiVersion": settings.api_version, "kind": "ExecCredential", "spec": spec})


def read_credential(stdout: bytes, api_version: str) -> ExecResult:
    """The plugin's answer, checked as refreshCredsLocked checks it (its messages)."""
    try:
        answer = json.loads(stdout)
    except ValueError as exc:
        raise KubeCredentialError(f"decoding stdout: {exc}") from None
    if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
        raise KubeCredentialError("decoding stdout: not an ExecCredential")
    if answer.get("apiVersion") != api_version:
        raise KubeCredentialError(f"exec plugin is configured to use API version {api_version}, plugin returned "
                                  f"version {answer.get('apiVersion') or '(none)'}")
    status = answer.get("status")
    if not isinstance(status, dict):
        raise KubeCredentialError("exec plugin didn't return a status field")
    token, cert, key = (str(status.get(k) or "") for k in ("token", "clientCertificateData", "clientKeyData"))
    if not token and not cert and not key:
        raise KubeCredentialError("exec plugin didn't return a token or cert/key pair")
    if bool(cert) != bool(key):
        raise KubeCredentialError("exec plugin returned only certificate or key, not both")
    return ExecResult(token, cert.encode() or None, key.encode() or None, _expiry(status.get("expirationTimestamp")))


def _expiry(value: Any) -> float | None:
    if not value:
        return None
    try:
        moment = dt.datetime.fromisoformat(str(value))
    except ValueError:
        raise KubeCredentialError(f"decoding stdout: expirationTimestamp {value!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise KubeCredentialError(f"decoding stdout: expirationTimestamp {value!r} has no time zone")
    return moment.timestamp()


def run(settings: ExecSettings, timeout_s: float = EXEC_TIMEOUT_S) -> ExecResult:
    """Run the plugin once (blocking: call it from a worker thread) and read its answer."""
    env = {**os.environ, **dict(settings.env), "KUBERNETES_EXEC_INFO": exec_info(settings)}
    try:
        done = subprocess.run([settings.command, *settings.args], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        hint = f" ({settings.install_hint})" if settings.install_hint else ""
        raise KubeCredentialError(f"exec: executable {settings.command} not found{hint}") from None
    except subprocess.TimeoutExpired:
        raise KubeCredentialError(f"exec: executable {settings.command} did not answer within {timeout_s:g}s "
                                  "and was stopped") from None
    except OSError as exc:
        raise KubeCredentialError(f"exec: executable {settings.command}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = _last_line(done.stderr)
        raise KubeCredentialError(f"exec: executable {settings.command} failed with exit code {done.returncode}"
                                  + (f": {said}" if said else ""))
    return read_credential(done.stdout, settings.api_version)


def _last_line(stderr: bytes, limit: int = 300) -> str:
    """What a failing plugin said last, on one line (``aws`` prints its error last)."""
    lines = [" ".join(line.split()) for line in stderr.decode("utf-8", "replace").splitlines()]
    text = next((line for line in reversed(lines) if line), "")
    return text if len(text) <= limit else text[:limit] + "..."
