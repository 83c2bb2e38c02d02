"""MetadataStore's equality index: ``names()`` must give what a brute-force scan of a plain dict model gives, after
any sequence of LISTs and watch events, for any selector; and ``labels_of()`` the model's labels."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.kube.object_store import MetadataStore
from adapter.rules.selectors import Requirement, matches, parse_selector

pytestmark = pytest.mark.unit

Model = dict[str, dict[str, dict[str, str]]]  # namespace ("" for cluster-scoped) -> name -> labels

NAMESPACES = ("a", "b", None)
NAMES = ("p0", "p1", "p2", "p3", "p4")
KEYS = ("app", "tier", "v")
VALUES = ("x", "y", "", "1", "2")


def obj(namespace: str | None, name: str, **labels: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"metadata": metadata}


def sel(text: str) -> tuple[Requirement, ...]:
    return parse_selector(text)


# -- the model ---------------------------------------------------------------------------------------------------

def model_apply(model: Model, event_type: str, o: dict[str, Any]) -> None:
    meta = o["metadata"]
    objects = model.setdefault(meta.get("namespace") or "", {})
    if event_type == "DELETED":
        objects.pop(meta["name"], None)
    elif event_type in ("ADDED", "MODIFIED"):
        objects[meta["name"]] = dict(meta["labels"])


def model_names(model: Model, namespace: str | None, selector: tuple[Requirement, ...]) -> list[str]:
    objects = model.get(namespace or "", {})
    return sorted(name for name, labels in objects.items() if matches(selector, labels))


def expected_index(model: Model) -> dict[tuple[str, str, str], list[str]]:
    """Each bucket sorted: ``names()`` answers a one-requirement selector with the bucket as it is."""
    index: dict[tuple[str, str, str], list[str]] = {}
    for namespace, objects in model.items():
        for name, labels in objects.items():
            for key, value in labels.items():
                index.setdefault((namespace, key, value), []).append(name)
    return {key: sorted(names) for key, names in index.items()}


# -- strategies --------------------------------------------------------------------------------------------------

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
objects_st = st.builds(lambda ns, name, labels: obj(ns, name, **labels),
                       st.sampled_from(NAMESPACES), st.sampled_from(NAMES), labels_st)
operation_st = st.one_of(
    st.tuples(st.just("replace"), st.lists(objects_st, max_size=8)),
    st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]), objects_st),
)


@st.composite
def requirement_st(draw: st.DrawFn) -> Requirement:
    key = draw(st.sampled_from(KEYS))
    operator = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"]))
    if operator in ("exists", "!"):
        return Requirement(key, operator)
    if operator in ("in", "notin"):
        values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True))
        return Requirement(key, operator, tuple(sorted(values)))
    return Requirement(key, operator, (draw(st.sampled_from(("1", "2") if operator in ("gt", "lt") else VALUES)),))


# Any order, not only parse_selector's key order: the indexed requirement may stand anywhere.
selector_st = st.lists(requirement_st(), max_size=3).map(tuple)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(operation_st, max_size=25), selectors=st.lists(selector_st, min_size=1, max_size=8))
def test_names_equal_a_brute_force_scan_after_any_operations(
        operations: list[tuple[str, Any]], selectors: list[tuple[Requirement, ...]]) -> None:
    store, model = MetadataStore(), {}
    for kind, payload in operations:
        if kind == "replace":
            store.replace(payload)
            model = {}
            for o in payload:
                model_apply(model, "ADDED", o)
        else:
            store.apply(kind, payload)
            model_apply(model, kind, payload)
        model = {ns: objects for ns, objects in model.items() if objects}
        assert len(store) == sum(len(objects) for objects in model.values())
        for selector in selectors:
            for namespace in (*NAMESPACES, "", "elsewhere"):
                assert store.names(namespace, selector) == model_names(model, namespace, selector), (namespace,
                                                                                                     selector)
        for namespace in (*NAMESPACES, "elsewhere"):  # an answer's labels, with a name the store never held
            held = model.get(namespace or "", {})
            assert store.labels_of(namespace, [*NAMES, "absent"]) == held, namespace
    # Internals, for what names() alone cannot see: no stale entries, no empty buckets left behind.
    assert store._index == expected_index(model)


# -- explicit cases ----------------------------------------------------------------------------------------------

def test_relabel_moves_an_object_between_selectors() -> None:
    store = MetadataStore()
    store.replace([obj("ml", "llm-0", app="llm", tier="web"), obj("ml", "llm-1", app="llm")])
    store.apply("MODIFIED", obj("ml", "llm-0", app="embed", tier="web"))
    assert store.names("ml", sel("app=llm")) == ["llm-1"]
    assert store.names("ml", sel("app==embed")) == ["llm-0"]
    assert store.names("ml", sel("app=llm,tier=web")) == []
    assert store.names("ml", sel("tier=web,app=embed")) == ["llm-0"]
    store.apply("ADDED", obj("ml", "llm-0", app="llm"))  # ADDED for a known name is an update
    assert store.names("ml", sel("app=llm")) == ["llm-0", "llm-1"]
    assert store.names("ml", sel("app=embed")) == []
    assert store.names("ml", sel("tier=web")) == []
    assert len(store) == 2


def test_delete_removes_an_object_from_every_bucket() -> None:
    store = MetadataStore()
    store.apply("ADDED", obj("ml", "llm-0", app="llm", tier="web"))
    store.apply("ADDED", obj("ml", "llm-1", app="llm"))
    store.apply("DELETED", obj("ml", "llm-0"))  # a DELETED event's labels need not match the stored ones
    assert store.names("ml", sel("app=llm")) == ["llm-1"]
    assert store.names("ml", sel("tier=web")) == []
    store.apply("DELETED", obj("ml", "llm-1", app="llm"))
    assert store.names("ml") == []
    assert len(store) == 0
    assert store._index == {} and store._by_namespace == {}
    store.apply("ADDED", obj("ml", "llm-0", app="embed"))  # back, with other labels: the old ones must not return
    assert store.names("ml", sel("app=llm")) == []
    assert store.names("ml", sel("app=embed")) == ["llm-0"]


def test_replace_drops_objects_absent_from_the_new_list() -> None:
    store = MetadataStore()
    store.replace([obj("ml", "llm-0", app="llm"), obj("ml", "llm-1", app="llm"), obj("web", "w-0", app="llm")])
    store.replace([obj("ml", "llm-1", app="llm"), obj("ml", "llm-2", app="embed")])
    assert store.names("ml", sel("app=llm")) == ["llm-1"]
    assert store.names("ml", sel("app=embed")) == ["llm-2"]
    assert store.names("web", sel("app=llm")) == []
    assert store.names("ml", sel("app in (llm,embed)")) == ["llm-1", "llm-2"]
    assert len(store) == 2


def test_cluster_scoped_objects_live_in_the_empty_namespace() -> None:
    store = MetadataStore()
    store.replace([obj(None, "node-a", pool="gpu"), obj(None, "node-b", pool="cpu"), obj("ml", "p", pool="gpu")])
    assert store.names(None, sel("pool=gpu")) == ["node-a"]
    assert store.names("", sel("pool=gpu")) == ["node-a"]
    assert store.names("ml", sel("pool=gpu")) == ["p"]
    store.apply("MODIFIED", obj(None, "node-b", pool="gpu"))
    assert store.names(None, sel("pool=gpu")) == ["node-a", "node-b"]
    assert store.names(None, sel("pool!=gpu")) == []


def test_non_equality_selectors_still_scan() -> None:
    store = MetadataStore()
    store.replace([obj("ml", "a", app="llm"), obj("ml", "b", app="embed"), obj("ml", "c")])
    assert store.names("ml", sel("app!=llm")) == ["b", "c"]
    assert store.names("ml", sel("app notin (llm)")) == ["b", "c"]
    assert store.names("ml", sel("!app")) == ["c"]
    assert store.names("ml", sel("app")) == ["a", "b"]
    assert store.names("ml", sel("app=")) == []
    assert store.names("ml") == ["a", "b", "c"]


def test_objects_with_the_same_labels_share_one_label_map() -> None:
    """A ReplicaSet's pods carry one label set: the store keeps one map for them, from a LIST and from events,
    and a relabelled object gets a map of its own without changing the others'."""
    store = MetadataStore()
    store.replace([obj("a", "p0", app="x", tier="1"), obj("a", "p1", tier="1", app="x"), obj("b", "p2", app="x")])
    shared = store.labels("a", "p0")
    assert store.labels("a", "p1") is shared and store.labels("b", "p2") is not shared
    store.apply("ADDED", obj("a", "p3", app="x", tier="1"))
    assert store.labels("a", "p3") is shared
    store.apply("MODIFIED", obj("a", "p1", app="y", tier="1"))
    assert store.labels("a", "p1") == {"app": "y", "tier": "1"} and shared == {"app": "x", "tier": "1"}
    assert store.names("a", sel("app=x")) == ["p0", "p3"] and store.names("a", sel("app=y")) == ["p1"]
