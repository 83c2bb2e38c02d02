"""The ASGI TLS extension on uvicorn: the app sees the client certificate the handshake verified."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from adapter.auth.stack import add_client_cas
from adapter.server.serving import guarded_server, server_context
from tests.support.certs import Issued, issue, make_ca
from tests.support.prometheus import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.lowest]

SERVER_CA = make_ca("serving-ca")
PROXY_CA = make_ca("front-proxy-ca")
LATER_CA = make_ca("rotated-in-ca")
OTHER_CA = make_ca("other-ca")


async def echo_tls(scope, receive, send):  # type: ignore[no-untyped-def]
    tls = (scope.get("extensions") or {}).get("tls") or {}
    body = json.dumps({"chain": tls.get("client_cert_chain")}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class Served:
    def __init__(self, tmp: Path) -> None:
        cert, key = issue(SERVER_CA, "adapter", client=False, server_names=("127.0.0.1",)).write(tmp, "serving")
        self.ctx = server_context(cert, key, PROXY_CA.cert_pem, request_client_certs=True)
        self.port = free_port()
        self.server = guarded_server(echo_tls, "127.0.0.1", self.port, self.ctx, lifespan="off")
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, 10, "uvicorn started", interval=0.02)
        self.tmp = tmp

    def get(self, client_cert: Issued | None) -> httpx.Response:
        ctx = ssl.create_default_context(cadata=SERVER_CA.cert_pem.decode())
        if client_cert is not None:
            cert, key = client_cert.write(self.tmp, f"client-{id(client_cert)}")
            ctx.load_cert_chain(cert, key)
        with httpx.Client(verify=ctx) as client:
            return client.get(f"https://127.0.0.1:{self.port}/")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path)
    yield s
    s.stop()


def test_no_client_certificate_is_fine(served: Served) -> None:
    assert served.get(None).json() == {"chain": []}


def test_verified_client_certificate_reaches_the_app(served: Served) -> None:
    proxy = issue(PROXY_CA, "front-proxy-client")
    chain = served.get(proxy).json()["chain"]
    assert len(chain) == 1
    assert x509.load_pem_x509_certificate(chain[0].encode()) == proxy.cert


def test_certificate_from_an_unknown_ca_is_refused_at_the_handshake(served: Served) -> None:
    with pytest.raises(httpx.TransportError):
        served.get(issue(OTHER_CA, "front-proxy-client"))


def test_rotated_in_ca_is_accepted_by_new_connections(served: Served) -> None:
    later = issue(LATER_CA, "front-proxy-client")
    with pytest.raises(httpx.TransportError):
        served.get(later)
    add_client_cas(served.ctx, LATER_CA.cert_pem)
    assert len(served.get(later).json()["chain"]) == 1
