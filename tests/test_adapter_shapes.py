"""Golden checks: our JSON equals the wire examples of the project's shared spec
(../shared/spec/k8s-metrics-api.md §1.5, §1.6, §1.8, §2.2)."""

from __future__ import annotations

import calendar
import time

import pytest

from adapter.api.paths import MetricPath, parse_custom_path, parse_external_path
from adapter.api.serialise import (
    ExternalValue,
    ObjectValue,
    api_resource_list,
    external_metric_value_list,
    metric_value_list,
)
from adapter.api.status import metric_not_found

pytestmark = pytest.mark.unit

T = calendar.timegm(time.strptime("2025-05-04T12:00:05Z", "%Y-%m-%dT%H:%M:%SZ")) + 0.731


def test_v1beta1_pods_list_matches_the_spec_example() -> None:
    items = [ObjectValue("Pod", "/v1", "ml", "llm-worker-6d9f8-abcde", "DCGM_FI_DEV_GPU_UTIL", T, 72.5),
             ObjectValue("Pod", "/v1", "ml", "llm-worker-6d9f8-fghij", "DCGM_FI_DEV_GPU_UTIL", T, 41.0)]
    assert metric_value_list("v1beta1", items) == {
        "kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta1", "metadata": {},
        "items": [
            {"describedObject": {"kind": "Pod", "namespace": "ml", "name": "llm-worker-6d9f8-abcde",
                                 "apiVersion": "/v1"},
             "metricName": "DCGM_FI_DEV_GPU_UTIL", "timestamp": "2025-05-04T12:00:05Z", "value": "72500m",
             "selector": None},
            {"describedObject": {"kind": "Pod", "namespace": "ml", "name": "llm-worker-6d9f8-fghij",
                                 "apiVersion": "/v1"},
             "metricName": "DCGM_FI_DEV_GPU_UTIL", "timestamp": "2025-05-04T12:00:05Z", "value": "41",
             "selector": None}]}


def test_v1beta2_item_with_selector_matches_the_spec_example() -> None:
    item = ObjectValue("Pod", "/v1", "ml", "llm-worker-6d9f8-abcde", "DCGM_FI_DEV_GPU_UTIL", T, 72.5,
                       {"matchLabels": {"gpu": "0"}})
    assert metric_value_list("v1beta2", [item])["items"] == [
        {"describedObject": {"kind": "Pod", "namespace": "ml", "name": "llm-worker-6d9f8-abcde", "apiVersion": "/v1"},
         "metric": {"name": "DCGM_FI_DEV_GPU_UTIL", "selector": {"matchLabels": {"gpu": "0"}}},
         "timestamp": "2025-05-04T12:00:05Z", "value": "72500m"}]


def test_namespace_object_has_no_namespace_field() -> None:
    item = ObjectValue("Namespace", "/v1", None, "ml", "inference_queue_depth", T, 1_500_000)
    assert metric_value_list("v1beta1", [item])["items"] == [
        {"describedObject": {"kind": "Namespace", "name": "ml", "apiVersion": "/v1"},
         "metricName": "inference_queue_depth", "timestamp": "2025-05-04T12:00:05Z", "value": "1500k",
         "selector": None}]


def test_discovery_and_external_shapes() -> None:
    assert api_resource_list("custom.metrics.k8s.io", "v1beta1", [("pods/DCGM_FI_DEV_GPU_UTIL", True)]) == {
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "custom.metrics.k8s.io/v1beta1",
        "resources": [{"name": "pods/DCGM_FI_DEV_GPU_UTIL", "singularName": "", "namespaced": True,
                       "kind": "MetricValueList", "verbs": ["get"]}]}
    body = external_metric_value_list([ExternalValue("sqs_messages_visible", {"queue": "render-jobs"}, T, 340)])
    assert body == {"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1",
                    "metadata": {}, "items": [{"metricName": "sqs_messages_visible",
                                               "metricLabels": {"queue": "render-jobs"},
                                               "timestamp": "2025-05-04T12:00:05Z", "value": "340"}]}


def test_not_found_status_matches_the_spec_example() -> None:
    assert metric_not_found("DCGM_FI_DEV_GPU_UTIL", "pods").body() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server could not find the metric DCGM_FI_DEV_GPU_UTIL for pods", "reason": "NotFound",
        "code": 404}


def test_path_forms() -> None:
    assert parse_custom_path("") is None
    assert parse_custom_path("nodes/ip-10-0-1-7/DCGM_FI_DEV_GPU_UTIL") == MetricPath(
        None, "nodes", "ip-10-0-1-7", "DCGM_FI_DEV_GPU_UTIL")
    assert parse_custom_path("namespaces/ml/Pods/%2A/m") == MetricPath("ml", "pods", "*", "m")
    assert parse_custom_path("namespaces/ml/deployments.apps/web/m") == MetricPath("ml", "deployments.apps", "web", "m")
    assert parse_custom_path("namespaces/ml/metrics/queue_depth") == MetricPath(None, "namespaces", "ml", "queue_depth")
    assert parse_external_path("namespaces/ml/queue_depth") == ("ml", "queue_depth")
    for bad in ("namespaces/default/foo", "pods/x", "a/b/c/d", "namespaces/ml/pods/x/y/z"):
        try:
            parse_custom_path(bad)
        except Exception as exc:
            assert getattr(exc, "code", None) == 400 and str(exc) == "invalid request path"
        else:
            raise AssertionError(f"{bad} accepted")
