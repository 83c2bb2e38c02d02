"""A client's address as the listeners count it: the flow its requests belong to and the line its connections wait
in. Every connection of one pod shares it; an IPv4 address mapped into IPv6 (a dual-stack listener) is the IPv4 one."""

from __future__ import annotations

import ipaddress


def client_address(host: object) -> str:
    """``host`` (a socket's peer host, or an ASGI scope's client host) as one spelling per client."""
    try:
        address = ipaddress.ip_address(str(host))
    except ValueError:
        return str(host)
    return str(getattr(address, "ipv4_mapped", None) or address)


def peer_of(peername: object) -> str:
    """The address of a socket's ``getpeername()`` / a transport's ``peername`` (a tuple, or a path for Unix)."""
    if isinstance(peername, tuple) and peername:
        return client_address(peername[0])
    return str(peername or "")
