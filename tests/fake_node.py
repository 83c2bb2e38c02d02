"""A fake node filesystem for per-pod attribution tests: a proc tree and the kubelet's log directories.

``FakeNode(tmp_path)`` creates ``proc/`` (``self/ns/pid`` says whether the exporter is in the host PID namespace)
and ``log/pods``, ``log/containers``; :meth:`FakeNode.run` puts a PID in a pod container's cgroup.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from exporter.pods.procfs import INIT_PID_NAMESPACE

CONTAINER_NAMESPACE = "pid:[4026532871]"


@dataclass(frozen=True)
class FakePod:
    name: str
    namespace: str
    uid: str

    def container_id(self, container: str) -> str:
        return hashlib.sha256(f"{self.uid}/{container}".encode()).hexdigest()


class FakeNode:
    def __init__(self, root: Path, host_pid_namespace: bool = True) -> None:
        self.proc = root / "proc"
        self.logs = root / "log"
        (self.proc / "self" / "ns").mkdir(parents=True)
        (self.logs / "pods").mkdir(parents=True)
        (self.logs / "containers").mkdir(parents=True)
        self.set_host_pid_namespace(host_pid_namespace)

    def set_host_pid_namespace(self, host: bool) -> None:
        link = self.proc / "self" / "ns" / "pid"
        if link.is_symlink():
            link.unlink()
        os.symlink(INIT_PID_NAMESPACE if host else CONTAINER_NAMESPACE, link)

    def pod(self, name: str, namespace: str, *containers: str, log_dir: bool = True) -> FakePod:
        """A pod the kubelet knows: its log directory and one container symlink per container."""
        pod = FakePod(name, namespace, str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")))
        if log_dir:
            (self.logs / "pods" / f"{namespace}_{name}_{pod.uid}").mkdir()
            for container in containers:
                link = self.logs / "containers" / f"{name}_{namespace}_{container}-{pod.container_id(container)}.log"
                os.symlink(f"/var/log/pods/{namespace}_{name}_{pod.uid}/{container}/0.log", link)
        return pod

    def run(self, pid: int, pod: FakePod | None, container: str = "", *, cgroup_text: str | None = None) -> None:
        """Write ``proc/<pid>/cgroup``: a systemd-driver cgroup v2 path of the pod's container, or the given
        text (e.g. a host service when ``pod`` is None)."""
        if cgroup_text is None:
            if pod is None:
                cgroup_text = "0::/system.slice/nvidia-mps.service\n"
            else:
                uid = pod.uid.replace("-", "_")
                cgroup_text = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
                               f"cri-containerd-{pod.container_id(container)}.scope\n")
        (self.proc / str(pid)).mkdir(exist_ok=True)
        (self.proc / str(pid) / "cgroup").write_text(cgroup_text)

    def exit(self, pid: int) -> None:
        (self.proc / str(pid) / "cgroup").unlink()
        (self.proc / str(pid)).rmdir()
