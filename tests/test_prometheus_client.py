"""The adapter's Prometheus client: request shape, auth, decoding, failures, TLS, and a real Prometheus.

Unit tests drive :class:`PrometheusClient` against a handler server on loopback (tests/support/handler_server.py:
the test's handler sees each request as the client sent it); the connection tests run over a scripted HTTP server.
The TLS tests use a throwaway CA and an ssl-wrapped ``http.server`` on loopback; the last tests query a real
Prometheus scraping 1,500 series.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import gzip
import ipaddress
import json
import math
import os
import re
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.cli.flags import UsageError
from adapter.cli.values import prometheus_headers
from adapter.cli.values import prometheus_settings as prometheus_config
from adapter.kube.config import KubeConfigError
from adapter.prometheus import credentials as prometheus_auth
from adapter.prometheus.client import (
    PrometheusClient,
    PrometheusConfig,
    PrometheusError,
    PrometheusUnavailable,
    QueryFailed,
    Sample,
)
from adapter.rules.catalogue import distinct_shapes
from tests.support.counting_proxy import CountingProxy
from tests.support.handler_server import HandlerServer
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer, free_port
from tests.support.scripted_http import Script, Server
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.unit

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]

VECTOR_OK: dict[str, Any] = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"pod": "p"}, "value": [1700000000.0, "1"]}]},
}


def _ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json={"status": "success", "data": data})


def _vector_ok() -> httpx.Response:
    return httpx.Response(200, json=VECTOR_OK)


@dataclass
class _Recorder:
    """A handler that records every request and answers with ``respond``."""

    respond: Callable[[httpx.Request], httpx.Response] = field(default=lambda _request: _vector_ok())
    requests: list[httpx.Request] = field(default_factory=list)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.respond(request)


@contextlib.asynccontextmanager
async def _client(handler: Handler, **config: Any) -> AsyncIterator[PrometheusClient]:
    """A client whose every host name reaches a server answering with ``handler``."""
    async with HandlerServer(handler) as server:
        client = PrometheusClient(PrometheusConfig(url=config.pop("url", "http://prometheus.test:9090/"), **config),
                                  resolver=server.resolver)
        try:
            yield client
        finally:
            await client.aclose()


def _query(handler: Handler, promql: str = "up", at: float | None = None, **config: Any) -> list[Sample]:
    async def main() -> list[Sample]:
        async with _client(handler, **config) as client:
            return await client.query(promql, at=at)

    return asyncio.run(main())


def _form(request: httpx.Request) -> dict[str, list[str]]:
    return parse_qs(request.content.decode(), keep_blank_values=True, strict_parsing=True)


def _big_selector(pods: int = 1500) -> str:
    names = "|".join(f"trainer-{i:04d}-worker-7f9c6b5d8-{i:05x}-abcdefgh" for i in range(pods))
    return f'gpu_util{{namespace="ml",pod=~"{names}"}}'


_PROM_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")


def _prometheus_duration(text: str) -> float:
    """Seconds, parsed exactly as Prometheus's API ``parseDuration`` does (float seconds or a model.Duration)."""
    try:
        return float(text)
    except ValueError:
        pass
    match = _PROM_DURATION.match(text)
    if not text or match is None:
        raise ValueError(f"Prometheus cannot parse {text!r} to a valid duration")
    units = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)
    return sum(int(part) * unit for part, unit in zip(match.groups(), units, strict=True) if part)


# --- request shape -------------------------------------------------------------------------------------------


def test_post_is_default_and_a_1500_pod_query_goes_in_the_form_body() -> None:
    recorder = _Recorder()
    promql = _big_selector()
    assert len(promql) > 60_000

    _query(recorder, promql)

    (request,) = recorder.requests
    assert request.method == "POST"
    assert request.url.path == "/api/v1/query"
    assert len(str(request.url)) < 100, "the PromQL must not be in the URL"
    assert "trainer-0000" not in str(request.url)
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert _form(request)["query"] == [promql]


def test_repeated_queries_and_queries_of_one_length_each_send_their_own_form() -> None:
    """The bytes path builds a query's head once per body length: equal lengths must still carry their own body."""
    recorder = _Recorder()
    queries = ['up{pod="a"}', 'up{pod="b"}', 'up{pod="a"}', 'up{pod="abc"}', _big_selector(3), 'up{pod="b"}']
    assert len(queries[0]) == len(queries[1])

    async def main() -> None:
        async with _client(recorder) as client:
            for promql in queries:
                await client.query(promql)

    asyncio.run(main())
    assert [_form(r)["query"] for r in recorder.requests] == [[q] for q in queries]
    assert all(int(r.headers["content-length"]) == len(r.content) for r in recorder.requests)


