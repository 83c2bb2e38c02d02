"""The KEDA scaler's pure parts: trigger metadata, the translation to provider requests and KEDA's messages, and the
KEDA-side model the end-to-end tests use (``tests/support/keda.py``), each checked against kedacore/keda's own test
tables (commit 8b4f083ca), the file named per case."""

from __future__ import annotations

import math

import grpc
import pytest

from adapter.api.paths import MetricPath
from adapter.api.status import ApiError
from adapter.keda import wire
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.metadata import KEYS, MetadataError, Trigger, parse_metadata
from tests.support import keda

pytestmark = pytest.mark.unit

OURS = {"metric": "DCGM_FI_DEV_GPU_UTIL", "targetValue": "60", "resource": "pods", "labelSelector": "app=vllm"}

# ------------------------------------------------------------------------------------- metadata, as KEDA sends it

# pkg/scalers/external_scaler_test.go, testExternalScalerMetadata: KEDA forwards the trigger's whole metadata map,
# its own keys included, and does not read keys it does not know (test1, test2, insecureSkipVerify).
UPSTREAM_METADATA = [
    ({}, "metric"),  # upstream: an error (no scalerAddress); here: no metric
    ({"scalerAddress": "myservice", "test1": "7", "test2": "SAMPLE_CREDS", "enableTLS": "true",
      "insecureSkipVerify": "true"}, "insecureSkipVerify"),  # upstream: fine; here: keys we do not serve are errors
    ({"test1": "1", "test2": "SAMPLE_CREDS"}, "test1"),
]


@pytest.mark.parametrize(("upstream", "key"), UPSTREAM_METADATA)
def test_upstream_metadata_tables(upstream: dict[str, str], key: str) -> None:
    with pytest.raises(MetadataError) as caught:
        parse_metadata({**upstream, **(OURS if upstream else {})})
    assert caught.value.key == key and str(caught.value).startswith(f"scalerMetadata.{key}: ")


def test_keda_own_keys_are_ignored() -> None:
    keda_keys = {"scalerAddress": "gpu-autoscaler-keda.gpu-system.svc:9443", "enableTLS": "true",
                 "unsafeSsl": "false"}
    assert parse_metadata({**keda_keys, **OURS}) == parse_metadata(OURS)


@pytest.mark.parametrize(("metadata", "expected"), [
    (OURS, Trigger("DCGM_FI_DEV_GPU_UTIL", 60.0, 0.0, "pods", None, "app=vllm", "", "sum")),
    ({**OURS, "resource": "po", "activationThreshold": "5.5", "aggregation": "avg"},
     Trigger("DCGM_FI_DEV_GPU_UTIL", 60.0, 5.5, "pods", None, "app=vllm", "", "avg")),
    ({"metric": "vllm:num_requests_waiting", "targetValue": "5", "resource": "Deployment.apps", "name": "vllm"},
     Trigger("vllm:num_requests_waiting", 5.0, 0.0, "deployments.apps", "vllm", "", "", "sum")),
    ({"metric": "llm_d_epp_flow_control_queue_size", "targetValue": "4", "activationThreshold": "-1",
      "metricSelector": "inference_pool=vllm"},
     Trigger("llm_d_epp_flow_control_queue_size", 4.0, -1.0, None, None, "", "inference_pool=vllm", "sum")),
    ({"metric": "llm_d_epp_flow_control_queue_size", "targetValue": "4",
      "resource": "inferencepools.inference.networking.k8s.io", "name": "vllm"},
     Trigger("llm_d_epp_flow_control_queue_size", 4.0, 0.0, "inferencepools.inference.networking.k8s.io", "vllm",
             "", "", "sum")),
    ({"metric": "llm_d_epp_flow_control_queue_size", "targetValue": "4", "resource": "namespaces"},
     Trigger("llm_d_epp_flow_control_queue_size", 4.0, 0.0, "namespaces", None, "", "", "sum")),
    ({"metric": "vllm:kv_cache_usage_perc", "targetValue": "0.8", "resource": "pods", "labelSelector": "app=vllm",
      "aggregation": "max"}, Trigger("vllm:kv_cache_usage_perc", 0.8, 0.0, "pods", None, "app=vllm", "", "max")),
    ({**OURS, "zeroWhenNoneSelected": "true"},
     Trigger("DCGM_FI_DEV_GPU_UTIL", 60.0, 0.0, "pods", None, "app=vllm", "", "sum", True)),
    # <key>FromEnv, as KEDA forwards it after resolving the variable (parseExternalScalerMetadata)
    ({"metricFromEnv": "DCGM_FI_DEV_GPU_UTIL", "targetValueFromEnv": "70", "resource": "pods",
      "labelSelector": "app=vllm"}, Trigger("DCGM_FI_DEV_GPU_UTIL", 70.0, 0.0, "pods", None, "app=vllm", "", "sum")),
])
def test_good_metadata(metadata: dict[str, str], expected: Trigger) -> None:
    assert parse_metadata(metadata) == expected


