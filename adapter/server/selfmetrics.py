"""The adapter's own metrics, all named ``gpu_adapter_*``, in a registry of their own (never the global one).

Event metrics (requests, Prometheus queries, authentication, authorization) are prometheus_client objects the
code feeds. State that other components already keep (discovery, query cache, rules, Kubernetes caches) is
read at scrape time by one collector, so those components need not know about metrics at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from adapter.prometheus.client import PrometheusError, PrometheusUnavailable

if TYPE_CHECKING:
    from adapter.prometheus.discovery import Discovery
    from adapter.prometheus.querycache import QueryCache
    from adapter.rulesfile.source import RulesSource
    from adapter.server.certreload import ServingCertificate
    from adapter.server.inflight import RequestLimits
    from adapter.server.lifecycle import Lifecycle
    from listener.protocol import Guard

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

ROUTES = ("apis", "discovery", "custom_object", "custom_selector", "custom_namespace", "external", "health",
          "metrics", "explain", "other")
AUTHENTICATION_RESULTS = ("frontproxy", "x509", "token", "anonymous", "failed")
AUTHORIZATION_DECISIONS = ("allowed", "denied", "error")
# The families collect() fills (both have add_metric; their base class Metric does not).
Family = GaugeMetricFamily | CounterMetricFamily


class KubeCacheStats(Protocol):
    """What the Kubernetes object caches report per resource (e.g. ``pods``); read only."""

    @property
    def objects(self) -> int: ...
    @property
    def watch_restarts_total(self) -> int: ...


KubeStatsSource = Callable[[], Mapping[str, KubeCacheStats]]


class SeveralSeriesStats(Protocol):
    @property
    def totals(self) -> Mapping[tuple[str, str], int]: ...  # read only


class AdapterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Histogram(
            "gpu_adapter_request_duration_seconds", "API requests served, by route and HTTP status code.",
            ["route", "code"], registry=r)
        self.query_duration = Histogram(
            "gpu_adapter_prometheus_query_duration_seconds",
            "Instant queries sent to Prometheus (cache hits and coalesced requests excluded), by rule.",
            ["rule"], registry=r)
        self.query_errors = Counter(
            "gpu_adapter_prometheus_query_errors_total",
            "Instant queries that failed, by rule; reason unavailable (down, slow, 5xx) or rejected (bad query).",
            ["rule", "reason"], registry=r)
        self.authentications = Counter(
            "gpu_adapter_authentications_total", "Requests authenticated, by result.", ["result"], registry=r)
        self.authorizations = Counter(
            "gpu_adapter_authorizations_total", "Authorization decisions, by decision and whether it was cached.",
            ["decision", "cached"], registry=r)
        for result in AUTHENTICATION_RESULTS:
            self.authentications.labels(result)
        for decision in AUTHORIZATION_DECISIONS:
            for cached in ("true", "false"):
                self.authorizations.labels(decision, cached)
        # Children by label values, looked up once: labels() takes a lock and builds a key on every call.
        self._request_children: dict[tuple[str, int], Histogram] = {}
        self._query_children: dict[str, Histogram] = {}
        self._state = _StateCollector()
        r.register(self._state)
        ProcessCollector(registry=r)

    # -- events ---------------------------------------------------------------------------------------
    def observe_request(self, route: str, code: int, seconds: float) -> None:
        child = self._request_children.get((route, code))
        if child is None:  # routes and codes are small fixed sets
            child = self._request_children[route, code] = self.requests.labels(route, str(code))
        child.observe(seconds)

    def observe_query(self, rule: str, seconds: float, error: PrometheusError | None) -> None:
        """A ``QueryObserver`` for ``QueryCache``."""
        child = self._query_children.get(rule)
        if child is None:  # one per rule label (rules[3], gpu-presets:rules[0], ...)
            child = self._query_children[rule] = self.query_duration.labels(rule)
        child.observe(seconds)
        if error is not None:
            reason = "unavailable" if isinstance(error, PrometheusUnavailable) else "rejected"
            self.query_errors.labels(rule, reason).inc()

    # -- state read at scrape time --------------------------------------------------------------------
    def watch_discovery(self, discovery: Discovery) -> None:
        self._state.discovery = discovery

    def watch_query_cache(self, cache: QueryCache) -> None:
        self._state.cache = cache

    def watch_rules(self, rules: RulesSource) -> None:
        self._state.rules = rules

    def watch_several_series(self, several: SeveralSeriesStats) -> None:
        """``several.totals``: (rule, outcome) -> objects that got several series from one rule's query."""
        self._state.several = several

    def watch_kube(self, stats: KubeStatsSource) -> None:
        """``stats()`` is called at each scrape and returns resource name -> ``KubeCacheStats``."""
        self._state.kube = stats

    def watch_lifecycle(self, lifecycle: Lifecycle) -> None:
        """The shutdown's phase and counts (adapter.server.lifecycle)."""
        self._state.lifecycle = lifecycle

    def watch_serving_certificate(self, serving: ServingCertificate) -> None:
        self._state.serving = serving

    def watch_listener(self, guard: Guard) -> None:
        """The HTTPS listener's connections: how many in each state, and why it closed those it closed."""
        self._state.listener = guard

    def watch_requests(self, requests: RequestLimits) -> None:
        """--max-requests-inflight and --request-timeout: requests turned away and timed out."""
        self._state.requests = requests

    def exposition(self) -> bytes:
        """The text format 0.0.4 (``CONTENT_TYPE``), without prometheus_client's ``*_created`` series."""
        return generate_latest(_WithoutCreated(self.registry))