def test_get_mode_puts_the_query_and_time_in_the_query_string() -> None:
    recorder = _Recorder()
    promql = 'sum(gpu_util{namespace="ml"}) by (pod)'

    _query(recorder, promql, at=1700000000.5, method="GET")

    (request,) = recorder.requests
    assert request.method == "GET"
    assert request.url.path == "/api/v1/query"
    assert request.url.params["query"] == promql
    assert request.url.params["time"] == "1700000000.500"
    assert request.content == b""


@pytest.mark.parametrize("timeout_s", [0.5, 5.0, 30.0])
def test_server_timeout_is_slightly_below_the_client_timeout_in_a_format_prometheus_accepts(timeout_s: float) -> None:
    recorder = _Recorder()
    _query(recorder, timeout_s=timeout_s)

    sent = _form(recorder.requests[0])["timeout"][0]
    assert 0.8 * timeout_s <= _prometheus_duration(sent) < timeout_s


def test_prometheus_duration_helper_matches_prometheus() -> None:
    # Checked against Prometheus 2.42: these are accepted (or rejected) by /api/v1/query's timeout parameter.
    assert _prometheus_duration("4.5") == 4.5
    assert _prometheus_duration("4s") == 4
    assert _prometheus_duration("4500ms") == 4.5
    assert _prometheus_duration("1m30s") == 90
    with pytest.raises(ValueError):
        _prometheus_duration("4.500s")


def test_extra_headers_are_sent_on_every_request() -> None:
    recorder = _Recorder(respond=lambda r: _vector_ok() if r.url.path.endswith("query") else _ok([]))

    async def main() -> None:
        async with _client(recorder, headers={"X-Scope-OrgID": "tenant-a"}) as client:
            await client.query("up")
            await client.query("up")
            await client.series(["up"], 0, 10)

    asyncio.run(main())
    assert len(recorder.requests) == 3
    assert [r.headers.get("x-scope-orgid") for r in recorder.requests] == ["tenant-a"] * 3


# kubernetes-sigs/prometheus-adapter cmd/adapter/adapter_test.go, TestParseHeaderArgs: (args, headers).
PARSE_HEADER_ARGS = [
    ([], []),
    (["foo=bar"], [("foo", "bar")]),
    (["foo"], [("foo", "")]),
    (["foo=bar", "foo=baz", "bux=baz=23"], [("foo", "bar"), ("foo", "baz"), ("bux", "baz=23")]),
]


@pytest.mark.parametrize(("args", "headers"), PARSE_HEADER_ARGS)
def test_prometheus_header_flags_parse_as_upstream(args: list[str], headers: list[tuple[str, str]]) -> None:
    assert prometheus_headers(args) == headers


