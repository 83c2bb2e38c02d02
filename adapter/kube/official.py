"""The official client's configuration, REST and config-loader modules, without its package ``__init__`` files.

``import kubernetes`` (or ``kubernetes.client``) runs package ``__init__`` files that import every API class,
every generated model, the dynamic client, websockets and the informers: about 0.5 s and 20 MiB the server never
uses, since it speaks raw JSON (adapter/kube/api.py). This module registers ``kubernetes``, ``kubernetes.client``,
``kubernetes.config`` and ``kubernetes.utils`` as bare packages (their paths only) and imports just the modules
serving needs from them. Each bare package finishes loading the first time something asks it for a name it lacks,
so other code in the same process (the exporter, loadtest, tests) that uses the full client still gets it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils")
_completing = threading.RLock()
_bare: set[str] = set()  # packages registered here and not completed yet


def _complete(module: ModuleType) -> None:
    """Run the package's real ``__init__`` in its module, once, so every name it defines appears (the client's own
    ``__init__`` may itself export names lazily, through its own module ``__getattr__``)."""
    with _completing:
        if module.__name__ not in _bare:
            return
        _bare.discard(module.__name__)
        del module.__dict__["__getattr__"]
        spec = module.__spec__
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(module)
        if module.__dict__.get("ApiClient") is _ApiClientOnDemand:
            del module.__dict__["ApiClient"]  # the package's own, from now on


def _bare_package(name: str) -> ModuleType:
    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    spec = importlib.util.find_spec(name)  # the parent is already registered (bare or whole): nothing runs
    if spec is None or spec.loader is None:
        raise ImportError(f"No module named {name!r}")
    module = importlib.util.module_from_spec(spec)

    def finish_loading(attribute: str) -> Any:
        _complete(module)
        return getattr(module, attribute)

    module.__getattr__ = finish_loading  # type: ignore[method-assign]
    sys.modules[name] = module
    _bare.add(name)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


class _ApiClientOnDemand:
    """Stands in for ``ApiClient`` inside the kubeconfig loader, which builds one only for an OIDC token refresh."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.api_client import ApiClient  # the real one, with its models

        return ApiClient(*args, **kwargs)


def _load() -> tuple[ModuleType, ModuleType, ModuleType]:
    with _completing:
        for name in _PACKAGES:
            _bare_package(name)
        configuration = importlib.import_module("kubernetes.client.configuration")
        rest = importlib.import_module("kubernetes.client.rest")
        exceptions = importlib.import_module("kubernetes.client.exceptions")
        if "kubernetes.client" in _bare:  # what the config loaders take from a bare kubernetes.client
            client_package = sys.modules["kubernetes.client"]
            client_package.__dict__.setdefault("Configuration", configuration.Configuration)
            client_package.__dict__.setdefault("ApiClient", _ApiClientOnDemand)
        return configuration, rest, exceptions


_configuration, rest, exceptions = _load()
Configuration = _configuration.Configuration
ApiException = exceptions.ApiException


def incluster_loader() -> Any:
    """``kubernetes.config.incluster_config.InClusterConfigLoader``."""
    return importlib.import_module("kubernetes.config.incluster_config").InClusterConfigLoader


def load_kube_config(**kwargs: Any) -> None:
    """``kubernetes.config.kube_config.load_kube_config``: imported on first use (it brings requests and oauthlib)."""
    importlib.import_module("kubernetes.config.kube_config").load_kube_config(**kwargs)
