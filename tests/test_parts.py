"""The adapter's parts (adapter/server/parts.py): each event reaches its reaction, and the parts start and stop in
their order. Stand-ins record what reaches them; the table under test is the one ``gpu-adapter serve`` connects.

Each stand-in is made from its real part with ``create_autospec(spec_set=True)``: a method or attribute the part
does not have, or a call its signature refuses, fails the test (a part's method renamed without parts.py following).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any
from unittest.mock import create_autospec

import pytest

from adapter.auth.stack import AuthStack
from adapter.keda.server import KedaScalerServer
from adapter.kube.resolver import KubeResolver
from adapter.kube.restmapper import ResourceDiscovery
from adapter.prometheus.client import PrometheusClient, PrometheusConfig
from adapter.prometheus.discovery import Discovery
from adapter.prometheus.querycache import QueryCache
from adapter.provider.engine import Engine
from adapter.rulesfile.source import RulesSource
from adapter.server.certreload import ServingCertificate
from adapter.server.lifecycle import Lifecycle
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


def standin(real: Any, **members: Any) -> Any:
    """A stand-in with the members and signatures of ``real`` (a part's class, or an instance where the members
    checked include attributes set in ``__init__``). ``members``: what a method does (its side effect; an async
    method's stand-in is awaitable) or an attribute's value. Naming a member ``real`` lacks fails here; calling one
    fails where the code under test does."""
    mock = create_autospec(real, spec_set=True, instance=isinstance(real, type))
    for name, value in members.items():
        member = getattr(mock, name)
        if callable(member) and callable(value):
            member.side_effect = value
        else:
            setattr(mock, name, value)
    return mock


def parts(log: list[str]) -> tuple[AdapterState, dict[str, Part]]:
    p = {name: Part(name, log) for name in ("discovery", "rules", "cache", "auth", "serving", "resources", "kube",
                                             "scaler", "client", "lifecycle")}
    prometheus = PrometheusClient(PrometheusConfig("http://prometheus.invalid"))
    discovery = standin(Discovery(prometheus, lambda: None),  # scrape_intervals is set in __init__
                        after_relist=p["discovery"].listen, request_relist=p["discovery"].record("relist"),
                        scrape_intervals=[15.0], start=p["discovery"].record("start"),
                        stop=p["discovery"].record("stop"))
    rules = standin(RulesSource, on_change=p["rules"].listen, use_table=p["rules"].record("use_table"),
                    start=p["rules"].record("start"), stop=p["rules"].record("stop"),
                    current=SimpleNamespace(external_rules=(), resource_rules=None))
    cache = standin(QueryCache, refresh_freshness=p["cache"].record("refresh_freshness"))
    auth = standin(AuthStack, attach_tls=p["auth"].record("attach_tls"), start=p["auth"].record("start"),
                   stop=p["auth"].record("stop"))
    serving = standin(ServingCertificate, configure=p["serving"].listen)
    resources = standin(ResourceDiscovery, on_change=p["resources"].listen, start=p["resources"].record("start"),
                        stop=p["resources"].record("stop"))
    scaler = standin(KedaScalerServer, drain=p["scaler"].record("drain"), start=p["scaler"].record("start"),
                     stop=p["scaler"].record("stop"))
    lifecycle = standin(Lifecycle, on_drain=p["lifecycle"].listen)
    client = standin(PrometheusClient, aclose=p["client"].record("aclose"))
    kube = standin(KubeResolver, close=p["kube"].record("close"), caches={})
    engine = Engine(prometheus, lambda: None)
    state = AdapterState(client, discovery, engine, serve_external=lambda: False, lifecycle=lifecycle, rules=rules,
                         cache=cache, auth=auth, serving=serving, resources=resources, kube=kube, scaler=scaler)
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
