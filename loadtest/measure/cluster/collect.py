"""Records from the API objects the report saw, each perhaps several times (pure): a list now, and what ``--watch``
saw before (:mod:`.journal`). Every version of an object adds what it knew: a pod's earliest binding, start and
readiness over its versions (a later version may have lost them: a restart, a graceful deletion), every occurrence of
an event, when a watch saw an object go."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loadtest.measure.cluster.objects import (
    Event,
    Node,
    NodeClaim,
    Pod,
    Records,
    event_of,
    hpa_of,
    node_of,
    nodeclaim_of,
    pod_of,
)

__all__ = ["RESOURCES", "Collector"]

RESOURCES = ("pods", "events", "nodes", "nodeclaims", "hpas", "deployments")


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass
class Collector:
    """Add objects as they were seen (``deleted``: when a watch saw one go), then ``records()``."""

    karpenter: bool | None = False
    _pods: dict[str, Pod] = field(default_factory=dict)
    _events: dict[str, Event] = field(default_factory=dict)
    _nodes: dict[str, Node] = field(default_factory=dict)
    _claims: dict[str, NodeClaim] = field(default_factory=dict)
    _hpas: dict[str, Any] = field(default_factory=dict)
    deployments: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def add(self, resource: str, obj: Mapping[str, Any], deleted: float | None = None,
            seen: float | None = None) -> None:
        """``seen``: when a watch received this version (a node's GPUs turning allocatable are dated by it)."""
        meta = obj.get("metadata") or {}
        key = str(meta.get("uid") or meta.get("name") or "")
        if resource == "pods":
            self._pods[key] = self._merge_pod(self._pods.get(key), pod_of(obj, deleted))
        elif resource == "events":
            event = event_of(obj)
            if event is not None:
                self._events[key or event.uid] = self._merge_event(self._events.get(key or event.uid), event)
        elif resource == "nodes":
            node = node_of(obj, deleted)
            old = self._nodes.get(key)
            turned = seen if old is not None and not old.allocatable_gpus and node.allocatable_gpus else None
            self._nodes[key] = node if old is None else replace(
                node, ready=_earliest(old.ready, node.ready), deleted=_earliest(old.deleted, node.deleted),
                gpus_at=old.gpus_at if old.gpus_at is not None else turned)
        elif resource == "nodeclaims":
            claim = nodeclaim_of(obj, deleted)
            old_claim = self._claims.get(key)
            self._claims[key] = claim if old_claim is None else replace(
                claim, node=claim.node or old_claim.node, launched=_earliest(old_claim.launched, claim.launched),
                registered=_earliest(old_claim.registered, claim.registered),
                initialized=_earliest(old_claim.initialized, claim.initialized),
                deleted=_earliest(old_claim.deleted, claim.deleted))
        elif resource == "hpas":
            self._hpas[key] = hpa_of(obj)
        elif resource == "deployments":
            self.deployments[str(meta.get("name", ""))] = obj

    @staticmethod
    def _merge_pod(old: Pod | None, new: Pod) -> Pod:
        if old is None:
            return new
        return replace(new, node=new.node or old.node, scheduled=_earliest(old.scheduled, new.scheduled),
                       started=_earliest(old.started, new.started), ready=_earliest(old.ready, new.ready),
                       deleted=_earliest(old.deleted, new.deleted),
                       ready_since=_earliest(old.ready, new.ready) or new.ready_since or old.ready_since)

    @staticmethod
    def _merge_event(old: Event | None, new: Event) -> Event:
        if old is None:
            return new
        return replace(new, times=tuple(sorted(set(old.times) | set(new.times))), count=max(old.count, new.count))

    def records(self) -> Records:
        return Records(tuple(self._pods.values()), tuple(self._events.values()), tuple(self._nodes.values()),
                       tuple(self._claims.values()), tuple(self._hpas.values()), self.karpenter)