class _WithoutCreated:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


class _StateCollector:
    def __init__(self) -> None:
        self.discovery: Discovery | None = None
        self.cache: QueryCache | None = None
        self.rules: RulesSource | None = None
        self.kube: KubeStatsSource | None = None
        self.several: SeveralSeriesStats | None = None
        self.lifecycle: Lifecycle | None = None
        self.serving: ServingCertificate | None = None
        self.listener: Guard | None = None
        self.requests: RequestLimits | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(self._families().values())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        self._discovery(families)
        self._cache(families)
        self._rules(families)
        self._kube(families)
        self._lifecycle(families)
        self._serving(families)
        self._listener(families)
        if self.several is not None:
            for (rule, outcome), count in sorted(self.several.totals.items()):
                families["gpu_adapter_several_series"].add_metric([rule, outcome], count)
        return iter(families.values())

    @staticmethod
    def _families() -> dict[str, Family]:
        g, c = GaugeMetricFamily, CounterMetricFamily
        families: list[Family] = [
            g("gpu_adapter_discovery_last_duration_seconds", "Duration of the last successful series relist."),
            c("gpu_adapter_discovery_failures", "Series relists that failed (the previous catalogue was kept)."),
            g("gpu_adapter_discovery_last_success_timestamp_seconds", "When the last relist succeeded."),
            g("gpu_adapter_discovery_metrics", "Metrics in the catalogue, by API (custom, external).",
              labels=["api"]),
            c("gpu_adapter_query_cache_requests", "Instant query requests by outcome: hit (a kept result), "
              "coalesced (joined an identical query in flight), miss (sent to Prometheus).", labels=["result"]),
            g("gpu_adapter_query_cache_entries", "Query results kept for reuse."),
            g("gpu_adapter_query_cache_ttl_seconds", "How long a result is reused now: min(--query-cache-ttl, "
              "smallest scrape interval); 0 when the scrape interval is unknown."),
            c("gpu_adapter_rules_reloads", "Rules file changes seen, by result (applied, rejected).",
              labels=["result"]),
            g("gpu_adapter_rules", "Rules in force, by section (rules, externalRules).", labels=["section"]),
            g("gpu_adapter_kube_cache_objects", "Objects held in the Kubernetes cache, by resource.",
              labels=["resource"]),
            c("gpu_adapter_kube_watch_restarts", "Kubernetes watches restarted, by resource.", labels=["resource"]),
            c("gpu_adapter_several_series", "Objects for which a rule's query returned several series, by rule "
              "and outcome: agreed (one value, served), conflict (different values: no value from that rule).",
              labels=["rule", "outcome"]),
            g("gpu_adapter_shutdown_phase", "1 for the server's phase: serving, shutdown-delay (after SIGTERM: /readyz "
              "fails, requests are served with Connection: close), draining (no new requests).", labels=["phase"]),
            g("gpu_adapter_requests_in_flight", "API requests being answered (probes and /metrics not counted)."),
            c("gpu_adapter_shutdown_connection_close", "Responses that told the client to close its connection "
              "because the server is shutting down."),
            c("gpu_adapter_shutdown_rejected_requests", "Requests answered 429 Retry-After while draining "
              "(--shutdown-send-retry-after)."),
            g("gpu_adapter_serving_certificate_expiry_timestamp_seconds",
              "When the serving certificate in force expires (it is read again when its files change)."),
            c("gpu_adapter_serving_certificate_reloads", "Serving certificate file changes, by result (applied, "
              "refused: unreadable or not a matching pair, the previous one kept).", labels=["result"]),
            g("gpu_adapter_connections", "HTTPS connections by state: handshake (TLS not done yet), waiting (no "
              "request in progress: sending headers or idle), busy (a request in progress).", labels=["state"]),
            c("gpu_adapter_connections_closed", "HTTPS connections the adapter closed, by reason: handshake_timeout, "
              "header_timeout, idle_timeout, write_timeout, evicted (past --max-waiting-connections), refused_413, "
              "refused_414, refused_431, handshake_failed (a client's TLS error).", labels=["reason"]),
            c("gpu_adapter_requests_throttled", "Requests answered 429 Retry-After: 1 past --max-requests-inflight."),
            c("gpu_adapter_requests_timed_out", "Requests answered 504 past --request-timeout."),
        ]
        return {f.name: f for f in families}

    def _discovery(self, f: dict[str, Family]) -> None:
        d = self.discovery
        if d is None:
            return
        f["gpu_adapter_discovery_failures"].add_metric([], d.failures_total)
        if d.last_success is not None:
            f["gpu_adapter_discovery_last_duration_seconds"].add_metric([], d.last_duration_s)
            f["gpu_adapter_discovery_last_success_timestamp_seconds"].add_metric([], d.last_success)
        catalogue = d.catalogue
        if catalogue is not None:
            f["gpu_adapter_discovery_metrics"].add_metric(["custom"], len(catalogue.custom_metrics()))
            f["gpu_adapter_discovery_metrics"].add_metric(["external"], len(catalogue.external_metrics()))

    def _cache(self, f: dict[str, Family]) -> None:
        cache = self.cache
        if cache is None:
            return
        requests = f["gpu_adapter_query_cache_requests"]
        requests.add_metric(["hit"], cache.stats.hits)
        requests.add_metric(["coalesced"], cache.stats.coalesced)
        requests.add_metric(["miss"], cache.stats.misses)
        f["gpu_adapter_query_cache_entries"].add_metric([], len(cache))
        f["gpu_adapter_query_cache_ttl_seconds"].add_metric([], cache.effective_ttl_s)

    def _rules(self, f: dict[str, Family]) -> None:
        rules = self.rules
        if rules is None:
            return
        f["gpu_adapter_rules_reloads"].add_metric(["applied"], rules.applied_total)
        f["gpu_adapter_rules_reloads"].add_metric(["rejected"], rules.rejected_total)
        config = rules.current
        f["gpu_adapter_rules"].add_metric(["rules"], len(config.rules))
        f["gpu_adapter_rules"].add_metric(["externalRules"], len(config.external_rules))

    def _lifecycle(self, f: dict[str, Family]) -> None:
        lc = self.lifecycle
        if lc is None:
            return
        for phase in type(lc.phase):
            f["gpu_adapter_shutdown_phase"].add_metric([phase.value], 1 if phase is lc.phase else 0)
        f["gpu_adapter_requests_in_flight"].add_metric([], lc.in_flight)
        f["gpu_adapter_shutdown_connection_close"].add_metric([], lc.told_to_close_total)
        f["gpu_adapter_shutdown_rejected_requests"].add_metric([], lc.rejected_total)

    def _serving(self, f: dict[str, Family]) -> None:
        serving = self.serving
        if serving is None:
            return
        if serving.not_after is not None:
            f["gpu_adapter_serving_certificate_expiry_timestamp_seconds"].add_metric([], serving.not_after)
        f["gpu_adapter_serving_certificate_reloads"].add_metric(["applied"], serving.files.reloads_total)
        f["gpu_adapter_serving_certificate_reloads"].add_metric(["refused"], serving.files.failures_total)

    def _listener(self, f: dict[str, Family]) -> None:
        guard, requests = self.listener, self.requests
        if guard is not None:
            waiting = len(guard.room) - guard.handshaking
            for state, count in (("handshake", guard.handshaking), ("waiting", waiting),
                                 ("busy", guard.open - waiting)):
                f["gpu_adapter_connections"].add_metric([state], max(0, count))
            for reason, count in sorted(guard.closed.items()):
                f["gpu_adapter_connections_closed"].add_metric([reason], count)
        if requests is not None:
            f["gpu_adapter_requests_throttled"].add_metric([], requests.rejected_total)
            f["gpu_adapter_requests_timed_out"].add_metric([], requests.timed_out_total)

    def _kube(self, f: dict[str, Family]) -> None:
        if self.kube is None:
            return
        for resource, stats in sorted(self.kube().items()):
            f["gpu_adapter_kube_cache_objects"].add_metric([resource], stats.objects)
            f["gpu_adapter_kube_watch_restarts"].add_metric([resource], stats.watch_restarts_total)
