"""Pod labels and UID as Prometheus labels (``--kubernetes-enable-pod-labels``, ``--kubernetes-enable-pod-uid``).

dcgm-exporter's rules (internal/pkg/transformation/kubernetes.go, utils.SanitizeLabelName): each pod label key
the allowlist admits (any pattern *searching* the original key matches; no patterns: every key) becomes a label
whose name has every character outside ``[a-zA-Z0-9_]`` replaced by ``_``; a name the series already carries
(``pod``, ``namespace``, ``container``, ``pod_uid``) is skipped. The UID goes in ``pod_uid``. Invalid patterns are
warned about and skipped; when none compiles, every label is admitted.

Beyond dcgm-exporter, so the exposition stays valid whatever the pod carries: a sanitized name starting with a
digit gets a leading ``_``, and of two keys sanitizing to the same name the first in sorted order wins (the
collector also drops pod labels that collide with the GPU's own labels, such as ``gpu`` or ``UUID``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

log = logging.getLogger("exporter.pod_labels")

UID_LABEL = "pod_uid"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    name = _INVALID.sub("_", key)
    return "_" + name if name[:1].isdigit() else name


def split_patterns(values: Iterable[str]) -> list[str]:
    """Repeated flags and comma-separated values, as urfave/cli's StringSlice flag reads them."""
    return [p for value in values for p in value.split(",") if p]


def compile_allowlist(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            log.warning("--kubernetes-pod-label-allowlist-regex %r is not a valid regular expression (%s); skipped",
                        pattern, exc)
    if patterns and not compiled:
        log.warning("no valid --kubernetes-pod-label-allowlist-regex pattern: every pod label is exported")
    return tuple(compiled)


@dataclass(frozen=True)
class PodLabelPolicy:
    labels: bool = False
    uid: bool = False
    allowlist: tuple[re.Pattern[str], ...] = ()

    @property
    def enabled(self) -> bool:
        return self.labels or self.uid

    def extra_labels(self, uid: str, pod_labels: Mapping[str, str],
                     taken: frozenset[str] = frozenset({"pod", "namespace", "container"})) -> dict[str, str]:
        """The labels one pod adds to its series, none of them named like one in ``taken``."""
        out: dict[str, str] = {}
        if self.uid and uid:
            out[UID_LABEL] = uid
        if self.labels:
            for key in sorted(pod_labels):
                if not self._admits(key):
                    continue
                name = sanitize_label_name(key)
                if name in taken or name in out or name.startswith("__"):
                    continue
                out[name] = pod_labels[key]
        return out

    def _admits(self, key: str) -> bool:
        return not self.allowlist or _admitted(self.allowlist, key)


@lru_cache(maxsize=4096)
def _admitted(allowlist: tuple[re.Pattern[str], ...], key: str) -> bool:
    return any(p.search(key) for p in allowlist)
