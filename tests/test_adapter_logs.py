"""Structured logs: --logging-format text|json, --v levels, and one access line per API request at --v 2."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapter.prometheus.client import PrometheusClient, PrometheusConfig
from adapter.server.logs import configure_logging
from tests.support.adapter_process import AdapterProcess
from tests.support.handler_server import HandlerServer
from tests.support.metrics_endpoint import MetricsEndpoint
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.unit

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Configure logging into a buffer, and put the process-wide logging state back afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    names = ("adapter", "adapter.access", "adapter.promql")
    levels = {name: logging.getLogger(name).level for name in names}
    buffer = io.StringIO()
    yield buffer
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def lines(buffer: io.StringIO) -> list[str]:
    return [line for line in buffer.getvalue().splitlines() if line]


def test_json_lines_carry_ts_level_logger_msg_and_extras(stream: io.StringIO) -> None:
    configure_logging(0, "json", stream)
    logging.getLogger("adapter.test").info("relisted %d metrics", 3, extra={"duration_ms": 12.5, "rule": "rules[0]"})
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logging.getLogger("adapter.test").exception("it failed")
    first, second = (json.loads(line) for line in lines(stream))  # two records, two lines
    assert TS.match(first["ts"])
    assert first == {"ts": first["ts"], "level": "info", "logger": "adapter.test", "msg": "relisted 3 metrics",
                     "duration_ms": 12.5, "rule": "rules[0]"}
    assert second["level"] == "error" and "ValueError: boom" in second["exc"]


def test_text_lines_are_readable_key_value(stream: io.StringIO) -> None:
    configure_logging(0, "text", stream)
    logging.getLogger("adapter.test").warning("slow", extra={"path": "/apis", "user": "a b", "code": 200,
                                                             "none": None})
    (line,) = lines(stream)
    ts, rest = line.split(" ", 1)
    assert TS.match(ts)
    assert rest == 'WARNING adapter.test: slow path=/apis user="a b" code=200 none=null'


@pytest.mark.parametrize(("v", "access", "debug", "promql"), [
    (0, False, False, False), (2, True, False, False), (4, True, True, False), (6, True, True, True)])
def test_verbosity_levels(stream: io.StringIO, v: int, access: bool, debug: bool, promql: bool) -> None:
    configure_logging(v, "json", stream)
    assert logging.getLogger("adapter.access").isEnabledFor(logging.INFO) is access
    assert logging.getLogger("adapter.discovery").isEnabledFor(logging.DEBUG) is debug
    assert logging.getLogger("adapter.promql").isEnabledFor(logging.DEBUG) is promql
    assert logging.getLogger("adapter.discovery").isEnabledFor(logging.INFO)
    assert not logging.getLogger("aiohttp.client").isEnabledFor(logging.DEBUG)  # no third-party debug flood


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    endpoint = MetricsEndpoint('DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="ml",pod="infer-0"} 40\n')
    server = PrometheusServer([endpoint.address], honor_labels=True).start()
    try:
        server.wait_for('DCGM_FI_DEV_GPU_UTIL{pod="infer-0"}', timeout=30)
        yield server
    finally:
        server.stop()
        endpoint.stop()


POD = "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ml/pods/infer-0/DCGM_FI_DEV_GPU_UTIL"


@pytest.mark.e2e
def test_json_logs_of_the_real_adapter_with_access_lines(prom: PrometheusServer, tmp_path: Path) -> None:
    adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), ["--logging-format", "json", "--v", "2"])
    try:
        assert adapter.get(POD).status_code == 200
        assert adapter.get(POD.replace("infer-0", "nobody")).status_code == 404
    finally:
        output = adapter.stop()
    records = [json.loads(line) for line in output.splitlines() if line.strip()]  # every line is one object
    assert records and all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    assert all(TS.match(r["ts"]) for r in records)
    access = [r for r in records if r["logger"] == "adapter.access"]
    by_path = {(r["path"], r["code"]): r for r in access}
    ok = by_path[(POD, 200)]
    assert ok["method"] == "GET" and ok["route"] == "custom_object" and ok["user"] is None
    assert isinstance(ok["duration_ms"], float) and ok["duration_ms"] >= 0
    assert by_path[(POD.replace("infer-0", "nobody"), 404)]["route"] == "custom_object"
    assert any(r["logger"] == "adapter.discovery" and r["msg"].startswith("discovered") for r in records)


@pytest.mark.e2e
def test_no_access_lines_below_v2(prom: PrometheusServer, tmp_path: Path) -> None:
    adapter = AdapterProcess(prom.url, str(tmp_path / "certs"), ["--logging-format", "json"])
    try:
        assert adapter.get(POD).status_code == 200
    finally:
        output = adapter.stop()
    records = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert not [r for r in records if r["logger"] == "adapter.access"]
    assert any(r["logger"] == "adapter.discovery" for r in records)  # but info lines are there


@pytest.mark.e2e
def test_a_bad_logging_format_is_a_one_line_usage_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "adapter", "serve", "--prometheus-url", "http://127.0.0.1:1",
                          "--cert-dir", str(tmp_path), "--logging-format", "yaml"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == "gpu-adapter: error: --logging-format 'yaml': expected text or json"


@pytest.mark.parametrize(("v", "logged"), [(4, False), (6, True)])
def test_every_prometheus_request_url_is_logged_at_v6(stream: io.StringIO, v: int, logged: bool) -> None:
    """``--v 6`` promises every Prometheus request URL: each request the client sends, one line."""
    configure_logging(v, "json", stream)
    answer = {"status": "success", "data": {"resultType": "vector", "result": []}}

    async def respond(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer)

    async def query() -> None:
        async with HandlerServer(respond) as server:
            client = PrometheusClient(PrometheusConfig(url="http://prometheus.test:9090/prefix"),
                                      resolver=server.resolver)
            try:
                await client.query('up{job="dcgm"}')
            finally:
                await client.aclose()

    asyncio.run(query())
    url = "http://prometheus.test:9090/prefix/api/v1/query"
    urls = [r["msg"] for r in map(json.loads, lines(stream)) if url in r["msg"]]
    assert bool(urls) is logged, lines(stream)
