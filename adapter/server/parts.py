"""The adapter's parts as one object: what triggers what between them, what the self-metrics read, and the order in
which they start and stop. ``gpu-adapter serve`` builds the parts from its flags (adapter/cli/serve.py); the app
(adapter/server/app.py) serves requests over them and runs ``start``/``stop`` in its lifespan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapter.prometheus.client import PrometheusClient
from adapter.prometheus.discovery import Discovery
from adapter.provider.custom import CustomMetrics
from adapter.provider.engine import Engine
from adapter.provider.external import ExternalMetrics
from adapter.provider.resource import ResourceMetrics
from adapter.server.lifecycle import Lifecycle
from adapter.server.selfmetrics import AdapterMetrics

if TYPE_CHECKING:
    from adapter.auth.stack import AuthStack
    from adapter.keda.server import KedaScalerServer
    from adapter.kube.resolver import KubeResolver
    from adapter.kube.restmapper import ResourceDiscovery
    from adapter.prometheus.querycache import QueryCache
    from adapter.rulesfile.source import RulesSource
    from adapter.server.certreload import ServingCertificate


@dataclass(frozen=True)
class Trigger:
    """When ``event`` happens (``subscribe`` registers for it), ``reaction`` runs."""

    event: str
    subscribe: Callable[[Callable[..., Any]], None]
    reaction: Callable[..., Any]


@dataclass
class AdapterState:
    """The parts; the optional ones are there only with the flags (or the Kubernetes API) that need them."""

    client: PrometheusClient
    discovery: Discovery
    engine: Engine
    serve_external: Callable[[], bool]
    metrics: AdapterMetrics = field(default_factory=AdapterMetrics)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)  # where the server is between start and exit
    rules: RulesSource | None = None  # watched for changes while serving
    cache: QueryCache | None = None  # the engine's queries, when they are shared and reused
    auth: AuthStack | None = None  # None: --disable-auth
    serving: ServingCertificate | None = None  # the listening certificate, followed on disk
    resources: ResourceDiscovery | None = None  # the Kubernetes API's resources, read again every interval
    kube: KubeResolver | None = None  # the Kubernetes API's watch caches, for label selectors
    scaler: KedaScalerServer | None = None  # --keda-scaler-port

    def __post_init__(self) -> None:
        self.custom = CustomMetrics(self.engine)
        self.external = ExternalMetrics(self.engine)
        self.resource = ResourceMetrics(self.engine, lambda: self.rules.current.resource_rules if self.rules else None)

    def triggers(self) -> list[Trigger]:
        """What triggers what while the adapter serves."""
        rows = []
        if self.rules is not None:
            rows.append(Trigger("the rules changed (file reloaded, or parsed again with new resources)",
                                self.rules.on_change, lambda _rules: self.discovery.request_relist()))
        if self.cache is not None:
            cache = self.cache
            rows.append(Trigger("a series relist finished (it read Prometheus' scrape intervals)",
                                self.discovery.after_relist,
                                lambda: cache.refresh_freshness(self.discovery.scrape_intervals)))
        if self.resources is not None and self.rules is not None:
            rows.append(Trigger("the Kubernetes API's resources changed (a CRD installed or removed)",
                                self.resources.on_change, self.rules.use_table))
        if self.serving is not None and self.auth is not None:
            rows.append(Trigger("the serving certificate was loaded or reloaded (a new TLS context)",
                                self.serving.configure, self.auth.attach_tls))
        if self.scaler is not None:
            rows.append(Trigger("draining began (SIGTERM, after the shutdown delay)",
                                self.lifecycle.on_drain, self.scaler.drain))
        return rows

    def connect(self) -> None:
        """Subscribe every reaction to its event, and show the self-metrics the parts whose state they read."""
        for trigger in self.triggers():
            trigger.subscribe(trigger.reaction)
        m = self.metrics
        m.watch_discovery(self.discovery)
        m.watch_lifecycle(self.lifecycle)
        m.watch_several_series(self.engine.series_conflicts)
        if self.cache is not None:
            m.watch_query_cache(self.cache)
        if self.rules is not None:
            m.watch_rules(self.rules)
        if self.serving is not None:
            m.watch_serving_certificate(self.serving)
        if self.kube is not None:
            kube = self.kube
            m.watch_kube(lambda: {str(gr): c for gr, c in kube.caches.items()})

    async def start(self, *, run_discovery: bool = True) -> None:
        """Before the first request: relisting, the rules file's watch, the front-proxy CA refresh, the API's
        resources, the KEDA scaler."""
        if run_discovery:
            self.discovery.start()
        if self.rules is not None:
            self.rules.start()
        if self.auth is not None:
            await self.auth.start()
        if self.resources is not None:
            self.resources.start()
        if self.scaler is not None:
            self.scaler.start()

    async def stop(self) -> None:
        """After the last request, in the reverse order; then the connections and the watch caches."""
        if self.scaler is not None:
            await self.scaler.stop()
        if self.resources is not None:
            await self.resources.stop()
        if self.auth is not None:
            await self.auth.stop()
        if self.rules is not None:
            await self.rules.stop()
        await self.discovery.stop()
        await self.client.aclose()
        if self.kube is not None:
            self.kube.close()
