"""The current client CAs: fixed from flags, or kube-apiserver's ConfigMap re-read periodically (rotation)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from adapter.auth.delegated import DelegationUnavailable, KubeDelegate
from adapter.auth.requestheader import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE, ClientCAs, ConfigError, from_configmap
from adapter.background import BackgroundTask

log = logging.getLogger("adapter.auth")

READER_HINT = (f"to read {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}, bind the adapter's service account to the Role "
               "extension-apiserver-authentication-reader in kube-system: kubectl create rolebinding -n kube-system "
               "ROLEBINDING_NAME --role=extension-apiserver-authentication-reader "
               "--serviceaccount=YOUR_NS:YOUR_SA")


class ClientCASource:
    def __init__(self, fixed: ClientCAs | None, delegate: KubeDelegate | None, *, tolerate_lookup_failure: bool,
                 on_change: Callable[[ClientCAs], None], interval_s: float = 60.0) -> None:
        self._fixed = fixed
        self._delegate = delegate
        self._tolerate = tolerate_lookup_failure
        self._on_change = on_change
        self._interval_s = interval_s
        self._current = fixed or ClientCAs()
        self._task = BackgroundTask("client-ca-refresh")

    def current(self) -> ClientCAs:
        return self._current

    @property
    def dynamic(self) -> bool:
        return self._fixed is None and self._delegate is not None

    async def load(self) -> None:
        """The first read, before serving; a failure stops start-up unless lookup failures are tolerated."""
        if not self.dynamic:
            return
        try:
            await self._refresh()
        except (DelegationUnavailable, ConfigError) as exc:
            if not self._tolerate:
                raise ConfigError(f"{exc} ({READER_HINT})") from None
            log.warning("cannot read the front-proxy configuration, serving without it until it can be read: "
                        "%s (%s)", exc, READER_HINT)

    def start(self) -> None:
        """Re-read periodically (rotation) on the serving loop."""
        if self.dynamic:
            self._task.start(self._run)

    async def stop(self) -> None:
        await self._task.stop()

    async def _refresh(self) -> None:
        assert self._delegate is not None
        cas = from_configmap(await self._delegate.extension_configmap())
        if cas != self._current:
            if cas.requestheader is None:
                log.warning("%s/%s has no requestheader-client-ca-file: aggregated requests cannot be "
                            "authenticated", CONFIGMAP_NAMESPACE, CONFIGMAP_NAME)
            self._current = cas
            self._on_change(cas)
            log.info("front-proxy configuration loaded", extra={
                "allowed_names": list(cas.requestheader.allowed_names) if cas.requestheader else None})

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self._refresh()
            except (DelegationUnavailable, ConfigError) as exc:
                log.warning("re-reading the front-proxy configuration failed, keeping the last one: %s", exc)