@pytest.mark.parametrize(("arg", "says"), [
    ("bad name=x", "is not a valid header name"),
    ("X-Token=a\nb", "line break"),
    ("X-Token=s3cr\u00e9t", "printable ASCII"),
    ("X-Token=s3cr\x07t", "printable ASCII"),
])
def test_a_prometheus_header_flag_that_cannot_be_sent_is_refused_at_start(arg: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as info:
        prometheus_headers([arg])
    if "ASCII" in says:
        assert "s3cr" not in str(info.value), "a header value may be a credential"


def test_a_header_that_cannot_be_sent_is_refused_when_the_client_is_built() -> None:
    for headers in ([("X-Token", "caf\u00e9")], [("X-Token", "a\rb")], [("bad name", "x")]):
        with pytest.raises(ValueError, match="expected a token name and a printable ASCII value"):
            PrometheusClient(PrometheusConfig(url="http://prometheus.test:9090", headers=headers))


def test_a_repeated_prometheus_header_sends_every_value() -> None:
    recorder = _Recorder()

    async def main() -> None:
        headers = prometheus_headers(["foo=bar", "foo=baz", "bux=baz=23"])
        async with _client(recorder, method="GET", headers=headers) as client:
            await client.query("up")

    asyncio.run(main())
    [request] = recorder.requests
    assert request.headers.get_list("foo") == ["bar", "baz"]
    assert request.headers.get_list("bux") == ["baz=23"]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_query_parameters_in_the_url_go_with_every_request(method: str) -> None:
    """A VictoriaMetrics-style ``?extra_label=...`` in --prometheus-url reaches Prometheus with each call."""
    recorder = _Recorder()
    _query(recorder, url="http://vm.test:8428/prometheus?extra_label=tenant%3Da&x=1", method=method)
    [request] = recorder.requests
    assert request.url.path == "/prometheus/api/v1/query"
    assert request.url.params.get_list("extra_label") == ["tenant=a"] and request.url.params["x"] == "1"
    sent = request.url.params if method == "GET" else httpx.QueryParams(request.content.decode())
    assert sent["query"] == "up"


def test_an_authorization_header_flag_wins_over_the_token_file(tmp_path: Path) -> None:
    """As prometheus-adapter's bearer round tripper: a request that already has Authorization keeps it."""
    token = tmp_path / "token"
    token.write_text("from-file")
    recorder = _Recorder()
    _query(recorder, bearer_token_file=str(token), headers=prometheus_headers(["Authorization=Basic dTpw"]))
    _query(recorder, bearer_token_file=str(token))
    assert [r.headers.get_list("authorization") for r in recorder.requests] == [["Basic dTpw"], ["Bearer from-file"]]


def test_series_sends_match_time_window_and_returns_label_sets() -> None:
    labels = [{"__name__": "up", "job": "a"}, {"__name__": "up", "job": "b"}]
    recorder = _Recorder(respond=lambda _r: _ok(labels))

    async def main() -> list[dict[str, str]]:
        async with _client(recorder) as client:
            return await client.series(['up{job="a"}', 'up{job="b"}'], 1700000000, 1700000060.25)

    assert asyncio.run(main()) == labels
    (request,) = recorder.requests
    assert request.method == "POST"
    assert request.url.path == "/api/v1/series"
    form = _form(request)
    assert form["match[]"] == ['up{job="a"}', 'up{job="b"}']
    assert form["start"] == ["1700000000.000"]
    assert form["end"] == ["1700000060.250"]


# --- bearer token --------------------------------------------------------------------------------------------


def _rotate(path: Path, token: str) -> None:
    """Rewrite the token file the way kubelet does, and make the change visible to mtime checks."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(token + "\n")
    os.replace(tmp, path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_bearer_token_file_is_sent_and_rotation_is_picked_up(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    _rotate(token_file, "token-one")
    recorder = _Recorder()

    async def main() -> None:
        async with _client(recorder, bearer_token_file=str(token_file)) as client:
            await client.query("up")
            await client.query("up")
            _rotate(token_file, "token-two")  # same length: only the mtime tells the change
            await client.query("up")

    asyncio.run(main())
    assert [r.headers["authorization"] for r in recorder.requests] == [
        "Bearer token-one",
        "Bearer token-one",
        "Bearer token-two",
    ]


def test_missing_bearer_token_file_is_unavailable_and_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    recorder = _Recorder()

    with pytest.raises(PrometheusUnavailable, match=re.escape(str(missing))):
        _query(recorder, bearer_token_file=str(missing))
    assert recorder.requests == []


def test_unreadable_bearer_token_file_is_unavailable(tmp_path: Path) -> None:
    # A secret volume mounted as a directory: stat() succeeds, open() fails with IsADirectoryError.
    token_dir = tmp_path / "token"
    token_dir.mkdir()

    with pytest.raises(PrometheusUnavailable, match=re.escape(str(token_dir))):
        _query(_Recorder(), bearer_token_file=str(token_dir))


@pytest.mark.parametrize("token", ["abc\ndef", "abc\x00def", "abc\u00e9def"])
def test_a_token_that_cannot_be_sent_is_unavailable_and_not_shown(tmp_path: Path, token: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    recorder = _Recorder()

    with pytest.raises(PrometheusUnavailable, match=re.escape(str(token_file))) as info:
        _query(recorder, bearer_token_file=str(token_file))
    assert "abc" not in str(info.value)
    assert recorder.requests == [], "nothing is sent"


# --- decoding ------------------------------------------------------------------------------------------------


def test_vector_results_become_samples_including_nan_and_inf() -> None:
    result = [
        {"metric": {"__name__": "gpu_util", "pod": "a"}, "value": [1700000000.123, "0.75"]},
        {"metric": {"pod": "b"}, "value": [1700000000.123, "NaN"]},
        {"metric": {"pod": "c"}, "value": [1700000000.123, "+Inf"]},
        {"metric": {"pod": "d"}, "value": [1700000000.123, "-Inf"]},
    ]
    recorder = _Recorder(respond=lambda _r: _ok({"resultType": "vector", "result": result}))

    samples = _query(recorder, "gpu_util")

    assert [s.labels for s in samples] == [r["metric"] for r in result]
    assert all(s.timestamp == 1700000000.123 for s in samples)
    assert samples[0].value == 0.75 and samples[0].finite
    assert math.isnan(samples[1].value) and not samples[1].finite
    assert samples[2].value == math.inf and not samples[2].finite
    assert samples[3].value == -math.inf and not samples[3].finite


def test_empty_vector_is_no_samples() -> None:
    recorder = _Recorder(respond=lambda _r: _ok({"resultType": "vector", "result": []}))
    assert _query(recorder) == []


def test_scalar_result_is_one_unlabelled_sample() -> None:
    recorder = _Recorder(respond=lambda _r: _ok({"resultType": "scalar", "result": [1700000000.5, "42"]}))

    assert _query(recorder, "scalar(sum(up))") == [Sample({}, 1700000000.5, 42.0)]


@pytest.mark.parametrize(
    "data",
    [
        {"resultType": "matrix", "result": [{"metric": {"pod": "a"}, "values": [[1700000000, "1"]]}]},
        {"resultType": "string", "result": [1700000000, "hello"]},
    ],
)
def test_non_instant_vector_results_fail_the_query(data: dict[str, Any]) -> None:
    recorder = _Recorder(respond=lambda _r: _ok(data))

    with pytest.raises(QueryFailed, match=data["resultType"]):
        _query(recorder, "gpu_util[5m]")


@pytest.mark.parametrize(
    ("status", "error_type", "error"),
    [
        (400, "bad_data", '1:10: parse error: unexpected "}" in label matching'),
        (422, "execution", "query processing would load too many samples into memory"),
    ],
)
def test_prometheus_rejecting_the_query_is_query_failed(status: int, error_type: str, error: str) -> None:
    body = {"status": "error", "errorType": error_type, "error": error}
    recorder = _Recorder(respond=lambda _r: httpx.Response(status, json=body))

    with pytest.raises(QueryFailed, match=re.escape(error)) as info:
        _query(recorder, "gpu_util{")
    assert not isinstance(info.value, PrometheusUnavailable)


def test_503_is_unavailable() -> None:
    body = {"status": "error", "errorType": "timeout", "error": "query timed out in query execution"}
    recorder = _Recorder(respond=lambda _r: httpx.Response(503, json=body))

    with pytest.raises(PrometheusUnavailable, match=r"503.*query timed out"):
        _query(recorder)


def test_an_answer_compressed_although_not_asked_for_is_decoded() -> None:
    # The client never asks for gzip; a proxy in front of Prometheus may compress anyway.
    gzipped = gzip.compress(json.dumps(VECTOR_OK).encode())
    recorder = _Recorder(respond=lambda _r: httpx.Response(200, content=gzipped, headers={
        "content-type": "application/json", "content-encoding": "gzip"}))

    (sample,) = _query(recorder)
    assert (sample.labels, sample.value) == ({"pod": "p"}, 1.0)
    assert "gzip" not in recorder.requests[0].headers.get("accept-encoding", "")


def test_an_answer_whose_encoding_is_broken_is_unavailable() -> None:
    recorder = _Recorder(respond=lambda _r: web.Response(body=b"not gzip", headers={"Content-Encoding": "gzip"}))

    with pytest.raises(PrometheusUnavailable, match="unreachable: ClientPayloadError"):
        _query(recorder)


def test_non_json_502_is_unavailable() -> None:
    html = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    recorder = _Recorder(respond=lambda _r: httpx.Response(502, text=html, headers={"content-type": "text/html"}))

    with pytest.raises(PrometheusUnavailable, match=r"502.*Bad Gateway") as info:
        _query(recorder)
    assert not isinstance(info.value, QueryFailed)


def test_hanging_prometheus_is_unavailable_within_the_timeout() -> None:
    async def hang(_request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return _vector_ok()

    timeout_s = 0.5
    started = time.monotonic()
    with pytest.raises(PrometheusUnavailable, match="did not answer"):
        _query(hang, timeout_s=timeout_s)
    assert time.monotonic() - started < 10  # the 0.5 s timeout, not the 30 s answer


def test_connection_refused_is_unavailable() -> None:
    port = free_port()  # nothing listens there any more

    async def main() -> None:
        client = PrometheusClient(PrometheusConfig(url=f"http://127.0.0.1:{port}", timeout_s=2.0))
        try:
            await client.query("up")
        finally:
            await client.aclose()

    with pytest.raises(PrometheusUnavailable, match="unreachable"):
        asyncio.run(main())


# --- TLS -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def _issue(
    cn: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if usage is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> _Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("test-ca", ca_key, None, ca_key, None)
    out = _Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")
    out.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for cn, usage, cert_path, key_path in [
        ("prometheus", ExtendedKeyUsageOID.SERVER_AUTH, out.server_cert, out.server_key),
        ("gpu-adapter", ExtendedKeyUsageOID.CLIENT_AUTH, out.client_cert, out.client_key),
    ]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert_path.write_bytes(_issue(cn, key, ca, ca_key, usage).public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key)
    return out


class _TlsServer(ThreadingHTTPServer):
    peers: list[str | None]
    authorizations: list[str | None]


class _TlsHandler(BaseHTTPRequestHandler):
    server: _TlsServer

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        peer = self.request.getpeercert()
        subject = dict(item for rdn in peer["subject"] for item in rdn) if peer else None
        self.server.peers.append(subject["commonName"] if subject else None)
        self.server.authorizations.append(self.headers.get("Authorization"))
        body = json.dumps(VECTOR_OK).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def tls_server(pki: _Pki) -> Iterator[_TlsServer]:
    """HTTPS on loopback with a cert for 127.0.0.1; records the client certificate's CN (or None) per request."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.load_verify_locations(pki.ca)
    context.verify_mode = ssl.CERT_OPTIONAL
    server = _TlsServer(("127.0.0.1", 0), _TlsHandler)
    server.peers = []
    server.authorizations = []
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tls_url(tls_server: _TlsServer) -> str:
    tls_server.peers.clear()
    tls_server.authorizations.clear()
    return f"https://127.0.0.1:{tls_server.server_address[1]}"


def _tls_query(url: str, **config: Any) -> list[Sample]:
    async def main() -> list[Sample]:
        client = PrometheusClient(PrometheusConfig(url=url, timeout_s=3.0, **config))
        try:
            return await client.query("up")
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_tls_with_ca_file_succeeds(tls_url: str, tls_server: _TlsServer, pki: _Pki) -> None:
    assert _tls_query(tls_url, ca_file=str(pki.ca)) == [Sample({"pod": "p"}, 1700000000.0, 1.0)]
    assert tls_server.peers == [None]


def test_tls_without_the_ca_fails_verification(tls_url: str, tls_server: _TlsServer) -> None:
    with pytest.raises(PrometheusUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        _tls_query(tls_url)
    assert tls_server.peers == []


def test_tls_insecure_skip_verify_succeeds(tls_url: str) -> None:
    assert len(_tls_query(tls_url, insecure_skip_verify=True)) == 1


def test_tls_client_certificate_is_presented(tls_url: str, tls_server: _TlsServer, pki: _Pki) -> None:
    samples = _tls_query(
        tls_url, ca_file=str(pki.ca), client_cert_file=str(pki.client_cert), client_key_file=str(pki.client_key)
    )
    assert len(samples) == 1
    assert tls_server.peers == ["gpu-adapter"]


def test_tls_insecure_skip_verify_still_presents_the_client_certificate(
    tls_url: str, tls_server: _TlsServer, pki: _Pki
) -> None:
    _tls_query(
        tls_url,
        insecure_skip_verify=True,
        client_cert_file=str(pki.client_cert),
        client_key_file=str(pki.client_key),
    )
    assert tls_server.peers == ["gpu-adapter"]


# --- a real Prometheus ---------------------------------------------------------------------------------------

PODS = [f"pod-{i:04d}" for i in range(1500)]
METRICS = (
    "# TYPE gpu_util gauge\n"
    + "".join(f'gpu_util{{namespace="ml",pod="{pod}"}} {i % 100}\n' for i, pod in enumerate(PODS))
)


@pytest.fixture(scope="module")
def real_prometheus() -> Iterator[PrometheusServer]:
    """One real Prometheus for the module (prometheus_factory is function-scoped), scraping 1,500 series."""
    endpoint = MetricsEndpoint(METRICS)
    try:
        with PrometheusServer([endpoint.address], scrape_interval="1s") as server:
            server.wait_for("count(gpu_util)", lambda r: bool(r) and r[0]["value"][1] == "1500", timeout=30)
            yield server
    finally:
        endpoint.stop()


ALL_PODS = f'gpu_util{{namespace="ml",pod=~"{"|".join(PODS)}"}}'


def _check_all_pods(samples: list[Sample]) -> None:
    assert len(samples) == 1500
    by_pod = {s.labels["pod"]: s for s in samples}
    assert sorted(by_pod) == PODS
    assert by_pod["pod-0042"].value == 42.0
    assert by_pod["pod-1499"].value == 99.0
    assert all(s.labels["namespace"] == "ml" and s.labels["__name__"] == "gpu_util" for s in samples)


def _query_all_pods(url: str) -> list[Sample]:
    async def main() -> list[Sample]:
        client = PrometheusClient(PrometheusConfig(url=url))
        try:
            return await client.query(ALL_PODS)
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.mark.e2e
@pytest.mark.lowest
def test_real_prometheus_post_query_for_1500_pods(real_prometheus: PrometheusServer) -> None:
    _check_all_pods(_query_all_pods(real_prometheus.url))


@pytest.mark.e2e
@pytest.mark.lowest
def test_real_prometheus_series_with_a_time_window(real_prometheus: PrometheusServer) -> None:
    async def main() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        client = PrometheusClient(PrometheusConfig(url=real_prometheus.url))
        try:
            now = time.time()
            recent = await client.series(['gpu_util{namespace="ml"}'], now - 120, now + 1)
            before = await client.series(['gpu_util{namespace="ml"}'], now - 7200, now - 3600)
            return recent, before
        finally:
            await client.aclose()

    recent, before = asyncio.run(main())
    assert len(recent) == 1500
    assert sorted(s["pod"] for s in recent) == PODS
    assert all(s["__name__"] == "gpu_util" and s["namespace"] == "ml" and s["job"] == "test" for s in recent)
    assert before == []


@pytest.mark.e2e
@pytest.mark.lowest
def test_real_prometheus_series_shapes_match_the_label_sets(real_prometheus: PrometheusServer) -> None:
    """Discovery's reduced-while-decoding answer equals reducing the full label sets."""
    async def main() -> tuple[frozenset, list[dict[str, str]]]:
        client = PrometheusClient(PrometheusConfig(url=real_prometheus.url))
        try:
            now = time.time()
            args = (['gpu_util{namespace="ml"}'], now - 120, now + 1)
            return await client.series_shapes(*args), await client.series(*args)
        finally:
            await client.aclose()

    shapes, label_sets = asyncio.run(main())
    assert shapes == distinct_shapes(label_sets)
    assert shapes == {("gpu_util", frozenset(label_sets[0]) - {"__name__"})}


def test_errors_share_a_base_class() -> None:
    assert issubclass(PrometheusUnavailable, PrometheusError)
    assert issubclass(QueryFailed, PrometheusError)


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The proxy variables unset, whatever the machine running the tests has; returns ``monkeypatch`` to set some."""
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.e2e
@pytest.mark.lowest
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_proxy_from_the_environment_is_used(real_prometheus: PrometheusServer, variable: str,
                                            no_proxy_env: pytest.MonkeyPatch) -> None:
    """As httpx's client would: a cluster-wide HTTP_PROXY reaches Prometheus through the proxy."""
    monkeypatch = no_proxy_env
    proxy = CountingProxy(real_prometheus.url)
    monkeypatch.setenv(variable, proxy.url)

    async def main() -> tuple[list[Sample], list[dict[str, str]]]:
        client = PrometheusClient(PrometheusConfig(url="http://prometheus.invalid:9090"))
        try:
            now = time.time()
            return await client.query(ALL_PODS), await client.series(['gpu_util{namespace="ml"}'], now - 120, now)
        finally:
            await client.aclose()

    try:
        samples, series = asyncio.run(main())
    finally:
        proxy.stop()
    _check_all_pods(samples)
    assert len(series) == 1500
    assert proxy.paths == {"/api/v1/query": 1, "/api/v1/series": 1}


@pytest.mark.e2e
@pytest.mark.lowest
def test_no_proxy_exempts_the_prometheus_host(real_prometheus: PrometheusServer,
                                              no_proxy_env: pytest.MonkeyPatch) -> None:
    proxy = CountingProxy(real_prometheus.url)
    no_proxy_env.setenv("HTTP_PROXY", proxy.url)
    no_proxy_env.setenv("NO_PROXY", "example.com,127.0.0.1")

    try:
        _check_all_pods(_query_all_pods(real_prometheus.url))
    finally:
        proxy.stop()
    assert proxy.paths == {}


# --- credentials as prometheus-adapter takes them (cmd/adapter/adapter.go) ----------------------------------------


def _kubeconfig(path: Path, pki: _Pki, *, ca_data: str | None = None, **user: str) -> str:
    ca = ca_data if ca_data is not None else base64.b64encode(pki.ca.read_bytes()).decode()
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test",
                      "cluster": {"server": "https://ignored.example", "certificate-authority-data": ca}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test-user"}}],
        "users": [{"name": "test-user", "user": user}]}))
    return str(path)


