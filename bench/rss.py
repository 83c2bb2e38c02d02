"""Adapter memory, as the benchmarks report it: a process' RSS and peak, the import-only baseline, and a fake
Kubernetes API holding pods, so the adapter's watch cache is part of what is measured.

Realistic labels: each pod carries the labels a Deployment's pods do (``app``, ``pod-template-hash``, a team and a
model), so the cache holds what it would in a cluster.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024

# What `gpu-adapter serve` imports before it reads its flags; run in a fresh interpreter (the module names of
# checkouts before the packages were reorganised too, for before/after figures).
_IMPORT_ONLY = """
import importlib
try:
    importlib.import_module("adapter.cli.main"), importlib.import_module("adapter.server.app")
except ImportError:
    importlib.import_module("adapter.cli"), importlib.import_module("adapter.app")
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        print(int(line.split()[1]) * 1024)
"""


def rss_of(pid: int) -> dict[str, float]:
    """RSS and peak RSS (the kernel's ``VmHWM``) in bytes."""
    out = {"rss": float(psutil.Process(pid).memory_info().rss)}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                out["peak"] = float(line.split()[1]) * 1024
    return out


def import_only_rss(code: Path = ROOT) -> float:
    """RSS in bytes of a fresh interpreter that has imported what the server imports, from checkout ``code``."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_ONLY], cwd=code, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@contextlib.contextmanager
def kube_with_pods(pods: int, workdir: Path, namespace: str = "bench",
                   named: dict[str, str] | None = None) -> Iterator[str | None]:
    """A fake Kubernetes API on loopback holding ``pods`` pods in ``namespace``: the ``named`` ones (name -> app
    label) first, then ``p-<i>`` fillers (``app=filler-<i % 10>``). Yields a kubeconfig for it (None for 0 pods)."""
    if pods <= 0:
        yield None
        return
    sys.path.insert(0, str(ROOT))
    from tests.support.fake_kube import FakeKube, pod

    apps = dict(named or {})
    apps.update({f"p-{i}": f"filler-{i % 10}" for i in range(max(pods - len(apps), 0))})
    fake = FakeKube(bookmark_interval=None)
    for i, (name, app) in enumerate(apps.items()):
        fake.put("", "v1", "pods", pod(namespace, name, {
            "app": app, "pod-template-hash": f"{i % 10:x}5f9c8d7b", "team": f"team-{i % 7}", "model": "llama-3-8b"},
            node_name=f"gpu-node-{i // 8}", uid=f"00000000-0000-4000-8000-{i:012x}"))
    fake.start()
    try:
        yield fake.write_kubeconfig(workdir / "kubeconfig")
    finally:
        fake.stop()


def warm_pod_cache(client: httpx.Client, metric_path: str, namespace: str = "bench") -> None:
    """One label-selector request, so the adapter starts (and syncs) its pod watch cache; any answer will do."""
    client.get(f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/pods/*/{metric_path}",
               params={"labelSelector": "app=filler-0"}, timeout=120)


def mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


class RssSampler:
    """A process' RSS sampled on a thread every ``interval_s``: at start (``before``), the highest (``peak``), the
    latest; ``stop`` ends the sampling and gives the three in MiB."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.process = psutil.Process(pid)
        self.before = self.peak = self.latest = float(self.process.memory_info().rss)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval_s):
            with contextlib.suppress(psutil.Error):
                self.latest = float(self.process.memory_info().rss)
                self.peak = max(self.peak, self.latest)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(2)
        with contextlib.suppress(psutil.Error):
            self.latest = float(self.process.memory_info().rss)
        return {"rss_before_mib": self.before / MIB, "rss_peak_mib": self.peak / MIB,
                "rss_after_mib": self.latest / MIB}
