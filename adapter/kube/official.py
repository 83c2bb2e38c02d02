"""The official client's configuration, REST and config-loader modules, without its package ``__init__`` files.

``import kubernetes`` (or ``kubernetes.client``) runs package ``__init__`` files that import every API class,
every generated model, the dynamic client, websockets and the informers: about 0.5 s and 20 MiB the server never
uses, since it speaks raw JSON (adapter/kube/api.py). This module registers ``kubernetes``, ``kubernetes.client``,
``kubernetes.config`` and ``kubernetes.utils`` as bare packages (their paths only) and imports just the modules
serving needs from them. Each bare package finishes loading the first time something asks it for a name it lacks,
so other code in the same process (the exporter, loadtest, tests) that uses the full client still gets it.

The kubeconfig loader is treated the same way: the OAuth packages it imports at the top (``oauthlib.oauth2``,
``requests_oauthlib`` and with it requests and charset_normalizer, 4.5 MiB and 170 modules) serve only its OIDC
refresh, so they stay bare until that runs.
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


class _OnDemand:
    """Stands in, inside the kubeconfig loader only, for a class it imports by name but builds only for an OIDC
    token refresh: the real class is imported (with its package) when first called."""

    module: str
    name: str

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(cls.module), cls.name)(*args, **kwargs)


class _ApiClientOnDemand(_OnDemand):
    module, name = "kubernetes.client.api_client", "ApiClient"  # the real one, with its models


class _OAuth2SessionOnDemand(_OnDemand):
    module, name = "requests_oauthlib.oauth2_session", "OAuth2Session"


# What kubernetes.config.kube_config imports by name from a package left bare: (package, name, stand-in).
_KUBE_CONFIG_NAMES = (("kubernetes.client", "ApiClient", _ApiClientOnDemand),
                      ("requests_oauthlib", "OAuth2Session", _OAuth2SessionOnDemand))


def _load() -> tuple[ModuleType, ModuleType, ModuleType]:
    with _completing:
        for name in _PACKAGES:
            _bare_package(name)
        configuration = importlib.import_module("kubernetes.client.configuration")
        rest = importlib.import_module("kubernetes.client.rest")
        exceptions = importlib.import_module("kubernetes.client.exceptions")
        if "kubernetes.client" in _bare:  # what the config loaders take from a bare kubernetes.client
            sys.modules["kubernetes.client"].__dict__.setdefault("Configuration", configuration.Configuration)
        return configuration, rest, exceptions


_configuration, rest, exceptions = _load()
Configuration = _configuration.Configuration
ApiException = exceptions.ApiException


def incluster_loader() -> Any:
    """``kubernetes.config.incluster_config.InClusterConfigLoader``."""
    return importlib.import_module("kubernetes.config.incluster_config").InClusterConfigLoader


def _kube_config() -> ModuleType:
    """``kubernetes.config.kube_config``, imported with its OAuth packages left bare.

    The stand-ins it takes by name from bare packages are removed from those packages right after, so anything
    else asking them for the name gets the real class.
    """
    with _completing:
        if "kubernetes.config.kube_config" in sys.modules:
            return sys.modules["kubernetes.config.kube_config"]
        _bare_package("oauthlib.oauth2")
        _bare_package("requests_oauthlib")
        lent = [(sys.modules[package], name, stand_in) for package, name, stand_in in _KUBE_CONFIG_NAMES
                if package in _bare and name not in sys.modules[package].__dict__]
        for package_module, name, stand_in in lent:
            package_module.__dict__[name] = stand_in
        try:
            return importlib.import_module("kubernetes.config.kube_config")
        finally:
            for package_module, name, stand_in in lent:
                if package_module.__dict__.get(name) is stand_in:
                    del package_module.__dict__[name]


def load_kube_config(**kwargs: Any) -> None:
    """``kubernetes.config.kube_config.load_kube_config``, imported on first use."""
    _kube_config().load_kube_config(**kwargs)