def _config(url: str, *, auth_config: str | None = None, auth_incluster: bool = False, ca_file: str | None = None,
            cert: str | None = None, key: str | None = None, token_file: str | None = None) -> PrometheusConfig:
    return prometheus_config(url, "POST", "3s", token_file, ca_file, cert, key, None, auth_config, auth_incluster)


def _query_with(config: PrometheusConfig) -> list[Sample]:
    async def main() -> list[Sample]:
        client = PrometheusClient(config)
        try:
            return await client.query("up")
        finally:
            await client.aclose()

    return asyncio.run(main())


# TestMakeKubeconfigHTTPClient (kubernetes-sigs/prometheus-adapter cmd/adapter/adapter_test.go): the same four
# cases, with kubeconfigs shaped like its testdata/kubeconfig (inline CA, token abcde12345) and
# testdata/kubeconfig-error (certificate-authority-data: abcde12345).
@pytest.mark.parametrize(("kubeconfig", "in_cluster", "success"), [
    ("kubeconfig", False, True),
    ("kubeconfig", True, False),
    ("kubeconfig-error", False, False),
    ("", False, True),
])
def test_make_kubeconfig_http_client(tmp_path: Path, pki: _Pki, monkeypatch: pytest.MonkeyPatch, kubeconfig: str,
                                     in_cluster: bool, success: bool) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "prometheus")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "8080")
    path = {"kubeconfig": lambda: _kubeconfig(tmp_path / "kc", pki, token="abcde12345"),
            "kubeconfig-error": lambda: _kubeconfig(tmp_path / "kc", pki, ca_data="abcde12345", token="abcde12345"),
            "": lambda: None}[kubeconfig]()
    if success:
        config = _config("https://127.0.0.1:1", auth_config=path, auth_incluster=in_cluster)
        assert (dict(config.headers).get("Authorization"), bool(config.ca_file)) == (
            ("Bearer abcde12345", True) if path else (None, False))
    else:
        with pytest.raises(UsageError if in_cluster else (UsageError, KubeConfigError)):
            _config("https://127.0.0.1:1", auth_config=path, auth_incluster=in_cluster)


