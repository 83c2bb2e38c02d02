"""The one place that talks to Prometheus: instant queries, series lists and targets over one httpx transport.

Requests go straight to an httpx transport rather than through ``httpx.AsyncClient``: the client's layers (URL
merging, cookies, auth flow, redirects, event hooks) cost about 0.3 ms of CPU per query and none of them applies to
Prometheus' API (bench/adapter_load.py, README "Performance"). The transport is ``adapter.http1.Http1Transport``
(keep-alive HTTP/1.1 on asyncio, parsed by httptools), spoken to in bytes (``Http1Transport.exchange``: no
``httpx.Request`` or ``Response`` per query, ~100 us less CPU), or httpx's own, given ``httpx.Request``s, when a
proxy is configured: what the client would take from the environment, HTTP(S)_PROXY, ALL_PROXY and NO_PROXY, is
applied here. Both ways send the same request. Answers are decoded with orjson.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import httpx
import orjson

from adapter.http1 import Answer, Http1Transport, header_name_ok, header_value_ok, origin_of, request_bytes

SeriesShape = tuple[str, frozenset[str]]
"""A series reduced to its metric name and the names of its other labels."""


class PrometheusError(Exception):
    """Prometheus could not answer: down, slow, or returned an error. Never turned into a value."""


class PrometheusUnavailable(PrometheusError):
    """Unreachable, timed out, or 5xx: the API answers 503 and the HPA keeps its current scale."""


class QueryFailed(PrometheusError):
    """Prometheus rejected the query (bad_data, execution error): a server-side bug or a bad rule."""


class Sample(NamedTuple):
    """One series' value; immutable. A NamedTuple rather than a frozen dataclass, whose ``__init__`` costs about
    1 us more per sample: a 1,500-pod answer builds 1,500 of them."""

    labels: Mapping[str, str]
    timestamp: float
    value: float

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value)


_new = tuple.__new__


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    method: Literal["GET", "POST"] = "POST"
    timeout_s: float = 5.0
    bearer_token_file: str | None = None
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    insecure_skip_verify: bool = False
    # Sent with every request; a list of pairs may repeat a name (``--prometheus-header`` given twice).
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = field(default_factory=dict)


# Queries and series lists ask for an uncompressed answer. Prometheus gzips every API answer whose client accepts it
# (httpx asks by default), at a CPU cost on both sides that a cluster network does not repay: on loopback a small
# query's p99 went from 6.8 ms to 2.8 ms, and a relist of 100,000 series from 1.3 s to 1.1 s (bench/).
_UNCOMPRESSED = {"Accept-Encoding": "identity"}
_MAX_CONNECTIONS, _MAX_IDLE_CONNECTIONS = 64, 32


class _TokenFile:
    """A bearer token file re-read whenever it changes (projected service-account tokens rotate)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def token(self) -> str:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise PrometheusUnavailable(f"cannot read bearer token file {self.path}: {exc.strerror}") from None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as fh:
                    token = fh.read().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise PrometheusUnavailable(f"cannot read bearer token file {self.path}: {exc}") from None
            if not header_value_ok(token):  # the token itself is never shown
                raise PrometheusUnavailable(f"bearer token file {self.path}: the token holds a line break, a control "
                                            "or a non-ASCII character")
            self._token, self._stamp = token, stamp
        return self._token


def _tls(config: PrometheusConfig) -> ssl.SSLContext:
    if config.insecure_skip_verify:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=config.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.client_cert_file:  # mTLS also when verification is skipped
        context.load_cert_chain(config.client_cert_file, config.client_key_file)
    return context


def env_proxy(url: httpx.URL) -> str | None:
    """The proxy for ``url`` from HTTP_PROXY/HTTPS_PROXY/ALL_PROXY (either case), unless NO_PROXY exempts it."""
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(url.host, proxies):
        return None
    return proxy


