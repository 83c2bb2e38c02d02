"""The demo's scaling choices (HPA spec per --metric) and the --compare table, from settings and summaries (pure)."""

from __future__ import annotations

import pytest

from loadtest.compare import comparison_row, format_table
from loadtest.demo import DEFAULT_SETTINGS, QUICK_SETTINGS, ScaleOn, describe_metrics, with_overrides
from loadtest.hpa import MetricType, TargetType
from loadtest.summary import PhaseLatency, Summary


@pytest.mark.parametrize(("choice", "metrics"), [
    (ScaleOn.GPU, [("DCGM_FI_DEV_GPU_UTIL", 60_000)]),
    (ScaleOn.QUEUE, [("vllm:num_requests_waiting", 5_000)]),
    (ScaleOn.BOTH, [("DCGM_FI_DEV_GPU_UTIL", 60_000), ("vllm:num_requests_waiting", 5_000)]),
])
def test_each_choice_is_an_hpa_on_pods_metrics(choice: ScaleOn, metrics: list[tuple[str, int]]) -> None:
    spec = with_overrides(QUICK_SETTINGS, scale_on=choice).hpa_spec()
    assert [(m.name, m.target_milli) for m in spec.metrics] == metrics
    assert all(m.type is MetricType.PODS and m.target_type is TargetType.AVERAGE_VALUE for m in spec.metrics)
    assert spec.behavior is not None and spec.behavior.scale_down is not None


def test_needed_replicas_hold_the_gpu_target_at_the_peak_rate() -> None:
    # 55 requests/s x 40 ms = 2.2 GPUs busy; at 60 % that is 3.67 -> 4 replicas, in both profiles
    assert DEFAULT_SETTINGS.needed_replicas == QUICK_SETTINGS.needed_replicas == 4
    assert with_overrides(QUICK_SETTINGS, target=55.0).needed_replicas == 4
    assert with_overrides(QUICK_SETTINGS, target=50.0).needed_replicas == 5  # 2.2 / 0.5 = 4.4
    assert describe_metrics(with_overrides(QUICK_SETTINGS, scale_on=ScaleOn.BOTH, queue_target=3.0)) == (
        "DCGM_FI_DEV_GPU_UTIL (Pods, target 60) and vllm:num_requests_waiting (Pods, target 3)")


def summary(up: float | None, ups: int | None, peak: int, errors: int, dropped: int, p95: float | None) -> Summary:
    return Summary(initial_replicas=1, peak_replicas=peak, final_replicas=1, peak_desired_replicas=peak,
                   scale_up_seconds=up, peak_reached_seconds=None, scale_down_seconds=None,
                   back_to_initial_seconds=None, load_step_at=15.0, load_drop_at=85.0, duration_seconds=150.0,
                   requests={"sent": 4490, "ok": 4490 - errors, "errors": errors, "dropped": dropped},
                   latency_by_phase={"hold": PhaseLatency(3000, 45.0, p95)} if p95 is not None else {},
                   scale_events=[], needed_replicas=4, scale_ups_to_needed=ups)


def test_comparison_table() -> None:
    rows = [comparison_row(ScaleOn.GPU, summary(15.0, 2, 4, 800, 35, 1900.5)),
            comparison_row(ScaleOn.QUEUE, summary(15.0, 1, 8, 120, 0, None))]
    assert rows[0].failed == 835 and rows[1].hold_p95_ms is None
    assert format_table(rows).splitlines() == [
        "| HPA on | first scale-up | scale-ups to needed | peak replicas | requests failed | p95 in the hold |",
        "|--------|----------------|---------------------|---------------|-----------------|-----------------|",
        "| gpu    | 15 s           | 2 (to 4)            | 4             | 835 of 4490     | 1900.5 ms       |",
        "| queue  | 15 s           | 1 (to 4)            | 8             | 120 of 4490     | -               |",
    ]
