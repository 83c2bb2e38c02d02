"""What the adapter's server imports, and what it must leave alone.

Importing the kubernetes package runs ``__init__`` files that load every generated model and API class (about
0.5 s and 20 MiB the server never uses: it speaks raw JSON), and ``import httpx`` loads httpx's command line with
rich and click. The server avoids both (adapter/kube/official.py, adapter/__init__.py); code in the same process
that does want the whole kubernetes client (the exporter, loadtest, tests) must still get it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_server_imports_neither_the_client_models_nor_a_terminal_toolkit() -> None:
    loaded = run("import sys, adapter.cli, adapter.app; print(' '.join(sorted(sys.modules)))").split()
    unwanted = ("kubernetes.client.models", "kubernetes.client.api_client", "kubernetes.client.api",
                "kubernetes.dynamic", "kubernetes.stream", "kubernetes.watch", "rich", "pygments", "httpx._main")
    assert not [m for m in loaded if m in unwanted or m.startswith(tuple(f"{u}." for u in unwanted))]
    assert "kubernetes.client.rest" in loaded and "kubernetes.client.configuration" in loaded  # what it does use


def test_the_whole_client_is_there_for_other_code_after_the_adapter_loaded() -> None:
    out = run("""
import adapter.cli, adapter.app
import kubernetes
from kubernetes import client, config, watch
from kubernetes.client import CoreV1Api, V1Pod
from kubernetes.client.api_client import ApiClient
api = client.ApiClient(client.Configuration())
assert isinstance(api, ApiClient) and client.ApiClient is ApiClient
assert V1Pod(metadata=client.V1ObjectMeta(name="p")).metadata.name == "p"
assert callable(config.load_kube_config) and callable(config.load_incluster_config)
assert watch.Watch and kubernetes.utils.parse_quantity("1Ki") == 1024
print(CoreV1Api.__name__)
""")
    assert out.strip() == "CoreV1Api"


def test_httpx_command_line_stays_importable() -> None:
    assert run("import adapter, httpx._main as m; print(callable(m.main))").strip() == "True"


def test_a_client_loaded_before_the_adapter_is_left_as_it_was() -> None:
    out = run("""
import kubernetes.client
from kubernetes.client.api_client import ApiClient
import adapter.cli, adapter.app
from kubernetes.client import ApiClient as again
print(again is ApiClient)
""")
    assert out.strip() == "True"


def test_building_the_app_creates_no_pydantic_models() -> None:
    """Every route is a plain Starlette route: FastAPI's own routes build a pydantic response model per endpoint
    and import pydantic.v1 to look for one, memory the server does not need (README Performance)."""
    loaded = run("""
import sys
from adapter.app import AdapterState, create_app
from adapter.discovery import Discovery
from adapter.prometheus import PrometheusClient, PrometheusConfig
from adapter.provider import Provider
from adapter.rules import gpu_presets
client = PrometheusClient(PrometheusConfig(url="http://127.0.0.1:9"))
rules = gpu_presets()
discovery = Discovery(client, lambda: rules)
app = create_app(AdapterState(client, discovery, Provider(client, lambda: discovery.catalogue),
                              serve_external=lambda: True))
assert len(app.routes) > 10
print(" ".join(sorted(sys.modules)))
""").split()
    assert not [m for m in loaded if m == "pydantic.v1" or m.startswith("pydantic.v1.")]


def test_a_kubeconfig_loads_without_the_oauth_packages_which_still_load_when_used(tmp_path: Path) -> None:
    """The kubeconfig loader imports oauthlib and requests_oauthlib (with requests) at the top for its OIDC and GCP
    providers only; the adapter leaves them unloaded until the loader uses them (README Performance: 4.5 MiB)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("""
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: s3cret}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    out = run(f"""
import sys
from adapter.kube.config import kubeconfig_configuration
configuration = kubeconfig_configuration({str(kubeconfig)!r})
assert configuration.host == "https://127.0.0.1:6443", configuration.host
assert configuration.api_key["BearerToken"] == "Bearer s3cret", configuration.api_key
print(" ".join(m for m in ("requests", "charset_normalizer", "oauthlib.oauth2.rfc6749") if m in sys.modules))
from kubernetes.config import kube_config
session = kube_config.OAuth2Session(client_id="adapter")  # what the OIDC refresh builds
import requests_oauthlib
assert type(session) is requests_oauthlib.OAuth2Session and session.client_id == "adapter"
from kubernetes.client import ApiClient
assert ApiClient.__module__ == "kubernetes.client.api_client", ApiClient
assert issubclass(kube_config.oauthlib.oauth2.rfc6749.errors.InvalidClientIdError, Exception)
from requests_oauthlib import OAuth1Session
print("used", OAuth1Session.__name__, "requests" in sys.modules)
""").splitlines()
    assert out == ["", "used OAuth1Session True"]
