"""The client a gRPC call comes from: the flow its seat is taken for (listener.seats)."""

from __future__ import annotations

from listener.addresses import client_address


def client_of(peer: str) -> str:
    """The client's address from gRPC's peer string (``ipv4:10.1.2.3:5555``, ``ipv6:[::ffff:10.1.2.3]:5555``,
    ``unix:/path``), spelt as listener.addresses spells it."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    return client_address(rest.rsplit(":", 1)[0].strip("[]"))
