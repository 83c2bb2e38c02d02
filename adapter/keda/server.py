"""The KEDA external scaler's gRPC server, run inside ``gpu-adapter serve``.

It runs on the adapter's own event loop (``grpc.aio``, started and stopped with the app's lifespan as one of its
background tasks), not in a thread of its own: the engine's Prometheus client (an ``aiohttp`` session), the
query cache's in-flight futures and the Kubernetes watch caches all belong to that loop, and a second loop would
need a second client and cache (a second engine) or a hop between threads for every query. gRPC's completion
queue is polled by gRPC's own thread, which hands each call to the loop, so the loop does no blocking I/O for it.

TLS as KEDA dials it (``getClientForConnectionPool`` in ``pkg/scalers/external_scaler.go``): KEDA uses TLS when the
trigger sets ``enableTLS: "true"`` or its authentication gives ``caCert`` or ``tlsClientCert``/``tlsClientKey``,
verifying the server's certificate against ``caCert`` (or the system roots) for the host of ``scalerAddress``
unless ``unsafeSsl: "true"``; otherwise it dials plain text. Here: TLS with the serving certificate, client
certificates required and verified when a client CA is given (KEDA's ``tlsClientCert``), or plain text. The
certificate files are read again, at the next handshake, whenever one of them changes (a renewed Secret).
gRPC's TLS stack accepts TLS 1.2 and 1.3.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from adapter.filewatch import WatchedFiles
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.guard import Guard
from adapter.keda.limits import ScalerLimits, admitted, channel_args
from adapter.keda.servicer import ExternalScalerServicer

log = logging.getLogger("adapter.keda")


@dataclass(frozen=True)
class ScalerTLS:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None  # required and verified client certificates


@dataclass(frozen=True)
class ScalerSettings:
    host: str
    port: int
    tls: ScalerTLS | None  # None: plain text
    reuse_port: bool = False
    limits: ScalerLimits = field(default_factory=ScalerLimits)


class CertificateFiles:
    """The serving pair and client CA as gRPC wants them, re-read when a file changes (checked per handshake)."""

    def __init__(self, tls: ScalerTLS) -> None:
        self.tls = tls
        self.files = WatchedFiles((tls.cert_file, tls.key_file, tls.client_ca_file), self.configuration,
                                  "KEDA scaler certificate files", log)

    def configuration(self) -> Any:
        ca = Path(self.tls.client_ca_file).read_bytes() if self.tls.client_ca_file else None
        pair = (Path(self.tls.key_file).read_bytes(), Path(self.tls.cert_file).read_bytes())
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=ca)

    def changed(self) -> Any:
        """gRPC's fetcher: a new configuration when the files changed since last read, else None (keep)."""
        return self.files.refresh()

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(self.files.current, self.changed,
                                                   require_client_authentication=self.tls.client_ca_file is not None)


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class KedaScalerServer:
    """A background task of the app: ``start`` inside the running loop (the lifespan), ``stop`` at shutdown."""

    def __init__(self, settings: ScalerSettings, servicer: ExternalScalerServicer, guard: Guard) -> None:
        """``guard``: the seats and request deadline every call passes first (the servicer's stream evaluations
        share its ``calls`` seats)."""
        self.settings = settings
        self.servicer = servicer
        self.guard = guard
        self.port: int | None = None
        self._server: aio.Server | None = None
        self._starting: asyncio.Future[None] | None = None
        self._stopping: asyncio.Future[None] | None = None

    def start(self) -> None:
        s = self.settings
        # gRPC sets SO_REUSEPORT unless told not to: a second process would share the port without a word.
        # maximum_concurrent_rpcs: a backstop above every seat and waiting place (the guard refuses first, fairly).
        server = aio.server(options=channel_args(s.limits, s.reuse_port), interceptors=[self.guard],
                            maximum_concurrent_rpcs=2 * admitted(s.limits))
        pb_grpc.add_ExternalScalerServicer_to_server(self.servicer, server)
        where = address(s.host, s.port)
        if s.tls is None:
            self.port = server.add_insecure_port(where)
        else:
            self.port = server.add_secure_port(where, CertificateFiles(s.tls).credentials())
        self._server = server
        self._starting = asyncio.ensure_future(server.start())
        mode = "plain text" if s.tls is None else ("TLS, client certificates required" if s.tls.client_ca_file
                                                   else "TLS")
        log.info("KEDA external scaler listening on %s (%s)", address(s.host, self.port), mode)

    async def drain(self, timeout_s: float) -> None:
        """The server's drain (adapter.server.lifecycle): gRPC's stop sends GOAWAY to KEDA's connections and takes
        no new call; calls in flight get ``timeout_s``, open streams end with status OK (the servicer's
        ``end_streams``), so KEDA reconnects, through the Service, to a replica that stays."""
        if self._server is None or self._stopping is not None:
            return
        if self._starting is not None:
            await self._starting
        log.info("KEDA external scaler draining: GOAWAY sent, open streams end")
        self._stopping = asyncio.ensure_future(self._server.stop(grace=timeout_s))
        self.servicer.end_streams()
        await self._stopping

    async def stop(self) -> None:
        if self._server is None:
            return
        if self._stopping is not None:  # drained: wait for the end of it
            await self._stopping
            return
        if self._starting is not None:
            await self._starting
        await self._server.stop(grace=1.0)  # open streams are cancelled; KEDA reconnects to another replica
