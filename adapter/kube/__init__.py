"""Kubernetes access for the adapter: credentials, watch-backed object caches, label-selector resolution."""

from adapter.kube.cache import MetadataCache
from adapter.kube.config import KubeConfigError, load_api_client
from adapter.kube.resolver import KubeResolver

__all__ = ["KubeConfigError", "KubeResolver", "MetadataCache", "load_api_client"]
