"""The delegated reviews as the adapter sends them: aiohttp on the serving loop, built from the official client's
``Configuration``, decisions kept as k8s.io/apiserver's webhook authorizer keeps them.

A loopback server stands in for kube-apiserver's review endpoints and counts what reaches it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from kubernetes.client import Configuration

from adapter.auth.attributes import ResourceAttributes, request_attributes
from adapter.auth.authz import Authorizer, should_cache
from adapter.auth.delegated import DelegationUnavailable, KubeDelegate, access_review_spec
from adapter.auth.identity import User
from adapter.kube.api import KubeClient
from tests.support.certs import issue, make_ca
from tests.support.prometheus import free_port

pytestmark = pytest.mark.unit

C1 = "/apis/custom.metrics.k8s.io/v1beta2"


@dataclass
class ReviewServer:
    """Answers SubjectAccessReviews with ``allow`` and ``status``, TokenReviews for ``tokens``; records bodies and
    Authorization headers."""

    allow: bool = True
    status: int = 200
    reply: Callable[[], web.StreamResponse] | None = None  # overrides the answer
    bodies: list[dict] = field(default_factory=list)
    authorization: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.authorization.append(request.headers.get("Authorization", ""))
        if self.reply is not None:
            return self.reply()
        if self.status != 200:
            return web.json_response({"kind": "Status", "code": self.status, "reason": "InternalError",
                                      "message": "test"}, status=self.status)
        body = self.bodies[-1]
        if body["kind"] == "TokenReview":
            ok = body["spec"]["token"] == "good"
            return web.json_response({**body, "status": {"authenticated": ok, "user": {"username": "alice"}
                                                         if ok else {}}})
        return web.json_response({**body, "status": {"allowed": self.allow}})


@asynccontextmanager
async def serving(server: ReviewServer, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", server.handle)
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def configuration(host: str, token: str = "sa-token") -> Configuration:
    c = Configuration()
    c.host = host
    c.api_key = {"authorization": token}
    c.api_key_prefix = {"authorization": "Bearer"}
    return c


ALICE = User("alice", groups=("system:authenticated",))
BOB = User("bob", groups=("system:authenticated",))
KITTENS = ResourceAttributes("get", "", "v1", "pods", namespace="kittensandponies")


def ridiculous() -> ResourceAttributes:
    return ResourceAttributes("v" * 2000, "g" * 2000, "a" * 2000, "r" * 2000, namespace="kittensandponies",
                              name="n" * 2000)


# k8s.io/apiserver plugin/pkg/authorizer/webhook/webhook_v1_test.go, TestV1WebhookCache, in its order (one cache
# across the rows): (name, user, attributes, server allows, server status, error expected, allowed, calls).
# The one difference: the Go webhook retries 5xx and 429 five times with backoff within one request; the adapter
# asks once, answers 503 (fail closed), and the HPA asks again at its next sync: 1 call where upstream makes 5.
WEBHOOK_CACHE = [
    ("server errors retry", ALICE, KITTENS, False, 500, True, False, 1),
    ("429s retry", ALICE, KITTENS, False, 429, True, False, 1),
    ("404 doesnt retry", ALICE, KITTENS, False, 404, True, False, 1),
    ("403 doesnt retry", ALICE, KITTENS, False, 403, True, False, 1),
    ("401 doesnt retry", ALICE, KITTENS, False, 401, True, False, 1),
    ("alice successful request", ALICE, KITTENS, True, 200, False, True, 1),
    ("alice cached request", ALICE, KITTENS, False, 500, False, True, 0),
    ("bob failed request", BOB, KITTENS, False, 500, True, False, 1),
    ("bob unauthorized request", BOB, KITTENS, False, 200, False, False, 1),
    ("bob unauthorized cached request", BOB, KITTENS, False, 500, False, False, 0),
    ("ridiculous unauthorized request", BOB, ridiculous(), False, 200, False, False, 1),
    ("ridiculous unauthorized request again", BOB, ridiculous(), False, 200, False, False, 1),
    ("ridiculous authorized request", ALICE, ridiculous(), True, 200, False, True, 1),
    ("ridiculous authorized request again", ALICE, ridiculous(), True, 200, False, True, 1),
]


def test_decisions_are_cached_as_the_go_webhook_authorizer_caches_them() -> None:
    server = ReviewServer()

    async def go() -> None:
        async with serving(server) as url:
            delegate = KubeDelegate(KubeClient(configuration(url)))
            authz = Authorizer(delegate, ttl_s=2400 * 3600)
            for name, user, attrs, allow, status, error, allowed, calls in WEBHOOK_CACHE:
                server.allow, server.status, before = allow, status, len(server.bodies)
                try:
                    decision, _ = await authz.authorize(user, attrs)
                    assert not error, name
                    assert decision.allowed == allowed, name
                except DelegationUnavailable:
                    assert error, name
                assert len(server.bodies) - before == calls, name
            await delegate.aclose()

    asyncio.run(go())


def test_should_cache_counts_the_requester_controlled_attributes_but_not_a_resource_requests_path() -> None:
    # webhook.go's shouldCache also adds the request path, which these attributes do not carry: the Go library would
    # not keep this decision (its path repeats the name), the adapter does.
    assert should_cache(KITTENS)
    assert not should_cache(ridiculous())
    assert should_cache(ResourceAttributes("get", "", "", "pods", name="n" * 9_992))  # 9,999 bytes
    assert not should_cache(ResourceAttributes("get", "", "", "pods", name="n" * 9_993))
    assert not should_cache(request_attributes("GET", "/" + "p" * 10_000))


def test_the_review_sends_the_spec_it_is_keyed_by() -> None:
    """One encoding of the spec is both the decision's key and the body's ``spec`` (json.Marshal(r.Spec) in Go)."""
    server = ReviewServer()
    user = User("hpa", "uid-1", ("g1", "system:authenticated"), {"scopes": ("b", "a"), "acme.io/team": ("x",)})
    attrs = request_attributes("GET", f"{C1}/namespaces/ml/services/web/DCGM_FI_DEV_GPU_UTIL_AVG")

    async def go() -> None:
        async with serving(server) as url:
            delegate = KubeDelegate(KubeClient(configuration(url)))
            assert (await delegate.review_access(access_review_spec(user, attrs))).allowed
            await delegate.aclose()

    asyncio.run(go())
    [body] = server.bodies
    assert body["apiVersion"] == "authorization.k8s.io/v1" and body["kind"] == "SubjectAccessReview"
    assert body["spec"] == json.loads(access_review_spec(user, attrs)) == {
        "user": "hpa", "uid": "uid-1", "groups": ["g1", "system:authenticated"],
        "extra": {"scopes": ["b", "a"], "acme.io/team": ["x"]},
        "resourceAttributes": {"namespace": "ml", "verb": "get", "group": "custom.metrics.k8s.io",
                               "version": "v1beta2", "resource": "services", "subresource": "DCGM_FI_DEV_GPU_UTIL_AVG",
                               "name": "web"}}
    reordered = User("hpa", "uid-1", ("g1", "system:authenticated"), {"acme.io/team": ("x",), "scopes": ("b", "a")})
    assert access_review_spec(reordered, attrs) == access_review_spec(user, attrs)


def test_reviews_over_tls_with_the_configurations_ca_client_certificate_and_refreshed_token(tmp_path: Path) -> None:
    """What the official client's REST layer would use: the CA, the client certificate, and the token as its
    refresh hook leaves it (a rotated service-account token). The hook runs in a worker thread, never on the
    serving loop; once for both reviews (within the minute), and again after the API server answered 401."""
    ca = make_ca("kubernetes-ca")
    server_cert = issue(ca, "kube-apiserver", client=False, server_names=("127.0.0.1",))
    client_cert = issue(ca, "adapter")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*server_cert.write(tmp_path, "server"))
    tls.verify_mode = ssl.CERT_REQUIRED
    tls.load_verify_locations(cadata=ca.cert_pem.decode())
    server = ReviewServer()
    tokens = iter(["first", "second"])
    hook_threads: list[str] = []

    def refresh(c: Configuration) -> None:
        hook_threads.append(threading.current_thread().name)
        c.api_key["authorization"] = next(tokens)

    async def go() -> None:
        async with serving(server, tls) as url:
            c = configuration(url)
            c.ssl_ca_cert = str(tmp_path / "ca.crt")
            Path(c.ssl_ca_cert).write_bytes(ca.cert_pem)
            c.cert_file, c.key_file = client_cert.write(tmp_path, "client")
            c.refresh_api_key_hook = refresh
            delegate = KubeDelegate(KubeClient(c))
            assert (await delegate.review_token("good")).user == User("alice")
            assert (await delegate.review_access(access_review_spec(ALICE, KITTENS))).allowed
            server.status = 401
            with pytest.raises(DelegationUnavailable, match="answered 401"):
                await delegate.review_access(access_review_spec(BOB, KITTENS))
            server.status = 200
            assert (await delegate.review_access(access_review_spec(BOB, KITTENS))).allowed
            await delegate.aclose()

    asyncio.run(go())
    assert server.authorization == ["Bearer first", "Bearer first", "Bearer first", "Bearer second"]
    assert hook_threads == ["kube-credentials", "kube-credentials"]


def test_an_untrusted_server_certificate_fails_closed(tmp_path: Path) -> None:
    ca, other = make_ca("kubernetes-ca"), make_ca("someone-else")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*issue(other, "impostor", client=False, server_names=("127.0.0.1",)).write(tmp_path, "s"))
    server = ReviewServer()

    async def go() -> None:
        async with serving(server, tls) as url:
            c = configuration(url)
            c.ssl_ca_cert = str(tmp_path / "ca.crt")
            Path(c.ssl_ca_cert).write_bytes(ca.cert_pem)
            delegate = KubeDelegate(KubeClient(c))
            with pytest.raises(DelegationUnavailable, match=r"SubjectAccessReview: .*certificate"):
                await delegate.review_access(access_review_spec(ALICE, KITTENS))
            await delegate.aclose()

    asyncio.run(go())
    assert server.bodies == []


@pytest.mark.parametrize(("reply", "message"), [
    (lambda: web.Response(body=b"<html>proxy error</html>", content_type="text/html"), "not a JSON object"),
    (lambda: web.Response(status=502, body=b"bad gateway"), "answered 502"),
    (lambda: web.json_response([1, 2]), "not a JSON object"),
])
def test_answers_that_are_not_a_review_fail_closed(reply: Callable[[], web.StreamResponse], message: str) -> None:
    server = ReviewServer(reply=reply)

    async def go() -> None:
        async with serving(server) as url:
            delegate = KubeDelegate(KubeClient(configuration(url)))
            with pytest.raises(DelegationUnavailable, match=message):
                await delegate.review_access(access_review_spec(ALICE, KITTENS))
            await delegate.aclose()

    asyncio.run(go())


def test_an_api_server_that_is_down_fails_closed() -> None:
    async def go() -> None:
        delegate = KubeDelegate(KubeClient(configuration(f"http://127.0.0.1:{free_port()}")))
        with pytest.raises(DelegationUnavailable, match=r"SubjectAccessReview: .*127\.0\.0\.1"):
            await delegate.review_access(access_review_spec(ALICE, KITTENS))
        await delegate.aclose()

    asyncio.run(go())
