"""The adapter's parts (adapter/server/parts.py): each event reaches its reaction, and the parts start and stop in
their order. Stand-ins record what reaches them; the table under test is the one ``gpu-adapter serve`` connects."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from adapter.prometheus.client import PrometheusClient, PrometheusConfig
from adapter.provider.engine import Engine
from adapter.server.parts import AdapterState

pytestmark = pytest.mark.unit


class Part:
    """Records calls into ``log``; ``subscribe``-style methods keep their listener for the test to fire."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log, self.listeners = name, log, []

    def listen(self, listener: Any) -> None:
        self.listeners.append(listener)

    def fire(self, *args: Any) -> Any:
        return [listener(*args) for listener in self.listeners]

    def record(self, what: str) -> Any:
        def call(*args: Any) -> None:
            self.log.append(f"{self.name}.{what}{args if args else ''}")
        return call

    def record_async(self, what: str) -> Any:
        async def call(*args: Any) -> None:
            self.log.append(f"{self.name}.{what}{args if args else ''}")
        return call


def parts(log: list[str]) -> tuple[AdapterState, dict[str, Part]]:
    p = {name: Part(name, log) for name in ("discovery", "rules", "cache", "auth", "serving", "resources", "kube",
                                             "scaler", "client", "lifecycle")}
    discovery = SimpleNamespace(after_relist=p["discovery"].listen, request_relist=p["discovery"].record("relist"),
                                scrape_intervals=[15.0], start=p["discovery"].record("start"),
                                stop=p["discovery"].record_async("stop"))
    rules = SimpleNamespace(on_change=p["rules"].listen, use_table=p["rules"].record("use_table"),
                            start=p["rules"].record("start"), stop=p["rules"].record_async("stop"),
                            current=SimpleNamespace(external_rules=(), resource_rules=None))
    cache = SimpleNamespace(refresh_freshness=p["cache"].record_async("refresh_freshness"))
    auth = SimpleNamespace(attach_tls=p["auth"].record("attach_tls"), start=p["auth"].record_async("start"),
                           stop=p["auth"].record_async("stop"))
    serving = SimpleNamespace(configure=p["serving"].listen)
    resources = SimpleNamespace(on_change=p["resources"].listen, start=p["resources"].record("start"),
                                stop=p["resources"].record_async("stop"))
    scaler = SimpleNamespace(drain=p["scaler"].record_async("drain"), start=p["scaler"].record("start"),
                             stop=p["scaler"].record_async("stop"))
    lifecycle = SimpleNamespace(on_drain=p["lifecycle"].listen)
    client = SimpleNamespace(aclose=p["client"].record_async("aclose"))
    kube = SimpleNamespace(close=p["kube"].record("close"), caches={})
    engine = Engine(PrometheusClient(PrometheusConfig("http://prometheus.invalid")), lambda: None)
    state = AdapterState(client, discovery, engine, serve_external=lambda: False,  # type: ignore[arg-type]
                         lifecycle=lifecycle, rules=rules, cache=cache, auth=auth,  # type: ignore[arg-type]
                         serving=serving, resources=resources, kube=kube, scaler=scaler)  # type: ignore[arg-type]
    return state, p


def test_every_event_reaches_its_reaction() -> None:
    log: list[str] = []
    state, p = parts(log)
    state.connect()

    p["rules"].fire("new rules")
    assert log[-1] == "discovery.relist", "a rules change asks for a relist"
    asyncio.run(*p["discovery"].fire())
    assert log[-1] == "cache.refresh_freshness([15.0],)", "a relist gives the query cache its scrape intervals"
    p["resources"].fire("table")
    assert log[-1] == "rules.use_table('table',)", "new API resources parse the rules again"
    p["serving"].fire("tls context")
    assert log[-1] == "auth.attach_tls('tls context',)", "a new serving context gets the client CAs"
    asyncio.run(*p["lifecycle"].fire(10.0))
    assert log[-1] == "scaler.drain(10.0,)", "the drain reaches the KEDA scaler"
    assert len(state.triggers()) == 5


def test_optional_parts_bring_their_triggers_only_when_present() -> None:
    log: list[str] = []
    state, _ = parts(log)
    state.auth = state.resources = state.scaler = None
    assert [t.event.split(" (")[0] for t in state.triggers()] == ["the rules changed", "a series relist finished"]


def test_parts_start_in_order_and_stop_in_reverse() -> None:
    log: list[str] = []
    state, _ = parts(log)

    async def run() -> None:
        await state.start()
        await state.stop()

    asyncio.run(run())
    assert log == ["discovery.start", "rules.start", "auth.start", "resources.start", "scaler.start",
                   "scaler.stop", "resources.stop", "auth.stop", "rules.stop", "discovery.stop", "client.aclose",
                   "kube.close"]