# TestMakePrometheusCAClient (same file): a CA file with or without a client pair; a bad CA or certificate fails.
@pytest.mark.parametrize(("ca", "cert", "success"), [
    ("ca", "client", True), ("bad", "client", False), ("ca", "bad", False), ("ca", None, True),
])
def test_make_prometheus_ca_client(tmp_path: Path, pki: _Pki, ca: str, cert: str | None, success: bool) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    ca_file = str(pki.ca if ca == "ca" else bad)
    pair = {"client": (str(pki.client_cert), str(pki.client_key)), "bad": (str(bad), str(pki.client_key)),
            None: (None, None)}[cert]
    if success:
        config = _config("https://127.0.0.1:1", ca_file=ca_file, cert=pair[0], key=pair[1])
        assert (config.ca_file, config.client_cert_file) == (ca_file, pair[0])
    else:
        with pytest.raises(UsageError, match=r"--prometheus-(ca-file|client-tls-cert-file) .*bad\.pem: not a readable"):
            _config("https://127.0.0.1:1", ca_file=ca_file, cert=pair[0], key=pair[1])


def test_auth_config_credentials_reach_prometheus(tls_url: str, tls_server: _TlsServer, pki: _Pki,
                                                  tmp_path: Path) -> None:
    """The kubeconfig's inline CA verifies the server, its client certificate and token are presented."""
    path = _kubeconfig(tmp_path / "kc", pki, token="abcde12345",
                       **{"client-certificate-data": base64.b64encode(pki.client_cert.read_bytes()).decode(),
                          "client-key-data": base64.b64encode(pki.client_key.read_bytes()).decode()})
    assert _query_with(_config(tls_url, auth_config=path)) == [Sample({"pod": "p"}, 1700000000.0, 1.0)]
    assert (tls_server.peers, tls_server.authorizations) == (["gpu-adapter"], ["Bearer abcde12345"])


