"""Pod attribution on a real GPU (run by scripts/gpu-check.sh; needs NVML, and PyTorch for the shared-GPU part).

1. ``-k``: a PodResources server (the demo's, on a unix socket) gives GPU 0 to a pod, by UUID and then as
   ``nvidia0`` (``--kubernetes-gpu-id-type device-name``); GPU 0's series must carry the pod's labels.
2. Shared GPU: a PyTorch process runs matrix products on GPU 0; a fake node tree (tests/fake_node.py) puts its PID
   in a pod's cgroup and the pod holds a ``nvidia.com/gpu.shared`` replica of GPU 0; the pod's
   ``gpu_pod_sm_utilization_ratio`` and ``gpu_pod_framebuffer_used_bytes`` must come from NVML's per-process
   readings of that real process.
Prints one PASS/FAIL line per check with what it saw; exits 1 when any fails.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtest.standins.kubelet import PodResourcesServer, gpu_pod  # noqa: E402
from loadtest.standins.prometheus import free_port  # noqa: E402
from tests.exporter_helpers import parse_metrics, series  # noqa: E402
from tests.fake_node import FakeNode  # noqa: E402

SHARED = "nvidia.com/gpu.shared"
LOAD = """
import sys, time, torch
held = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""
failures = 0


def check(ok: bool, what: str, seen: object) -> None:
    global failures
    failures += not ok
    print(f"{'PASS' if ok else 'FAIL'} {what}: {seen}", flush=True)


def gpu0_uuid() -> str:
    import pynvml

    pynvml.nvmlInit()
    try:
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    finally:
        pynvml.nvmlShutdown()
    return uuid.decode() if isinstance(uuid, bytes) else uuid


def scrape_until(args: list[str], done: str, log: Path, timeout_s: float = 20.0) -> list:
    """Run the exporter with ``args``; scrape until a line contains ``done`` (or the timeout); the parsed rows."""
    address = f"127.0.0.1:{free_port()}"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "exporter", "--address", address, "-c", "500", *args],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    body, deadline = "", time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                body = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
            except OSError:
                continue
            if done in body:
                break
    finally:
        proc.terminate()
        proc.wait(10)
    return parse_metrics(body) if body else []


def pod_labels(tmp: Path, uuid: str) -> None:
    server = PodResourcesServer(str(tmp / "kubelet.sock"))
    server.start()
    try:
        for id_type, device_id in (("uid", uuid), ("device-name", "nvidia0")):
            server.set_pods([gpu_pod("trainer-0", "ml", [device_id])])
            rows = scrape_until(["-k", "--kubernetes-gpu-id-type", id_type, "--pod-resources-kubelet-socket",
                                 server.socket_path], 'pod="trainer-0"', tmp / f"exporter-{id_type}.log")
            util = series(rows, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
            labels = {k: util[0][1].get(k) for k in ("pod", "namespace", "container")} if util else None
            check(labels == {"pod": "trainer-0", "namespace": "ml", "container": "main"},
                  f"-k, device id {device_id} ({id_type}): GPU 0's labels", labels)
    finally:
        server.stop()


def shared_gpu(tmp: Path, uuid: str) -> None:
    load = subprocess.Popen([sys.executable, "-c", LOAD, "40"], stdout=subprocess.PIPE, text=True)
    try:
        if load.stdout is None or load.stdout.readline().strip() != "ready":
            check(False, "shared GPU: PyTorch load", "did not start")
            return
        node = FakeNode(tmp / "node")
        pod = node.pod("infer-a", "ml", "server")
        node.run(load.pid, pod, "server")
        server = PodResourcesServer(str(tmp / "kubelet-shared.sock"))
        server.set_pods([("infer-a", "ml", [("server", [(SHARED, [f"{uuid}::0"])])])])
        server.start()
        try:
            time.sleep(3)  # a few utilisation samples of the running process
            rows = scrape_until(["-k", "--pod-resources-kubelet-socket", server.socket_path,
                                 "--pod-resources-refresh-interval", "200", "--nvidia-resource-names", SHARED,
                                 "--proc-root", str(node.proc), "--kubelet-logs-dir", str(node.logs)],
                                'gpu_pod_sm_utilization_ratio{', tmp / "exporter-shared.log")
        finally:
            server.stop()
        sm = series(rows, "gpu_pod_sm_utilization_ratio", pod="infer-a")
        fb = series(rows, "gpu_pod_framebuffer_used_bytes", pod="infer-a")
        check(bool(sm) and sm[0][2] >= 0.5, f"shared GPU: infer-a's SM ratio from PID {load.pid}",
              sm[0][2] if sm else None)
        check(bool(fb) and fb[0][2] >= 2 * 1024**3, "shared GPU: infer-a's framebuffer bytes (holds 2 GiB + context)",
              fb[0][2] if fb else None)
    finally:
        load.terminate()
        load.wait(10)


def main() -> int:
    import pynvml

    try:
        uuid = gpu0_uuid()
    except pynvml.NVMLError as exc:
        check(False, "GPU 0 through NVML (this check needs an NVIDIA GPU and its driver)", exc)
        return 1
    print("GPU 0:", uuid, flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-pod-check-") as name:
        tmp = Path(name)
        pod_labels(tmp, uuid)
        try:
            import torch  # noqa: F401
        except ImportError:
            print("SKIP shared GPU: PyTorch is not installed", flush=True)
        else:
            shared_gpu(tmp, uuid)
        for log in sorted(tmp.glob("exporter-*.log")):
            lines = log.read_text().splitlines()
            print(f"{log.name}:", *(f"   {line}" for line in lines[-6:]), sep="\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
