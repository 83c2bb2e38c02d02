"""A real Prometheus server for tests: ``loadtest.standins.prometheus`` with the test defaults, plus its fixture.

Use :class:`PrometheusServer` directly (``start()`` it, or enter it as a context manager) or the ``prometheus_factory``
fixture, pulled in with ``pytest_plugins = ["tests.support.prometheus"]``. Prometheus 2.42 (Debian 12) hands new targets
to its scrape manager only every 5 s, so the first sample appears about 5-6 s after start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from loadtest.standins import prometheus as _runtime
from loadtest.standins.prometheus import PrometheusError, Target, free_port
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.tools import require_tool
from tests.support.waiting import wait_until

__all__ = ["PrometheusError", "PrometheusServer", "Target", "free_port", "prometheus_factory", "scraping"]


class PrometheusServer(_runtime.PrometheusServer):
    """:class:`loadtest.standins.prometheus.PrometheusServer` with job ``test`` unless told otherwise."""

    def __init__(self, targets: Sequence[Target], **kw: Any) -> None:
        require_tool(kw.get("binary", "prometheus"))
        kw.setdefault("job", "test")
        kw.setdefault("tmp_prefix", "prometheus-test-")
        super().__init__(targets, **kw)


@pytest.fixture
def prometheus_factory() -> Iterator[Callable[..., PrometheusServer]]:
    """Yield ``make(targets, **kw) -> PrometheusServer``; every server made is stopped at teardown."""
    servers: list[PrometheusServer] = []

    def make(targets: Sequence[Target], **kw: Any) -> PrometheusServer:
        server = PrometheusServer(targets, **kw).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@contextmanager
def scraping(exposition: str, metric: str, **kw: Any) -> Iterator[PrometheusServer]:
    """A Prometheus scraping one endpoint that serves ``exposition`` (``honor_labels``, every second unless told
    otherwise), yielded once ``metric`` has been scraped; both stopped on leaving."""
    endpoint = MetricsEndpoint(exposition)
    kw.setdefault("scrape_interval", "1s")
    prom = PrometheusServer([endpoint.address], honor_labels=True, **kw).start()
    try:
        wait_until(lambda: prom.query(metric), 60, f"{metric} scraped")
        yield prom
    finally:
        prom.stop()
        endpoint.stop()
