"""The container image, really built (scripts/build-image.sh: mmdebstrap base + buildah, chroot isolation) and
run: the console scripts work inside its root filesystem as the chart runs them, as a non-root user, with only
the runtime dependencies and no compiler. Slow (about two minutes); runs in CI."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.prometheus import free_port
from tests.support.tools import REPO, missing, require_tool

pytestmark = [pytest.mark.image, pytest.mark.tools]

ENV = {**os.environ, "STORAGE_DRIVER": os.environ.get("STORAGE_DRIVER", "vfs")}

# Run inside the image: both servers on loopback, each read once, then stopped. buildah's chroot isolation shares
# the host's network: the two ports (argv) are picked free on the host, never fixed, so parallel runs do not clash.
_SMOKE = textwrap.dedent("""
    import json, os, ssl, subprocess, sys, tempfile, time, urllib.request
    exporter_port, adapter_port = sys.argv[1:3]
    def get(url, ctx=None):
        for _ in range(100):
            try:
                with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                    return r.status, r.read().decode()
            except OSError:
                time.sleep(0.2)
        raise SystemExit(f"no answer from {url}")
    path = os.environ["PATH"].split(":")
    out = {"uid": os.getuid(),
           "compilers": [c for c in ("gcc", "cc", "g++", "clang") if any(os.path.exists(f"{d}/{c}") for d in path)]}
    import importlib.util, pathlib, sysconfig
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    out["sources"] = len(sources)
    out["uncompiled"] = [str(p) for p in sources if not os.path.exists(importlib.util.cache_from_source(str(p)))][:5]
    before = {p: p.stat().st_mtime for p in site.rglob("*.pyc")}
    subprocess.run([sys.executable, "-c", "import adapter.cli.main, adapter.server.app, exporter.cli.main"], check=True)
    out["pyc_changed"] = sorted(str(p) for p in site.rglob("*.pyc") if before.get(p) != p.stat().st_mtime)[:5]
    try:
        import matplotlib  # noqa: F401
        out["matplotlib"] = True
    except ImportError:
        out["matplotlib"] = False
    exporter = subprocess.Popen(["gpu-exporter", "--backend", "fake", "--fake-gpu-count", "2", "-a",
                                 f"127.0.0.1:{exporter_port}"])
    try:
        out["metrics"] = get(f"http://127.0.0.1:{exporter_port}/metrics")
    finally:
        exporter.terminate(); exporter.wait(10)
    certs = tempfile.mkdtemp()
    adapter = subprocess.Popen(["gpu-adapter", "serve", "--disable-auth", "--prometheus-url", "http://127.0.0.1:9",
                                "--secure-port", adapter_port, "--cert-dir", certs])
    try:
        insecure = ssl.create_default_context(); insecure.check_hostname = False; insecure.verify_mode = ssl.CERT_NONE
        out["healthz"] = get(f"https://127.0.0.1:{adapter_port}/healthz", insecure)
    finally:
        adapter.terminate(); adapter.wait(10)
    print("SMOKE " + json.dumps(out))
""")


def _buildah(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([require_tool("buildah"), *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    assert done.returncode == 0, f"buildah {' '.join(args)}: {done.stderr}"
    return done


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    require_tool("buildah")
    require_tool("mmdebstrap")
    if os.geteuid() != 0:
        missing("root (buildah's chroot isolation and mmdebstrap's root mode need it)")
    name = f"localhost/gpu-autoscaler:test-{uuid.uuid4().hex[:8]}"
    build = subprocess.run(["bash", str(REPO / "scripts/build-image.sh"), name], capture_output=True, text=True,
                           timeout=900, env=ENV)
    assert build.returncode == 0, build.stdout + build.stderr
    assert build.stdout.strip().splitlines()[-1].startswith(f"image: {name} (")
    yield name
    subprocess.run([require_tool("buildah"), "rmi", "--force", name], capture_output=True, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    name = _buildah("from", "--quiet", image).stdout.strip()
    yield name
    subprocess.run([require_tool("buildah"), "rm", name], capture_output=True, env=ENV, timeout=120)


def test_the_image_runs_as_non_root_with_the_console_scripts_on_path(image: str) -> None:
    config = json.loads(_buildah("inspect", "--type", "image", image).stdout)["OCIv1"]["config"]
    assert config["User"] == "65532:65532"
    assert any(entry.startswith("PATH=/opt/gpu-autoscaler/bin:") for entry in config["Env"])


def test_gpu_adapter_help_inside_the_image(container: str) -> None:
    done = _buildah("run", "--isolation", "chroot", container, "--", "gpu-adapter", "--help")
    assert "serve" in done.stdout


def test_exporter_and_adapter_serve_inside_the_image(container: str) -> None:
    ports: set[str] = set()
    while len(ports) < 2:
        ports.add(str(free_port()))
    done = _buildah("run", "--isolation", "chroot", container, "--", "python3", "-c", _SMOKE, *ports, timeout=180)
    [line] = [x for x in done.stdout.splitlines() if x.startswith("SMOKE ")]
    smoke = json.loads(line.removeprefix("SMOKE "))
    assert smoke["uid"] == 65532
    assert smoke["compilers"] == []
    assert smoke["matplotlib"] is False  # runtime dependencies only: the loadtest extra is not installed
    status, metrics = smoke["metrics"]
    assert status == 200
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in metrics
    assert smoke["healthz"] == [200, "ok"]
    # Shipped bytecode: every module of ours and of our dependencies is compiled, and importing the servers
    # compiles nothing again (each pod start reads the .pyc files).
    assert smoke["sources"] > 1000 and smoke["uncompiled"] == []
    assert smoke["pyc_changed"] == []


def test_the_chart_and_manifests_name_the_image_readme_builds() -> None:
    version = next(line.split('"')[1] for line in (REPO / "pyproject.toml").read_text().splitlines()
                   if line.startswith("version = "))
    image = f"ghcr.io/gpu-autoscaler/gpu-autoscaler:{version}"
    assert image in (REPO / "README.md").read_text()
    chart = (REPO / "charts/gpu-autoscaler/values.yaml").read_text()
    assert "repository: ghcr.io/gpu-autoscaler/gpu-autoscaler" in chart
    assert f'appVersion: "{version}"' in (REPO / "charts/gpu-autoscaler/Chart.yaml").read_text()
    for manifest in Path(REPO / "apiservice").rglob("*.yaml"):
        for line in manifest.read_text().splitlines():
            if line.strip().startswith("image:"):
                assert line.split("image:")[1].strip().strip('"') == image, manifest
