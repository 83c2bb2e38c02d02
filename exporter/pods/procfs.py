"""Reads the process facts per-pod attribution needs from a proc filesystem (``--proc-root``, default /proc)."""

from __future__ import annotations

import os
from enum import Enum

from exporter.pods.cgroups import CgroupPod, parse_cgroup_file

INIT_PID_NAMESPACE = "pid:[4026531836]"
"""``readlink /proc/self/ns/pid`` in the host's initial PID namespace (the kernel's fixed PROC_PID_INIT_INO)."""


class Visibility(Enum):
    """Whether the PIDs NVML reports are host PIDs this proc tree can look up."""

    OK = "ok"
    PIDS_NOT_VISIBLE = "pids_not_visible"  # the exporter has its own PID namespace (no hostPID)
    PROC_UNREADABLE = "proc_unreadable"  # no usable proc filesystem at the configured root


class NoPod(Enum):
    """Why a process has no pod."""

    HOST = "host"  # its cgroup is not below a Kubernetes pod (a host daemon, e.g. an MPS server)
    GONE = "gone"  # no /proc entry: it exited after the driver listed it, or proc hides it (hidepid)
    UNREADABLE = "unreadable"  # its cgroup file exists but could not be read


class ProcFs:
    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def visibility(self) -> Visibility:
        """NVML reports PIDs in the caller's PID namespace and leaves out processes it cannot see there, so
        only an exporter in the host's initial PID namespace sees other pods' processes."""
        try:
            namespace = os.readlink(os.path.join(self.root, "self", "ns", "pid"))
        except OSError:
            return Visibility.PROC_UNREADABLE
        return Visibility.OK if namespace == INIT_PID_NAMESPACE else Visibility.PIDS_NOT_VISIBLE

    def pod_of(self, pid: int) -> CgroupPod | NoPod:
        try:
            with open(os.path.join(self.root, str(pid), "cgroup"), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except FileNotFoundError:
            return NoPod.GONE
        except OSError:
            return NoPod.UNREADABLE
        return parse_cgroup_file(text) or NoPod.HOST