@pytest.mark.parametrize(("metadata", "key", "words"), [
    ({**OURS, "targetValue": "1e400"}, "targetValue", "expected a number"),
    ({**OURS, "targetValue": "-3"}, "targetValue", "greater than 0"),
    ({**OURS, "targetValue": "800m"}, "targetValue", "expected a number"),
    ({**OURS, "activationThreshold": "inf"}, "activationThreshold", "expected a number"),
    ({**OURS, "query": "sum(up)"}, "query", "not PromQL"),
    ({**OURS, "metricType": "Value"}, "metricType", "field of the trigger"),
    ({**OURS, "namespace": "other"}, "namespace", "always the ScaledObject's"),
    ({**OURS, "resource": "namespaces"}, "labelSelector", "the ScaledObject's own"),
    ({**OURS, "name": "Not_A_Name", "labelSelector": ""}, "name", "not a Kubernetes object name"),
    ({**OURS, "metric": "up{job=\"x\"}"}, "metric", "not a metric name"),
    ({**OURS, "metricSelector": "a in (b"}, "metricSelector", "invalid label selector"),
    ({**OURS, "zeroWhenNoneSelected": "yes"}, "zeroWhenNoneSelected", "expected true or false"),
    ({**OURS, "labelSelector": "", "name": "vllm-0", "zeroWhenNoneSelected": "true"}, "zeroWhenNoneSelected",
     "only with labelSelector"),
])
def test_bad_metadata_names_the_key(metadata: dict[str, str], key: str, words: str) -> None:
    with pytest.raises(MetadataError) as caught:
        parse_metadata(metadata)
    assert caught.value.key == key and words in str(caught.value), str(caught.value)


def test_every_key_is_documented() -> None:
    from pathlib import Path

    guide = (Path(__file__).parents[1] / "docs" / "keda.md").read_text()
    for key in KEYS:
        assert f"`{key}`" in guide, key


# ------------------------------------------------------------------------------------------ to the providers


@pytest.mark.parametrize(("metadata", "query"), [
    (OURS, wire.CustomQuery(MetricPath("ml", "pods", "*", "DCGM_FI_DEV_GPU_UTIL"), "app=vllm", "")),
    ({"metric": "batch_jobs_pending", "targetValue": "1", "resource": "deployments.apps", "name": "worker",
      "metricSelector": "queue=high"},
     wire.CustomQuery(MetricPath("ml", "deployments.apps", "worker", "batch_jobs_pending"), "", "queue=high")),
    ({"metric": "llm_d_epp_flow_control_queue_size", "targetValue": "4", "resource": "namespaces"},
     wire.CustomQuery(MetricPath(None, "namespaces", "ml", "llm_d_epp_flow_control_queue_size"), "", "")),
    ({"metric": "llm_d_epp_flow_control_queue_size", "targetValue": "4", "metricSelector": "inference_pool=vllm"},
     wire.ExternalQuery("ml", "llm_d_epp_flow_control_queue_size", "inference_pool=vllm")),
])
def test_the_provider_request_is_the_http_apis(metadata: dict[str, str], query: object) -> None:
    assert wire.provider_query(parse_metadata(metadata), "ml") == query


def test_combine_and_activation() -> None:
    values = [70.0, 30.0, 0.5]
    expected = {"sum": 100.5, "avg": 33.5, "max": 70.0, "min": 0.5}
    for aggregation, value in expected.items():
        assert wire.combine(Trigger("m", 1, aggregation=aggregation), values) == value
    # KEDA's scalers activate strictly above the threshold (prometheus_scaler.go: val > ActivationThreshold).
    assert [wire.active(Trigger("m", 1, activation=5), v) for v in (4.9, 5, 5.1)] == [False, False, True]
    assert wire.active(Trigger("m", 1), 0) is False and wire.active(Trigger("m", 1, activation=-1), 0) is True


@pytest.mark.parametrize(("code", "status"), [
    (400, grpc.StatusCode.INVALID_ARGUMENT), (403, grpc.StatusCode.PERMISSION_DENIED),
    (404, grpc.StatusCode.NOT_FOUND), (500, grpc.StatusCode.INTERNAL), (503, grpc.StatusCode.UNAVAILABLE),
])
def test_api_errors_become_grpc_statuses(code: int, status: grpc.StatusCode) -> None:
    assert wire.status_code(ApiError(code, "x")) == status