def test_auth_config_basic_auth_and_the_token_file_winning(tls_url: str, tls_server: _TlsServer, pki: _Pki,
                                                           tmp_path: Path) -> None:
    basic = _kubeconfig(tmp_path / "basic", pki, username="adapter", password="s3cret")
    _query_with(_config(tls_url, auth_config=basic))
    token = tmp_path / "token"
    token.write_text("from-the-file\n")
    bearer = _kubeconfig(tmp_path / "bearer", pki, token="from-the-kubeconfig")
    _query_with(_config(tls_url, auth_config=bearer, token_file=str(token)))
    assert tls_server.authorizations == ["Basic " + base64.b64encode(b"adapter:s3cret").decode(),
                                         "Bearer from-the-file"]


def test_auth_config_credentials_that_cannot_be_sent_are_refused_at_start(pki: _Pki, tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", pki, token="s3cr\u00e9t-token")

    with pytest.raises(UsageError, match="--prometheus-auth-config: the credentials hold") as info:
        _config("https://prometheus.test:9090", auth_config=path)
    assert "s3cr" not in str(info.value)


def test_auth_incluster_uses_the_service_account(tls_url: str, tls_server: _TlsServer, pki: _Pki, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token")
    (account / "ca.crt").write_bytes(pki.ca.read_bytes())
    monkeypatch.setattr(prometheus_auth, "SERVICE_ACCOUNT_DIR", str(account))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="not in a pod"):
        _config(tls_url, auth_incluster=True)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    _query_with(_config(tls_url, auth_incluster=True))
    assert tls_server.authorizations == ["Bearer sa-token"]


# -- kept-alive connections --------------------------------
_VECTOR_BODY = json.dumps(VECTOR_OK).encode()
_VECTOR_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(_VECTOR_BODY), _VECTOR_BODY)