class PrometheusClient:
    def __init__(self, config: PrometheusConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        token = _TokenFile(config.bearer_token_file) if config.bearer_token_file else None
        url = httpx.URL(config.url)
        self._base = str(url.copy_with(query=None, fragment=None)).rstrip("/")
        self._base_params = list(url.params.multi_items())  # e.g. VictoriaMetrics' extra_label=..., on every call
        if transport is None:
            proxy = env_proxy(httpx.URL(self._base))
            if proxy:
                transport = httpx.AsyncHTTPTransport(verify=_tls(config), proxy=proxy, limits=httpx.Limits(
                    max_connections=_MAX_CONNECTIONS, max_keepalive_connections=_MAX_IDLE_CONNECTIONS))
            else:
                transport = Http1Transport(_tls(config), max_connections=_MAX_CONNECTIONS,
                                           max_keepalive_connections=_MAX_IDLE_CONNECTIONS)
        self._transport = transport
        # Our own transport is spoken to in bytes: no httpx.Request or Response per query (Http1Transport.exchange).
        self._http1 = transport if isinstance(transport, Http1Transport) else None
        base = httpx.URL(self._base)
        self._origin, self._host = origin_of(base), base.netloc
        pairs = config.headers.items() if isinstance(config.headers, Mapping) else config.headers
        self._headers = [(name, value) for name, value in pairs]
        for name, value in self._headers:  # the CLI says so first (prometheus_headers); the value is never shown
            if not header_name_ok(name) or not header_value_ok(value):
                raise ValueError(f"Prometheus header {name!r}: expected a token name and a printable ASCII value")
        # An Authorization header given with --prometheus-header wins over the token file, as upstream's bearer
        # round tripper leaves a request that already has one alone.
        header_authorizes = any(name.lower() == "authorization" for name, _ in self._headers)
        # The token file whose token goes with each request (re-read when it rotates); None when there is none to send.
        self._token = None if header_authorizes else token
        # No per-operation timeouts for httpcore (each one arms a cancel scope per read and write): every call runs
        # under one asyncio.timeout of --prometheus-timeout, which covers connecting, waiting and reading.
        self._urls: dict[str, httpx.URL] = {}  # per API path, with the URL's own parameters: parsed once
        self._query_forms: dict[str, bytes] = {}  # encoded POST bodies of recent queries (HPAs repeat theirs)
        self._heads: dict[tuple[str, int, tuple[tuple[str, str], ...]], bytes] = {}  # query POST heads, by length
        self.queries_total = 0

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Instant query; a vector becomes one Sample per series, a scalar one Sample without labels."""
        params: dict[str, Any] = {"query": promql, "timeout": self._server_timeout()}
        if at is not None:
            params["time"] = f"{at:.3f}"
        self.queries_total += 1
        form = None
        if at is None and self.config.method == "POST":
            form = self._query_forms.get(promql)
            if form is None:
                if len(self._query_forms) >= _FORMS_KEPT:
                    self._query_forms.clear()
                form = self._query_forms[promql] = _form(params)
        data = await self._call("/api/v1/query", params, headers=_UNCOMPRESSED, form=form)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "vector":  # tuple.__new__: half the time of calling the NamedTuple class, per series
            return [_new(Sample, (item["metric"], float(item["value"][0]), float(item["value"][1])))
                    for item in result]
        if kind == "scalar":
            return [Sample({}, float(result[0]), float(result[1]))]
        raise QueryFailed(f"query returned a {kind}, expected an instant vector: {promql}")

    async def series(self, matchers: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        params = {"match[]": list(matchers), "start": f"{start:.3f}", "end": f"{end:.3f}"}
        return await self._call("/api/v1/series", params)

    async def series_shapes(self, matchers: Sequence[str], start: float, end: float) -> frozenset[SeriesShape]:
        """``series`` reduced to the distinct (metric name, names of the other labels) while the answer is decoded,
        off the event loop. No dict per series is kept: with ``series``, where every answer was decoded whole before
        being reduced, a relist over 100,000 series took the adapter to 270-340 MB RSS (bench/discovery.py)."""
        params = {"match[]": list(matchers), "start": f"{start:.3f}", "end": f"{end:.3f}"}
        shared: dict[SeriesShape, SeriesShape] = {}

        def label_set(obj: dict[str, Any]) -> Any:
            # json object_hook: a label set (it has __name__) becomes its shape, one object per distinct shape, and
            # the dict is dropped at once; anything else (the envelope, an error) stays as it is.
            name = obj.get("__name__")
            if not isinstance(name, str) or not name:
                return obj
            del obj["__name__"]
            shape = (name, frozenset(obj))
            return shared.setdefault(shape, shape)

        data = await self._call("/api/v1/series", params, headers=_UNCOMPRESSED, object_hook=label_set)
        return frozenset(item for item in data if isinstance(item, tuple))

    async def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``/api/v1/targets`` answers GET only, whatever ``method`` says)."""
        data = await self._call("/api/v1/targets", {"state": "active"}, method="GET")
        targets = data.get("activeTargets") if isinstance(data, dict) else None
        if not isinstance(targets, list):
            raise PrometheusUnavailable("Prometheus answered /api/v1/targets without activeTargets")
        return targets

    async def scrape_intervals(self) -> list[float]:
        """The distinct scrape intervals of the active targets, in seconds, smallest first (may be empty)."""
        found = set()
        for target in await self.targets():
            seconds = parse_prometheus_duration(str(target.get("scrapeInterval", "")))
            if seconds is not None:
                found.add(seconds)
        return sorted(found)

    def _server_timeout(self) -> str:
        # Prometheus gives up a little before we do, so a slow query ends as its error, not our timeout.
        # Prometheus durations take no decimals: whole milliseconds.
        return f"{max(int(self.config.timeout_s * 900), 100)}ms"

    async def _call(self, path: str, params: Mapping[str, Any], method: str | None = None,
                    headers: Mapping[str, str] | None = None,
                    object_hook: Callable[[dict[str, Any]], Any] | None = None, form: bytes | None = None) -> Any:
        method = method or self.config.method
        try:
            async with asyncio.timeout(self.config.timeout_s):
                if self._http1 is not None:
                    answer = await self._http1.exchange(self._origin, self._wire(method, path, params, headers, form))
                    status, body = answer.status, _content(answer)
                else:
                    response = await self._transport.handle_async_request(
                        self._request(method, path, params, headers, form))
                    try:
                        body = await response.aread()
                    finally:
                        await response.aclose()
                    status = response.status_code
        except (TimeoutError, httpx.TimeoutException):
            raise PrometheusUnavailable(f"Prometheus did not answer within {self.config.timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise PrometheusUnavailable(f"Prometheus unreachable: {exc.__class__.__name__}: {exc}") from None
        if object_hook is None:
            return self._decode(status, body)
        return await asyncio.to_thread(self._decode, status, body, object_hook)  # megabytes

    def _url(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self._base + path, params=self._base_params)
        return url

    def _header_pairs(self, extra: Mapping[str, str] | None) -> list[tuple[str, str]]:
        headers = [*self._headers, *(extra or {}).items()]
        if self._token is not None:
            headers.append(("Authorization", f"Bearer {self._token.token()}"))
        return headers

    def _request(self, method: str, path: str, params: Mapping[str, Any],
                 extra_headers: Mapping[str, str] | None, form: bytes | None = None) -> httpx.Request:
        """The request for a transport other than ours (httpx's, behind a proxy)."""
        headers = self._header_pairs(extra_headers)
        if method == "POST":
            headers.append(("Content-Type", "application/x-www-form-urlencoded"))
            return httpx.Request("POST", self._url(path), headers=headers,
                                 content=form if form is not None else _form(params))
        fields = [*self._base_params, *_pairs(params)] if self._base_params else params
        return httpx.Request("GET", self._base + path, params=fields, headers=headers)

    def _wire(self, method: str, path: str, params: Mapping[str, Any],
              extra_headers: Mapping[str, str] | None, form: bytes | None = None) -> bytes:
        """The same request as ``_request``, as the bytes ``Http1Transport.exchange`` sends."""
        if form is None or method != "POST" or self._token is not None:
            return self._build_wire(method, path, params, extra_headers, form)
        # A query's POST without a token to send: its head depends on the body's length only, so it is built once per
        # length; the body is the form the client keeps anyway (a 1,500-pod query's is ~30 KB: not kept twice).
        key = (path, len(form), tuple(extra_headers.items()) if extra_headers else ())
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) >= _FORMS_KEPT:
                self._heads.clear()
            whole = self._build_wire(method, path, params, extra_headers, form)
            head = self._heads[key] = whole[:len(whole) - len(form)]
        return head + form

    def _build_wire(self, method: str, path: str, params: Mapping[str, Any],
                    extra_headers: Mapping[str, str] | None, form: bytes | None) -> bytes:
        # Every header was checked before it got here (configured ones at construction, the token when read),
        # and httpx quotes the target: request_bytes has nothing left to refuse.
        headers = [(b"Host", self._host)]
        headers += [(name.encode(), value.encode()) for name, value in self._header_pairs(extra_headers)]
        if method == "POST":
            body = form if form is not None else _form(params)
            headers += [(b"Content-Type", b"application/x-www-form-urlencoded"), (b"Content-Length", b"%d" % len(body))]
            return request_bytes(b"POST", self._url(path).raw_path, headers, body)
        fields = [*self._base_params, *_pairs(params)] if self._base_params else params
        return request_bytes(b"GET", httpx.URL(self._base + path, params=fields).raw_path, headers, b"")

    @staticmethod
    def _decode(status: int, raw: bytes, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        try:
            # object_hook: the standard library's decoder, the one that can reduce each object while decoding.
            body = json.loads(raw, object_hook=object_hook) if object_hook else orjson.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("status") == "success":
            return body.get("data")
        detail = body.get("error") if isinstance(body, dict) else raw[:200].decode("utf-8", "replace")
        if status in (400, 422):
            raise QueryFailed(f"Prometheus rejected the query: {detail}")
        raise PrometheusUnavailable(f"Prometheus answered {status}: {detail}")


_FORMS_KEPT = 256


def _content(answer: Answer) -> bytes:
    """The answer's body; decoded by httpx if the server encoded it although nothing but identity was asked for."""
    for name, _ in answer.headers:
        if name.lower() == b"content-encoding":
            return httpx.Response(answer.status, headers=answer.headers, content=answer.body).read()
    return answer.body


def _form(params: Mapping[str, Any]) -> bytes:
    return urllib.parse.urlencode(params, doseq=True).encode()


def _pairs(params: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(key, v) for key, value in params.items() for v in (value if isinstance(value, list | tuple) else [value])]


_PROM_DURATION = re.compile(r"^(?:\d+(?:ms|y|w|d|h|m|s))+$")
_PROM_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_PROM_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_prometheus_duration(text: str) -> float | None:
    """Prometheus' duration syntax (``15s``, ``1m30s``, ``500ms``) in seconds; ``None`` if it is not one."""
    if not _PROM_DURATION.match(text):
        return None
    return sum(int(n) * _PROM_UNIT[u] for n, u in _PROM_PART.findall(text))