def test_namespace_is_required() -> None:
    with pytest.raises(MetadataError, match=r"^ScaledObjectRef\.namespace: required"):
        wire.namespace_of(pb.ScaledObjectRef(name="so", scalerMetadata=OURS))


# --------------------------------------------------------------------------- KEDA's messages, read as KEDA does


@pytest.mark.parametrize(("metric", "target", "hpa_name", "hpa_target"), [
    # pkg/scalers/external_scaler_test.go, TestConvertMetricSpecResponse: s0-<name>; the float target when > 0
    ("metric-a", "50", "s0-metric-a", 50.0),
    ("metric-b", "1.5", "s0-metric-b", 1.5),
    # TestExternalPushScaler_StreamMetricSpec: target 100
    ("test-metric", "100", "s0-test-metric", 100.0),
    # ours: names with characters KEDA replaces in its own metric names (pkg/util/normalize_string.go)
    ("vllm:num_requests_waiting", "5", "s0-vllm-num_requests_waiting", 5.0),
    ("a.b/c%d(e)", "0.8", "s0-a-b-c-d-e-", 0.8),
])
def test_metric_spec_as_keda_reads_it(metric: str, target: str, hpa_name: str, hpa_target: float) -> None:
    [spec] = wire.metric_spec(Trigger(metric, float(target))).metricSpecs
    assert keda.metric_name_with_index(0, spec.metricName) == hpa_name
    assert keda.target_of(spec) == hpa_target
    assert spec.metricName == keda.normalize_string(metric)
    # KEDA strips the prefix again before GetMetrics (RemoveIndexFromMetricName splits at the first dash).
    assert keda.remove_index(0, hpa_name) == spec.metricName


@pytest.mark.parametrize(("index", "name", "expected"), [
    # pkg/scalers/scaler_test.go, TestRemoveIndexFromMetricName
    (0, "s0-metricName", "metricName"), (123, "s123-metricName", "metricName"), (1, "s0-metricName", None),
    (0, "0-metricName", None), (0, "metricName", None),
])
def test_the_model_removes_the_index_as_keda_does(index: int, name: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(ValueError):
            keda.remove_index(index, name)
    else:
        assert keda.remove_index(index, name) == expected


@pytest.mark.parametrize(("value", "hpa_value"), [
    # pkg/scalers/scaler_test.go, TestGenerateMetricInMili: positive values pass (milli precision); NaN, Inf and
    # negative ones become 0 on KEDA's side, which is why none is ever sent.
    (42.5, 42.5), (1e18, 1e18), (9.3e15, 9.3e15), (math.nan, 0.0), (math.inf, 0.0), (-1.0, 0.0), (-9.3e15, 0.0),
])
def test_the_model_reads_values_as_keda_does(value: float, hpa_value: float) -> None:
    assert keda.quantity_from_float(value) == hpa_value


@pytest.mark.parametrize("value", [0.0, 0.25, 3.0, 72.5, 1e18])
def test_metric_values_round_trip_through_keda(value: float) -> None:
    [sent] = wire.metric_values("DCGM_FI_DEV_GPU_UTIL", value).metricValues
    assert sent.metricName == "DCGM_FI_DEV_GPU_UTIL"
    assert keda.quantity_from_float(keda.value_of(sent)) == pytest.approx(value)


def test_the_requested_metric_must_be_this_triggers() -> None:
    trigger = Trigger("vllm:num_requests_waiting", 5)
    ref = pb.ScaledObjectRef(name="so", namespace="ml")
    assert wire.requested_metric(trigger, pb.GetMetricsRequest(scaledObjectRef=ref,
                                                                metricName="vllm-num_requests_waiting")) \
        == "vllm-num_requests_waiting"
    assert wire.requested_metric(trigger, pb.GetMetricsRequest(scaledObjectRef=ref)) == "vllm-num_requests_waiting"
    with pytest.raises(MetadataError, match=r"^GetMetricsRequest\.metricName: 'other' is not this trigger's metric"):
        wire.requested_metric(trigger, pb.GetMetricsRequest(scaledObjectRef=ref, metricName="other"))


def test_the_model_resolves_from_env_keys_as_keda_does() -> None:
    # parseExternalScalerMetadata: resolved under the same key; dropped when the variable is empty or unset.
    metadata = {"metricFromEnv": "METRIC", "targetValueFromEnv": "UNSET", "scalerAddress": "x:1"}
    assert keda.scaler_metadata(metadata, {"METRIC": "DCGM_FI_DEV_GPU_UTIL"}) == {
        "metricFromEnv": "DCGM_FI_DEV_GPU_UTIL", "scalerAddress": "x:1"}
