"""Wiring of the Kubernetes-facing features to the flags: one API client, one pod watch, the counters source."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.pods.kube_client import KubeClientError, api_client
from exporter.pods.kube_directory import KubernetesApiDirectory
from exporter.pods.mapping import PodRef
from exporter.pods.metadata_labels import PodLabelPolicy
from exporter.serving.counters_source import CountersSource, api_configmap_fetcher, parse_configmap_ref

log = logging.getLogger("exporter")


@dataclass
class KubeAccess:
    """Creates the API client once, on first use (``--kubeconfig`` or in-cluster), and the pod watch once."""

    kubeconfig: str | None = None
    _client: Any = None
    _directories: dict[str | None, KubernetesApiDirectory] = field(default_factory=dict)

    def client(self) -> Any:
        if self._client is None:
            self._client = api_client(self.kubeconfig)
        return self._client

    def pod_directory(self, node_name: str | None) -> KubernetesApiDirectory:
        """The started pod watch for ``node_name`` (None: every node); ``KubeClientError`` without credentials."""
        directory = self._directories.get(node_name)
        if directory is None:
            directory = KubernetesApiDirectory.from_api_client(self.client(), node_name)
            directory.start()
            self._directories[node_name] = directory
        return directory

    def stop(self) -> None:
        for directory in self._directories.values():
            directory.stop()


def counters_source(path: str | None, configmap_data: str, kube: KubeAccess) -> CountersSource:
    """``--configmap-data`` (malformed: ``CountersError``) over ``-f``; no credentials: the file, with a warning."""
    ref = parse_configmap_ref(configmap_data)
    fetch = None
    if ref is not None:
        try:
            fetch = api_configmap_fetcher(kube.client())
        except KubeClientError as exc:
            log.warning("--configmap-data %s: %s", configmap_data, exc)
    return CountersSource(path, ref, fetch)


def pod_metadata(policy: PodLabelPolicy, kube: KubeAccess,
                 node_name: str | None) -> Callable[[PodRef], dict[str, str]] | None:
    """The extra labels of a container's pod, looked up in the pod watch; None when off or without credentials."""
    if not policy.enabled:
        return None
    if not node_name:
        log.warning("NODE_NAME is not set: watching the pods of every node for pod labels (set it from "
                    "spec.nodeName)")
    try:
        directory = kube.pod_directory(node_name or None)
    except KubeClientError as exc:
        log.warning("pod labels and UIDs will not be available: %s", exc)
        return None

    def labels(ref: PodRef) -> dict[str, str]:
        meta = directory.by_name(ref.namespace, ref.name)
        return {} if meta is None else policy.extra_labels(meta.uid, meta.labels)

    return labels
