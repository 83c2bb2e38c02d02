"""Which Kubernetes pod and container a process runs in, read from its ``/proc/<pid>/cgroup`` text (pure).

The kubelet puts every container in a cgroup below its pod's cgroup, named after the pod UID:

- cgroupfs driver (v1 and v2): ``/kubepods[/burstable|/besteffort]/pod<uid>/<container id>``
- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/
  cri-containerd-<container id>.scope`` (``docker-``, ``crio-`` for other runtimes)

Paths may start with ``/..`` segments when the reader is in another cgroup namespace; the pod segment is
searched anywhere in the path. Static pods have a 32-hex-digit UID instead of a UUID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_POD_SEGMENT = re.compile(rf"(?:kubepods(?:-[a-z]+)*-)?pod({_UID})(?:\.slice)?")
_CONTAINER_SEGMENT = re.compile(r"(?:(?:cri-containerd|containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?")


@dataclass(frozen=True)
class CgroupPod:
    """A process's pod UID (dashed, lower case) and, when the path names it, its container ID."""

    pod_uid: str
    container_id: str | None


def parse_cgroup_path(path: str) -> CgroupPod | None:
    """The pod (and container) a cgroup path belongs to; None outside any Kubernetes pod."""
    segments = path.split("/")
    for i, segment in enumerate(segments):
        pod = _POD_SEGMENT.fullmatch(segment)
        if pod is None:
            continue
        container = _CONTAINER_SEGMENT.fullmatch(segments[i + 1]) if i + 1 < len(segments) else None
        return CgroupPod(pod.group(1).replace("_", "-"), container.group(1) if container else None)
    return None


def parse_cgroup_file(text: str) -> CgroupPod | None:
    """Parse ``/proc/<pid>/cgroup`` (``id:controllers:path`` lines, v1 or v2); a line naming the container wins."""
    found: CgroupPod | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        pod = parse_cgroup_path(parts[2])
        if pod is None:
            continue
        if pod.container_id is not None:
            return pod
        found = found or pod
    return found