def _one_shot(after: str) -> Server:
    """A server answering every query with one sample, then doing what ``after`` says: keep the connection
    (``keep``), close it (``close``), or, for ``cut``, send half the answer and close; ``hang`` leaves the first
    connection's request unanswered and answers on the later connections."""
    scripts: dict[str, Script] = {
        "keep": lambda r: (_VECTOR_ANSWER, False),
        "close": lambda r: (_VECTOR_ANSWER, True),
        "cut": lambda r: (_VECTOR_ANSWER[:len(_VECTOR_ANSWER) // 2], True),
        "hang": lambda r: (None, False) if r.connection == 1 else (_VECTOR_ANSWER, False),
    }
    return Server(scripts[after])


def _against(server: Server, queries: int, timeout_s: float = 2.0, host: str = "127.0.0.1") -> list[Any]:
    async def main() -> list[Any]:
        listening = await asyncio.start_server(server.handle, host, 0)
        port = listening.sockets[0].getsockname()[1]
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        client = PrometheusClient(PrometheusConfig(url=f"http://{netloc}", timeout_s=timeout_s))
        results: list[Any] = []
        try:
            for _ in range(queries):
                try:
                    results.append(await client.query("up"))
                except PrometheusError as exc:
                    results.append(exc)
                # every connection the server ended is closed on its side before the next query: the idle
                # pooled connection can see its end
                await wait_until_async(lambda: server.closed == server.connections - server.open_now, 5,
                                       "the server's closes done")
        finally:
            await client.aclose()
            listening.close()
        return results

    return asyncio.run(main())


def test_connections_are_kept_alive() -> None:
    server = _one_shot("keep")
    results = _against(server, 3)
    assert results == [[Sample({"pod": "p"}, 1700000000.0, 1.0)]] * 3 and server.connections == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_not_failed() -> None:
    """Prometheus (or a proxy in front) closes idle keep-alive connections: the next query opens a new one."""
    server = _one_shot("close")
    results = _against(server, 3)
    assert results == [[Sample({"pod": "p"}, 1700000000.0, 1.0)]] * 3 and server.connections == 3


def test_a_prometheus_at_an_ipv6_address_is_reached_and_named_in_brackets() -> None:
    """IPv6-only clusters give Prometheus a Service address like fd00::1: the URL brackets it, and so must Host."""
    server = _one_shot("keep")
    results = _against(server, 2, host="::1")
    assert results == [[Sample({"pod": "p"}, 1700000000.0, 1.0)]] * 2 and server.connections == 1
    host_line = re.search(rb"\r\nHost: \[::1\]:\d+\r\n", server.requests[0].head)
    assert host_line is not None, server.requests[0].head


def test_an_international_host_name_is_sent_as_idna() -> None:
    """DNS, SNI and the Host header all take the ASCII (punycode) form of a non-ASCII host name."""
    recorder = _Recorder()
    assert _query(recorder, url="http://prometheus.bücher.example:9090") == [Sample({"pod": "p"}, 1700000000.0, 1.0)]
    assert recorder.requests[0].headers["host"] == "prometheus.xn--bcher-kva.example:9090"
    assert recorder.requests[0].url.raw_host == b"prometheus.xn--bcher-kva.example"


def test_an_answer_cut_short_is_unavailable_not_a_crash() -> None:
    results = _against(_one_shot("cut"), 2)
    assert all(isinstance(r, PrometheusUnavailable) and "unreachable" in str(r) for r in results), results


def test_a_query_left_unanswered_times_out_and_the_next_one_gets_a_fresh_connection() -> None:
    server = _one_shot("hang")
    started = time.monotonic()
    results = _against(server, 2, timeout_s=0.5)
    assert isinstance(results[0], PrometheusUnavailable) and "did not answer within 0.5s" in str(results[0])
    assert results[1] == [Sample({"pod": "p"}, 1700000000.0, 1.0)] and server.connections == 2
    assert time.monotonic() - started < 10  # one 0.5 s timeout, never a wait for the unanswered query
