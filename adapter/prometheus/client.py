"""The one place that talks to Prometheus: instant queries, series lists and targets, over ``aiohttp``.

One client per adapter: its connection pool keeps connections to Prometheus alive between the HPAs' requests. The
environment's HTTP(S)_PROXY and NO_PROXY apply. Every failure is a ``PrometheusError``: ``PrometheusUnavailable``
(down, slow, 5xx: the API answers 503 and the HPA keeps its scale) or ``QueryFailed`` (Prometheus refused the query:
a bad rule). Neither ever becomes a value.

Why aiohttp and not httpx: every HPA request waits for a query, and with an HPA fleet the adapter's CPU is mostly
these queries. Measured side by side (docs/performance.md, bench/fleet.py), httpx's client spent about four times
aiohttp's CPU per query here: it writes a request's head and body in two system calls and polls the pooled
connection's socket before each reuse.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import ssl
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import aiohttp
import orjson
from yarl import URL

from adapter.aiosession import LoopSession
from clikit.durations import DurationError, parse_prometheus_duration

request_log = logging.getLogger("adapter.promql")  # every request's URL, with the rendered PromQL, at --v 6

SeriesShape = tuple[str, frozenset[str]]
"""A series reduced to its metric name and the names of its other labels."""

MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""An answer larger than this is refused rather than held in memory (a series list of ~1 million series)."""


class PrometheusError(Exception):
    """Prometheus could not answer: down, slow, or returned an error. Never turned into a value."""


class PrometheusUnavailable(PrometheusError):
    """Unreachable, timed out, or 5xx: the API answers 503 and the HPA keeps its current scale."""


class QueryFailed(PrometheusError):
    """Prometheus rejected the query (bad_data, execution error): a server-side bug or a bad rule."""


class Sample(NamedTuple):
    """One series' value; immutable."""

    labels: Mapping[str, str]
    timestamp: float
    value: float

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value)


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


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token
_PRINTABLE_VALUE = re.compile(r"[\t\x20-\x7e]*")


def header_name_ok(name: str) -> bool:
    """A header name as configured (``--prometheus-header``): an RFC 9110 token."""
    return _HEADER_NAME.fullmatch(name) is not None


def header_value_ok(value: str) -> bool:
    """A configured header value or token this project sends: printable ASCII, spaces and tabs (no line break, no
    control character, nothing that needs an encoding)."""
    return _PRINTABLE_VALUE.fullmatch(value) is not None


# Queries and series lists ask for an uncompressed answer. Prometheus gzips every API answer whose client accepts it
# (aiohttp asks by default), at a CPU cost on both sides that a cluster network does not repay.
_UNCOMPRESSED = {"Accept-Encoding": "identity"}
_FORM = ("Content-Type", "application/x-www-form-urlencoded")
_MAX_CONNECTIONS = 64


class BearerTokenFile:
    """``Authorization: Bearer`` from a file re-read whenever it changes (projected service-account tokens
    rotate); a file that cannot be read or sent makes the request ``PrometheusUnavailable``."""

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


def tls_context(config: PrometheusConfig) -> ssl.SSLContext:
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


def env_proxy(url: URL) -> str | None:
    """The proxy for ``url`` from HTTP_PROXY/HTTPS_PROXY/ALL_PROXY (either case), unless NO_PROXY exempts it: what
    curl and httpx do (aiohttp's own ``trust_env`` ignores ALL_PROXY)."""
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    # proxy_bypass is proxy_bypass_environment (NO_PROXY) on Linux, and on macOS and Windows whenever an environment
    # proxy is set, as here (typeshed does not declare proxy_bypass_environment itself).
    if not proxy or urllib.request.proxy_bypass(url.host or ""):
        return None
    return proxy


