"""The KEDA scaler's limits: what one replica holds at most and for how long, as gRPC core server arguments and
seats (``listener.seats``). Pure: no server is started here.

Every default is said and justified in docs/keda.md#limits; KEDA's side was read from kedacore/keda
``pkg/scalers/external_scaler.go`` (commit 8b4f083ca): ``getClientForConnectionPool`` dials one ``grpc.ClientConn``
per scaler address and TLS settings with ``grpc.NewClient``, a round-robin service config and no keepalive or
message-size options (grpc-go's defaults: no keepalive pings, 4 MiB messages), and every ScaledObject's calls and
``StreamIsActive`` streams share it; ``runStreamIsActive`` opens a stream again 2 s after a clean end (io.EOF) and
after a growing back-off, up to a minute, after an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from listener.seats import FairSeats

# KEDA's requests are a ScaledObjectRef (name, namespace, the trigger's metadata map) with gRPC's few standard
# headers: a few hundred bytes each. A bigger one is refused by gRPC before it is read (RESOURCE_EXHAUSTED).
MAX_REQUEST_BYTES = 64 * 1024
MAX_METADATA_BYTES = 8 * 1024
MAX_PING_STRIKES = 2  # gRPC's default: the third ping too soon ends the connection (GOAWAY ENHANCE_YOUR_CALM)
KEEPALIVE_TIME_S, KEEPALIVE_TIMEOUT_S = 120.0, 20.0  # the server's own pings: a KEDA gone without a FIN is noticed
WAITING_PER_CALL_SEAT = 50  # a burst of KEDA's calls (its ScaledObjects polled at once) waits rather than fails
STREAMS_WAITING = 64  # streams wait only while every stream seat is taken: enough for each client's next in turn
WAIT_S = 5.0  # the longest a call waits for a seat before RESOURCE_EXHAUSTED
_UNLIMITED = 2**31 - 1  # gRPC's INT_MAX: no limit


@dataclass(frozen=True)
class ScalerLimits:
    """What one replica's scaler holds at most, and for how long (``--keda-scaler-*``; docs/keda.md says why each
    default). A duration of 0 means no limit."""

    max_requests_inflight: int = 20
    max_streams: int = 500
    max_connections: int = 1000
    handshake_timeout_s: float = 10.0
    max_connection_idle_s: float = 300.0
    max_connection_age_s: float = 1800.0
    max_connection_age_grace_s: float = 600.0
    keepalive_min_time_s: float = 300.0

    def stream_lifetime_s(self, evaluation_s: float) -> tuple[float, float] | None:
        """The range a StreamIsActive's lifetime is drawn from (None: no grace, no end of its own). A stream ends
        between evaluations, each taking up to ``evaluation_s`` with its pause and its wait for a seat, so it ends
        before a connection's grace runs out however late in the connection's life it was opened; spread over
        half that time, so KEDA's streams do not all come back at once. A ValueError when the grace is too short
        for that."""
        if not self.max_connection_age_grace_s:
            return None
        room = self.max_connection_age_grace_s - evaluation_s - WAIT_S
        if room <= 0:
            raise ValueError(f"a stream's evaluation with its pause and its wait for a seat takes up to "
                             f"{evaluation_s + WAIT_S:g}s")
        return room / 2, room



def _ms(seconds: float) -> int:
    return _UNLIMITED if seconds <= 0 else min(_UNLIMITED, round(seconds * 1000))


def channel_args(limits: ScalerLimits, reuse_port: bool = False) -> list[tuple[str, int]]:
    """gRPC core's server arguments (include/grpc/impl/channel_arg_names.h) for ``limits``."""
    args = [
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        # KEDA multiplexes every call and stream onto one connection, so one connection may use every seat and
        # waiting place: the seats, not HTTP/2, are what refuses.
        ("grpc.max_concurrent_streams", admitted(limits)),
        ("grpc.server_handshake_timeout_ms", _ms(limits.handshake_timeout_s)),
        ("grpc.max_connection_idle_ms", _ms(limits.max_connection_idle_s)),
        ("grpc.max_connection_age_ms", _ms(limits.max_connection_age_s)),
        ("grpc.max_connection_age_grace_ms", _ms(limits.max_connection_age_grace_s)),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(limits.keepalive_min_time_s)),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.keepalive_time_ms", _ms(KEEPALIVE_TIME_S)),
        ("grpc.keepalive_timeout_ms", _ms(KEEPALIVE_TIMEOUT_S)),
        ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.absolute_max_metadata_size", MAX_METADATA_BYTES),
    ]
    if limits.max_connections > 0:
        args.append(("grpc.max_allowed_incoming_connections", limits.max_connections))
    return args


def seats_for(limits: ScalerLimits) -> tuple[FairSeats, FairSeats]:
    """The ``calls`` and ``streams`` seats (adapter.keda.guard)."""
    return (FairSeats(limits.max_requests_inflight, limits.max_requests_inflight * WAITING_PER_CALL_SEAT, WAIT_S),
            FairSeats(limits.max_streams, STREAMS_WAITING, WAIT_S))


def admitted(limits: ScalerLimits) -> int:
    """Calls and streams running or waiting at most, together."""
    return limits.max_requests_inflight * (1 + WAITING_PER_CALL_SEAT) + limits.max_streams + STREAMS_WAITING
