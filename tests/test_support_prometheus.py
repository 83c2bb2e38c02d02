"""The real-Prometheus test helper scrapes a loopback exporter and cleans up after itself."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.metrics_endpoint import MetricsEndpoint

if TYPE_CHECKING:
    from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.e2e

# Registered as a plugin (not imported at module level) so pytest can rewrite its asserts without warning.

METRICS_BODY = '# TYPE test_metric gauge\ntest_metric{a="b"} 42\n'


@pytest.fixture
def exporter() -> Iterator[str]:
    """Serve METRICS_BODY on a loopback port; yield its ``host:port``."""
    endpoint = MetricsEndpoint(METRICS_BODY)
    yield endpoint.address
    endpoint.stop()


def _process_gone(pid: int) -> bool:
    try:
        import psutil
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return not psutil.pid_exists(pid)


def test_scrapes_exporter_and_stops_cleanly(
    exporter: str, prometheus_factory: Callable[..., PrometheusServer]
) -> None:
    from tests.support.prometheus import PrometheusError

    prom = prometheus_factory([(exporter, {"env": "test"})], job="unit")
    result = prom.wait_for("test_metric", timeout=10)

    assert len(result) == 1
    sample = result[0]
    assert sample["metric"]["a"] == "b"
    assert sample["metric"]["job"] == "unit"
    assert sample["metric"]["env"] == "test"
    assert float(sample["value"][1]) == 42.0

    [target] = prom.targets()
    assert target["health"] == "up"
    assert target["scrapeUrl"] == f"http://{exporter}/metrics"

    with pytest.raises(PrometheusError, match="bad_data"):
        prom.query("test_metric{")

    pid, tmpdir = prom.pid, prom.tmpdir
    prom.stop()
    assert prom.process.returncode is not None
    assert _process_gone(pid)
    assert not tmpdir.exists()
    prom.stop()  # idempotent


def test_context_manager_and_startup_failure() -> None:
    from tests.support.prometheus import PrometheusError, PrometheusServer, free_port

    with PrometheusServer([f"127.0.0.1:{free_port()}"]) as prom:
        assert prom.query("vector(1)")[0]["value"][1] == "1"
        pid = prom.pid
    assert _process_gone(pid)

    with pytest.raises(PrometheusError, match="exited with code"):
        PrometheusServer([], extra_args=["--no-such-flag"]).start()


def test_constructing_starts_nothing() -> None:
    from tests.support.prometheus import PrometheusError, PrometheusServer

    server = PrometheusServer([], extra_args=["--no-such-flag"])  # would fail at once if it started
    with pytest.raises(PrometheusError, match="not started"):
        server.process  # noqa: B018
    assert server.config["scrape_configs"][0]["job_name"] == "test"
    server.stop()  # nothing to stop