class PrometheusClient:
    """``resolver`` decides where host names resolve (tests point every host at a local server)."""

    def __init__(self, config: PrometheusConfig, resolver: aiohttp.abc.AbstractResolver | None = None) -> None:
        self.config = config
        pairs = config.headers.items() if isinstance(config.headers, Mapping) else config.headers
        self._headers = list(pairs)
        for name, value in self._headers:  # the CLI says so first (prometheus_headers); the value is never shown
            if not header_name_ok(name) or not header_value_ok(value):
                raise ValueError(f"Prometheus header {name!r}: expected a token name and a printable ASCII value")
        # An Authorization header given with --prometheus-header wins over the token file, as upstream's bearer
        # round tripper leaves a request that already has one alone.
        header_authorizes = any(name.lower() == "authorization" for name, _ in self._headers)
        self._token = (BearerTokenFile(config.bearer_token_file)
                       if config.bearer_token_file and not header_authorizes else None)
        url = URL(config.url)
        self._base = str(url.with_query(None).with_fragment(None)).rstrip("/")
        self._base_params = list(url.query.items())  # e.g. VictoriaMetrics' extra_label=..., on every call
        self._proxy = env_proxy(url)
        self._http = LoopSession(limit=_MAX_CONNECTIONS, tls=tls_context(config) if url.scheme == "https" else None,
                                 resolver=resolver)
        self.queries_total = 0

    async def aclose(self) -> None:
        await self._http.aclose()

    async def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """Instant query; a vector becomes one Sample per series, a scalar one Sample without labels."""
        params: dict[str, Any] = {"query": promql, "timeout": self._server_timeout()}
        if at is not None:
            params["time"] = f"{at:.3f}"
        self.queries_total += 1
        data = await self._call("/api/v1/query", params, headers=_UNCOMPRESSED)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "vector":
            return [Sample(item["metric"], float(item["value"][0]), float(item["value"][1])) for item in result]
        if kind == "scalar":
            return [Sample({}, float(result[0]), float(result[1]))]
        raise QueryFailed(f"query returned a {kind}, expected an instant vector: {promql}")

    async def series(self, matchers: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        params = {"match[]": list(matchers), "start": f"{start:.3f}", "end": f"{end:.3f}"}
        return await self._call("/api/v1/series", params)

    async def series_shapes(self, matchers: Sequence[str], start: float, end: float) -> frozenset[SeriesShape]:
        """``series`` reduced to the distinct (metric name, names of the other labels) while the answer is decoded,
        off the event loop: no dict per series is kept (a relist over 100,000 series would otherwise hold them all
        at once; bench/discovery.py)."""
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
            try:
                found.add(parse_prometheus_duration(str(target.get("scrapeInterval", ""))))
            except DurationError:
                continue
        return sorted(found)

    def _server_timeout(self) -> str:
        # Prometheus gives up a little before we do, so a slow query ends as its error, not our timeout.
        # Prometheus durations take no decimals: whole milliseconds.
        return f"{max(int(self.config.timeout_s * 900), 100)}ms"

    def _request_headers(self, extra: Mapping[str, str] | None) -> list[tuple[str, str]]:
        headers = [*self._headers, *(extra or {}).items()]
        if self._token is not None:
            headers.append(("Authorization", f"Bearer {self._token.token()}"))
        return headers

    async def _call(self, path: str, params: Mapping[str, Any], method: str | None = None,
                    headers: Mapping[str, str] | None = None,
                    object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        method = method or self.config.method
        fields = _pairs(params)
        request: dict[str, Any] = {"headers": self._request_headers(headers), "proxy": self._proxy}
        if method == "POST":
            # The form encoded here, by yarl's quoter (the one aiohttp's URLs use; the standard library's quotes
            # byte by byte in Python, about a millisecond for a 1,500-pod query): handed a list of fields, aiohttp
            # would build a FormData, and a multipart writer with a random boundary it does not use, per query.
            request |= {"params": self._base_params, "data": URL.build(query=fields).raw_query_string.encode(),
                        "headers": [*request["headers"], _FORM]}
        else:
            request["params"] = [*self._base_params, *fields]
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("Prometheus request: %s %s", method, URL(self._base + path).with_query(request["params"]))
        try:
            async with asyncio.timeout(self.config.timeout_s):  # connecting, waiting and reading, all together
                status, body = await self._exchange(method, self._base + path, request)
        except TimeoutError:
            raise PrometheusUnavailable(f"Prometheus did not answer within {self.config.timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise PrometheusUnavailable(f"Prometheus unreachable: {exc.__class__.__name__}: {exc}") from None
        if object_hook is None:
            return _decode(status, body)
        return await asyncio.to_thread(_decode, status, body, object_hook)  # megabytes

    async def _exchange(self, method: str, url: str, request: dict[str, Any]) -> tuple[int, bytes | bytearray]:
        """One request; sent again once when the connection fails before any answer (the server may close an idle
        connection just as it is reused; a query changes nothing, so sending it twice is safe)."""
        for attempt in (1, 2):
            try:
                async with self._http.get().request(method, url, **request) as response:
                    return response.status, await _read_capped(response)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


async def _read_capped(response: aiohttp.ClientResponse) -> bytes | bytearray:
    """The answer's body, grown in place: a relist's series list is tens of megabytes, and a list of chunks joined
    at the end held it twice at its peak (bench/discovery.py, bench/fleet.py's start-up RSS); growing may still copy
    it once while the buffer moves."""
    body: bytes | bytearray = b""
    async for chunk in response.content.iter_chunked(1 << 16):
        if len(body) + len(chunk) > MAX_ANSWER_BYTES:
            raise PrometheusUnavailable(f"Prometheus' answer is larger than {MAX_ANSWER_BYTES // 2**20} MiB")
        if not body:
            body = chunk  # most answers are one chunk: no copy
        else:
            if isinstance(body, bytes):
                body = bytearray(body)
            body += chunk
    return body


def _decode(status: int, raw: bytes | bytearray, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
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


def _pairs(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Form or query fields; a list value repeats its key (``match[]``)."""
    return [(key, str(v)) for key, value in params.items()
            for v in (value if isinstance(value, list | tuple) else [value])]
