"""What the adapter's server loads: the kubernetes client only where there is a Kubernetes API to talk to, and no
pydantic models for its routes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_standalone_adapter_builds_without_the_kubernetes_client(tmp_path: Path) -> None:
    """No kubeconfig, not in a pod: the whole adapter is built (flags, rules, app) and never imports kubernetes."""
    loaded = run(f"""
import sys
from adapter.cli.flags import SERVE
from clikit.flags import Options
from adapter.cli.serve import build
from adapter.server.app import create_app
values = {{flag.attribute: flag.default for flag in SERVE}}
values.update(prometheus_url="http://127.0.0.1:9", disable_auth=True, cert_dir={str(tmp_path)!r})
create_app(build(Options(**values)).state)
print(" ".join(sorted(sys.modules)))
""").split()
    assert not [m for m in loaded if m == "kubernetes" or m.startswith("kubernetes.")]


def test_building_the_app_creates_no_pydantic_models() -> None:
    """Every route is a plain Starlette route: FastAPI's own routes build a pydantic response model per endpoint
    and import pydantic.v1 to look for one, memory the server does not need."""
    loaded = run("""
import sys
from adapter.prometheus.client import PrometheusClient, PrometheusConfig
from adapter.prometheus.discovery import Discovery
from adapter.provider.engine import Engine
from adapter.presets.gpu import gpu_presets
from adapter.server.app import AdapterState, create_app
client = PrometheusClient(PrometheusConfig(url="http://127.0.0.1:9"))
rules = gpu_presets()
discovery = Discovery(client, lambda: rules)
app = create_app(AdapterState(client, discovery, Engine(client, lambda: discovery.catalogue),
                              serve_external=lambda: True))
assert len(app.routes) > 10
print(" ".join(sorted(sys.modules)))
""").split()
    assert not [m for m in loaded if m == "pydantic.v1" or m.startswith("pydantic.v1.")]
