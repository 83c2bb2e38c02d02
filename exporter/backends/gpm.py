"""NVML GPM (GPU Performance Monitoring, Hopper and newer): DCGM's profiling fields without DCGM's host engine.

GPM metrics are computed by ``nvmlGpmMetricsGet`` from two samples. As DCGM does, the newer sample is the one
taken in this collection and the baseline is the newest earlier sample that is at least one collection
interval older; until such a pair exists the fields have no value (absent, not 0). One sample and one
``nvmlGpmMetricsGet`` call per GPU (``nvmlGpmSampleGet``) or GPU instance (``nvmlGpmMigSampleGet``) and
collection serve every profiling field.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.backends.base import FieldNotSupported, FieldUnavailable

log = logging.getLogger("exporter.gpm")

METRICS = (
    "NVML_GPM_METRIC_GRAPHICS_UTIL", "NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_SM_OCCUPANCY",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "NVML_GPM_METRIC_FP64_UTIL", "NVML_GPM_METRIC_FP32_UTIL",
    "NVML_GPM_METRIC_FP16_UTIL", "NVML_GPM_METRIC_DRAM_BW_UTIL", "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
)
"""The GPM metrics behind the ``DCGM_FI_PROF_*`` rows of the field table, all requested in one call."""

_KEEP_AT_MOST = 8
_NOT_SUPPORTED_CODES = {3, 13}  # NotSupported, FunctionNotFound (a driver without GPM)

Key = tuple[int, int | None]
Results = dict[int, tuple[int, float]]  # metric id -> (nvmlReturn, value)


def pick_baseline(taken_at: Sequence[float], min_gap_s: float) -> int | None:
    """Index of the newest sample at least ``min_gap_s`` older than the last one (times ascending), or None."""
    if not taken_at:
        return None
    newest_allowed = taken_at[-1] - min_gap_s
    for i in range(len(taken_at) - 2, -1, -1):
        if taken_at[i] <= newest_allowed:
            return i
    return None


@dataclass
class _History:
    samples: list[tuple[float, Any]] = field(default_factory=list)  # (taken at, nvmlGpmSample_t), oldest first


class GpmSampler:
    """Keeps GPM samples per GPU or GPU instance; ``min_gap_s`` is the collection interval."""

    def __init__(self, nv: Any, min_gap_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.nv = nv
        self.min_gap_s = min_gap_s
        self._clock = clock
        self._support: dict[int, bool] = {}
        self._histories: dict[Key, _History] = {}
        self._spare: list[Any] = []
        self._results: dict[Key, Results | Exception] = {}

    def begin_collection(self) -> None:
        self._results.clear()

    def metrics(self, key: Key, gpu_handle: Any) -> Results:
        """This collection's GPM metrics of a GPU (``key[1]`` None) or one of its GPU instances.

        Raises FieldNotSupported (no GPM on this GPU), FieldUnavailable (no sample pair yet) or NVMLError.
        """
        if key not in self._results:
            try:
                self._results[key] = self._compute(key, gpu_handle)
            except Exception as exc:  # remembered, so the other profiling fields do not call NVML again
                self._results[key] = exc
        result = self._results[key]
        if isinstance(result, Exception):
            raise result
        return result

    def _compute(self, key: Key, gpu_handle: Any) -> Results:
        gpu, gpu_instance = key
        if not self._supported(gpu, gpu_handle):
            raise FieldNotSupported("GPM is not supported on this GPU (Hopper or newer)")
        history = self._histories.setdefault(key, _History())
        sample = self._spare.pop() if self._spare else self.nv.nvmlGpmSampleAlloc()
        try:
            if gpu_instance is None:
                self.nv.nvmlGpmSampleGet(gpu_handle, sample)
            else:
                self.nv.nvmlGpmMigSampleGet(gpu_handle, gpu_instance, sample)
        except Exception:
            self._spare.append(sample)
            raise
        history.samples.append((self._clock(), sample))
        baseline = pick_baseline([t for t, _ in history.samples], self.min_gap_s)
        if baseline is None:
            self._trim(history, max(0, len(history.samples) - _KEEP_AT_MOST))
            raise FieldUnavailable("GPM needs two samples at least one collection interval apart")
        results = self._metrics_get(history.samples[baseline][1], history.samples[-1][1])
        self._trim(history, baseline)  # older samples can never be a baseline again
        return results

    def _metrics_get(self, older: Any, newer: Any) -> Results:
        nv = self.nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(METRICS)
        request.sample1, request.sample2 = older, newer
        for i, name in enumerate(METRICS):
            request.metrics[i].metricId = getattr(nv, name)
        nv.nvmlGpmMetricsGet(request)
        return {request.metrics[i].metricId: (int(request.metrics[i].nvmlReturn), float(request.metrics[i].value))
                for i in range(len(METRICS))}

    def _supported(self, gpu: int, gpu_handle: Any) -> bool:
        if gpu not in self._support:
            try:
                self._support[gpu] = bool(self.nv.nvmlGpmQueryDeviceSupport(gpu_handle).isSupportedDevice)
            except self.nv.NVMLError as exc:
                if getattr(exc, "value", None) not in _NOT_SUPPORTED_CODES:
                    raise
                self._support[gpu] = False
            if not self._support[gpu]:
                log.info("GPU %d: no GPM support; DCGM_FI_PROF_* fields are omitted", gpu)
        return self._support[gpu]

    def _trim(self, history: _History, count: int) -> None:
        self._spare.extend(sample for _, sample in history.samples[:count])
        del history.samples[:count]

    def retain(self, keys: set[Key]) -> None:
        """Drop the samples of GPUs and instances that are gone (after a re-enumeration); a GPU's own samples
        stay while any of its instances does (GPU-level fields of instances read them)."""
        gpus = {gpu for gpu, _ in keys}
        for key in [k for k in self._histories if (k not in keys if k[1] is not None else k[0] not in gpus)]:
            self._trim(self._histories[key], len(self._histories[key].samples))
            del self._histories[key]

    def close(self) -> None:
        """Free every sample (NVML must still be initialised)."""
        for history in self._histories.values():
            self._trim(history, len(history.samples))
        self._histories.clear()
        self._support.clear()
        self._results.clear()
        spare, self._spare = self._spare, []
        for sample in spare:
            with contextlib.suppress(Exception):
                self.nv.nvmlGpmSampleFree(sample)
