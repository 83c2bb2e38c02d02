"""The custom-metrics answer encoded from kept per-object fragments is byte for byte the plain encoding.

``encode_metric_value_list`` is what the API sends; ``orjson.dumps(metric_value_list(...))`` is the document as the
wire-format tests (tests/test_adapter_shapes.py) check it. Any difference (an escape, a field order, a stale
fragment reused for another object) shows here.
"""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.api import serialise
from adapter.api.serialise import ObjectValue, ObjectValues, encode_metric_value_list, metric_value_list

texts = st.text(min_size=1, max_size=12)  # any Unicode: quotes, backslashes, control characters, non-BMP
selectors = st.none() | st.fixed_dictionaries({}, optional={
    "matchLabels": st.dictionaries(texts, texts, max_size=3),
    "matchExpressions": st.lists(st.fixed_dictionaries({"key": texts, "operator": st.sampled_from(["In", "NotIn"]),
                                                        "values": st.lists(texts, max_size=2)}), max_size=2)})
values = st.integers(-10**15, 10**15) | st.floats(allow_nan=False, allow_infinity=False, width=64)
objects = st.builds(ObjectValue, kind=st.sampled_from(["Pod", "Service", "Deployment", "Node"]) | texts,
                    api_version=st.sampled_from(["/v1", "apps/v1"]) | texts, namespace=st.none() | texts,
                    name=texts, metric=texts, timestamp=st.floats(0, 4_102_444_800), value=values,
                    selector=st.none())


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(["v1beta1", "v1beta2"]), items=st.lists(objects, max_size=6), selector=selectors)
def test_fragments_give_the_plain_encoding(version: str, items: list[ObjectValue], selector: dict | None) -> None:
    items = [item._replace(selector=selector) for item in items]  # one request: one selector for every item
    expected = orjson.dumps(metric_value_list(version, items))
    assert encode_metric_value_list(version, items) == expected
    assert encode_metric_value_list(version, items) == expected  # again, from the kept fragments
    assert json.loads(expected) == metric_value_list(version, items)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from(["v1beta1", "v1beta2"]), first=objects, names=st.lists(texts, max_size=6),
       values=st.lists(st.tuples(st.floats(0, 4_102_444_800), values), min_size=6, max_size=6), selector=selectors,
       one_time=st.booleans())
def test_columns_give_the_plain_encoding_of_their_items(version: str, first: ObjectValue, names: list[str],
                                                        values: list[tuple[float, float]], selector: dict | None,
                                                        one_time: bool) -> None:
    """The provider's answer (shared fields once, then names and samples) encodes as its items would, whether the
    samples share one timestamp (an instant query's evaluation time) or not."""
    samples = [({}, values[0][0] if one_time else timestamp, value) for timestamp, value in values[:len(names)]]
    columns = ObjectValues(first.kind, first.api_version, first.namespace, first.metric, selector, names, samples)
    items = [ObjectValue(first.kind, first.api_version, first.namespace, name, first.metric, timestamp, value,
                         selector) for name, (_, timestamp, value) in zip(names, samples, strict=True)]
    assert list(columns) == items and columns[1:] == items[1:]
    assert encode_metric_value_list(version, columns) == orjson.dumps(metric_value_list(version, items))
    assert encode_metric_value_list(version, columns) == encode_metric_value_list(version, items)


def test_a_new_value_or_selector_for_a_known_object_is_never_answered_from_an_old_fragment() -> None:
    pod = ObjectValue("Pod", "/v1", "ml", "llm-0", "queue", 1_700_000_000, 3.0)
    first = json.loads(encode_metric_value_list("v1beta2", [pod]))["items"][0]
    later = pod._replace(timestamp=1_700_000_015, value=0.25, selector={"matchLabels": {"model": "a"}})
    second = json.loads(encode_metric_value_list("v1beta2", [later]))["items"][0]
    assert (first["timestamp"], first["value"], first["metric"]["selector"]) == ("2023-11-14T22:13:20Z", "3", None)
    assert (second["timestamp"], second["value"], second["metric"]) == (
        "2023-11-14T22:13:35Z", "250m", {"name": "queue", "selector": {"matchLabels": {"model": "a"}}})


def test_the_kept_fragments_are_bounded() -> None:
    pods = [ObjectValue("Pod", "/v1", "ml", f"p-{i}", "queue", 1_700_000_000, 1.0)
            for i in range(serialise._FRAGMENTS_KEPT + 10)]
    assert encode_metric_value_list("v1beta2", pods) == orjson.dumps(metric_value_list("v1beta2", pods))
    assert sum(map(len, serialise._fragments.values())) <= serialise._FRAGMENTS_KEPT
