"""Installing gpu-autoscaler without the [loadtest] extra: the exporter and adapter work; a load-test command
that needs the extra says which one to install, in one line, before doing anything."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

REPO = Path(__file__).resolve().parents[1]

# A process in which the loadtest extra's packages cannot be imported, as in an install without the extra.
_WITHOUT_EXTRA = textwrap.dedent("""
    import sys
    class _Absent:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"matplotlib", "prometheus_api_client"}:
                raise ModuleNotFoundError(name)
            return None
    sys.meta_path.insert(0, _Absent())
    import importlib.util
    _find = importlib.util.find_spec
    def find_spec(name, package=None):
        try:
            return _find(name, package)
        except ModuleNotFoundError:
            return None
    importlib.util.find_spec = find_spec
    sys.argv[0] = PROG
    from MODULE import main
    main(sys.argv[1:])
""")


def _run(module: str, prog: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    code = _WITHOUT_EXTRA.replace("PROG", repr(prog)).replace("MODULE", module)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=env)


@pytest.mark.parametrize(("args", "names"), [
    (["demo", "--quick"], "matplotlib"),
    (["run", "--url", "http://127.0.0.1:9/", "--profile", "1", "--duration", "1s", "--plot", "x.png"], "matplotlib"),
    (["run", "--url", "http://127.0.0.1:9/", "--profile", "1", "--duration", "1s",
      "--prometheus-url", "http://127.0.0.1:9", "--query", "up"], "prometheus_api_client"),
    (["capacity", "--deployment", "vllm", "--plot", "x.png"], "matplotlib"),
])
def test_a_load_test_feature_without_the_extra_names_it(args: list[str], names: str, tmp_path: Path) -> None:
    done = _run("loadtest.cli.main", "gpu-loadtest", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gpu-loadtest: error: {_feature(args)} needs {names}, which is not installed: "
        "pip install 'gpu-autoscaler[loadtest]'"]
    assert not (tmp_path / "x.png").exists()


def _feature(args: list[str]) -> str:
    if args[0] == "demo":
        return "gpu-loadtest demo (its plot, --plot)"
    return "--plot" if "--plot" in args else "--query"


@pytest.mark.parametrize(("module", "prog"),
                         [("adapter.cli.main", "gpu-adapter"), ("exporter.cli.main", "gpu-exporter")])
def test_the_exporter_and_adapter_need_no_extra(module: str, prog: str) -> None:
    done = _run(module, prog, "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
