"""The sampling thread: reads every field of every entity on an interval and renders one text snapshot.

``/metrics`` only ever serves the latest complete snapshot (an immutable bytes object swapped in one
assignment), so a scrape never waits for NVML and never sees a half-written collection.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from exporter.backends.base import (
    Backend,
    BackendUnavailable,
    DeviceLost,
    DeviceMode,
    FieldNotSupported,
    FieldUnavailable,
)
from exporter.counters import Counter
from exporter.entities import GpuEntity
from exporter.exposition import Family, Labels, labels_of, render
from exporter.pod_mapping import EntityKey, PodRef, build_pod_index, build_share_index, pod_labels_for
from exporter.process_attribution import ProcessAttribution, SharedGpuResult, self_metric_families
from exporter.xid import xid_message

if TYPE_CHECKING:  # grpc costs ~12 MiB of RSS; only Kubernetes mode loads it
    from exporter.podresources.client import PodResourcesStatus

log = logging.getLogger("exporter.collector")

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


@dataclass(frozen=True)
class Snapshot:
    body: bytes
    created: float  # unix time the collection finished
    _gzipped: list[bytes] = field(default_factory=list, repr=False, compare=False)

    def gzipped(self) -> bytes:
        """Compressed once per snapshot, on first demand (benign race: two threads may both compress)."""
        if not self._gzipped:
            self._gzipped.append(gzip.compress(self.body, compresslevel=5))
        return self._gzipped[0]


@dataclass(frozen=True)
class PodAttribution:
    """Kubernetes mode: where pod allocations come from, how device IDs are matched, and (optional) how GPU
    processes are placed in pods for the per-pod families of shared GPUs."""

    source: Callable[[], PodResourcesStatus]
    id_type: Literal["uid", "device-name"] = "uid"
    extra_resource_names: frozenset[str] = frozenset()
    processes: ProcessAttribution | None = None


@dataclass(frozen=True)
class CollectorOptions:
    interval_s: float = 1.0
    device_mode: DeviceMode = "f"
    hostname_label: str | None = "Hostname"  # None: no hostname label (-n)
    hostname: str = ""
    replace_blanks_in_model_name: bool = False
    enumerate_every_s: float = 30.0
    pods: PodAttribution | None = None
    old_namespace: bool = False  # --use-old-namespace: dcgm-exporter 1.x label names


# dcgm-exporter's --use-old-namespace: ``uuid`` for the GPU entity's ``UUID`` (collector/gpu_collector.go) and the
# pod labels' 1.x names (transformation/const.go).
OLD_NAMESPACE_LABELS = {"UUID": "uuid", "pod": "pod_name", "namespace": "pod_namespace",
                        "container": "container_name"}


def rename_labels(labels: Labels, names: dict[str, str]) -> Labels:
    return tuple((names.get(k, k), v) for k, v in labels)


class Collector:
    def __init__(self, backend: Backend, counters: Sequence[Counter], options: CollectorOptions) -> None:
        self.backend = backend
        self.options = options
        self._metrics = [c for c in counters if not c.field.is_label]
        self._label_fields = sorted((c for c in counters if c.field.is_label), key=lambda c: c.name)
        self._unsupported: set[tuple[tuple[int, int | None], str]] = set()
        self._entities: list[GpuEntity] = []
        self._enumerated_at = -1e18
        self._known_gpus: dict[int, str] = {}
        self._lost_gpus: dict[int, str] = {}
        self._static_labels: dict[tuple[int, int | None], Labels] = {}
        self.backend_up = False
        self.backend_error: str | None = "no collection yet"
        self.collections_total = 0
        self.collection_errors_total = 0
        self.last_duration_s = 0.0
        self.last_success: float | None = None
        self._events_started = False
        self._pod_status: PodResourcesStatus | None = None
        self._shared: SharedGpuResult | None = None
        self._process = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._process)
        self._snapshot = Snapshot(b"", 0.0)
        self.gzip_wanted = False  # set once a client asks for gzip; then each snapshot is compressed here
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public ------------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def health(self) -> tuple[bool, str]:
        """(healthy, reason): unhealthy when the backend is down or collections stopped arriving."""
        if not self.backend_up:
            return False, self.backend_error or "backend down"
        stale_after = max(3 * self.options.interval_s, 10.0)
        if self.last_success is None or time.time() - self.last_success > stale_after:
            return False, f"no successful collection in the last {stale_after:g}s"
        return True, "OK"

    def start(self) -> None:
        """Collect once synchronously (so the first scrape has data), then keep sampling on a thread."""
        self.collect_once()
        self._thread = threading.Thread(target=self._run, name="collector", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.backend.stop_events()

    def _run(self) -> None:
        interval = self.options.interval_s
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            try:
                self.collect_once()
            except Exception:  # never let the sampling thread die silently
                self.collection_errors_total += 1
                log.exception("collection failed")
            next_at += interval
            now = time.monotonic()
            if next_at < now:  # fell behind: skip missed ticks rather than bursting
                next_at = now + interval

    # -- one collection ------------------------------------------------------------------------------
    def collect_once(self) -> None:
        started = time.perf_counter()
        families = [Family(c.name, c.kind, c.help) for c in self._metrics]
        self.collections_total += 1
        try:
            self.backend.begin_collection()
            entities = self._current_entities()
            pods, shares = self._pod_labels(entities)
            healthy = self._read_all(entities, families, pods)
            families.extend(self._shared_families(entities, shares, healthy))
            self.backend_up, self.backend_error = True, None
            self.last_success = time.time()
        except BackendUnavailable as exc:
            families = []  # never serve values from a backend that is down
            healthy = {}
            self._shared = None
            self._enumerated_at = -1e18
            if self.backend_up or self.backend_error != str(exc):
                log.error("GPU backend unavailable: %s", exc)
            self.backend_up, self.backend_error = False, str(exc)
            self.collection_errors_total += 1
        # the duration covers rendering too; it is reported by the next snapshot (this one is being built)
        body = render(families) + render(self._self_metrics(healthy)) + generate_latest(self._process).decode()
        snapshot = Snapshot(body.encode(), time.time())
        if self.gzip_wanted:
            snapshot.gzipped()
        self._snapshot = snapshot
        self.last_duration_s = time.perf_counter() - started

    def _current_entities(self) -> list[GpuEntity]:
        now = time.monotonic()
        if self._lost_gpus or now - self._enumerated_at >= self.options.enumerate_every_s:
            self._entities = self.backend.entities(self.options.device_mode)
            self._enumerated_at = now
            self._static_labels.clear()
            present = {e.gpu for e in self._entities}
            for e in self._entities:
                self._known_gpus[e.gpu] = e.uuid
            for gpu in list(self._lost_gpus):
                if gpu in present:
                    log.info("GPU %d is back", gpu)
                    del self._lost_gpus[gpu]
            for gpu in self._known_gpus.keys() - present:
                self._lost_gpus.setdefault(gpu, "not enumerated")
            if not self._events_started:
                self.backend.start_events()
                self._events_started = True
        return self._entities

    def _pod_labels(self, entities: list[GpuEntity]) -> tuple[dict[EntityKey, dict[str, str]],
                                                               dict[EntityKey, tuple[PodRef, ...]]]:
        """Pod labels of entities held by exactly one container, and the share holders of shared entities."""
        pods = self.options.pods
        if pods is None:
            return {}, {}
        status = self._pod_status = pods.source()  # self-metrics report this same snapshot
        index = build_pod_index(status.allocations, entities, id_type=pods.id_type,
                                extra_resource_names=pods.extra_resource_names)
        labels = {}
        for key, refs in index.items():
            found = pod_labels_for(refs)
            if found is not None:
                labels[key] = found
        if pods.processes is None:
            return labels, {}
        return labels, build_share_index(status.allocations, entities, id_type=pods.id_type,
                                         extra_resource_names=pods.extra_resource_names)

    def _shared_families(self, entities: list[GpuEntity], shares: dict[EntityKey, tuple[PodRef, ...]],
                         healthy: dict[int, bool]) -> list[Family]:
        """Per-pod families of shared GPUs (Kubernetes mode with process attribution); none for failed GPUs."""
        attribution = self.options.pods.processes if self.options.pods else None
        if attribution is None:
            return []
        alive = [e for e in entities if healthy.get(e.gpu, False)]
        self._shared = attribution.collect(self.backend, alive, shares, self._base_labels)
        return self._shared.families

    def _read_all(self, entities: list[GpuEntity], families: list[Family],
                  pods: dict[tuple[int, int | None], dict[str, str]]) -> dict[int, bool]:
        healthy: dict[int, bool] = dict.fromkeys(self._lost_gpus, False)
        lost_now: set[int] = set()
        for entity in entities:
            if entity.gpu in lost_now:
                continue
            try:
                rows = self._read_entity(entity)
                base = self._base_labels(entity)
            except DeviceLost as exc:
                lost_now.add(entity.gpu)
                healthy[entity.gpu] = False
                if entity.gpu not in self._lost_gpus:
                    log.error("GPU %d (%s) failed, dropping its series and retrying: %s", entity.gpu, entity.uuid, exc)
                self._lost_gpus[entity.gpu] = str(exc)
                continue
            healthy.setdefault(entity.gpu, True)
            pod = pods.get(entity.key)
            pod_labels: Labels = (
                (("container", pod["container"]), ("namespace", pod["namespace"]), ("pod", pod["pod"])) if pod else ())
            for i, value in rows:
                extra: Labels = ()
                if self._metrics[i].name == XID_FIELD:
                    extra = (("err_code", str(int(value))), ("err_msg", xid_message(int(value))))
                labels = base + extra + pod_labels
                families[i].add(rename_labels(labels, OLD_NAMESPACE_LABELS) if self.options.old_namespace else labels,
                                value)
        # Series of a GPU that failed part-way through are dropped whole, not left half-reported.
        if lost_now:
            for fam in families:
                fam.samples = [s for s in fam.samples if int(dict(s[0])["gpu"]) not in lost_now]
        return healthy

    def _read_entity(self, entity: GpuEntity) -> list[tuple[int, float | int]]:
        rows: list[tuple[int, float | int]] = []
        for i, counter in enumerate(self._metrics):
            key = (entity.key, counter.name)
            if key in self._unsupported:
                continue
            try:
                rows.append((i, self.backend.read(entity, counter.field)))
            except FieldNotSupported as exc:
                self._unsupported.add(key)
                log.info("%s not supported on %s: %s (omitted from now on)", counter.name, _where(entity), exc)
            except FieldUnavailable:
                continue
        return rows

    def _base_labels(self, entity: GpuEntity) -> Labels:
        cached = self._static_labels.get(entity.key)
        if cached is not None:
            return cached
        opts = self.options
        model = entity.model_name.replace(" ", "-") if opts.replace_blanks_in_model_name else entity.model_name
        pairs: list[tuple[str, str | None]] = [
            ("gpu", str(entity.gpu)), ("UUID", entity.uuid), ("pci_bus_id", entity.pci_bus_id),
            ("device", entity.device), ("modelName", model),
            ("GPU_I_PROFILE", entity.gpu_instance_profile),
            ("GPU_I_ID", None if entity.gpu_instance_id is None else str(entity.gpu_instance_id)),
        ]
        if opts.hostname_label:
            pairs.append((opts.hostname_label, opts.hostname))
        for counter in self._label_fields:
            try:
                pairs.append((counter.name, self.backend.label(entity, counter.field)))
            except (FieldNotSupported, FieldUnavailable):
                continue
        labels = labels_of(pairs)
        self._static_labels[entity.key] = labels
        return labels

    # -- self-metrics -----------------------------------------------------------------------------------
    def _self_metrics(self, healthy: dict[int, bool]) -> list[Family]:
        p = "gpu_exporter_"
        fams = [
            Family(p + "backend_up", "gauge", "1 when the GPU backend (NVML) answers, 0 when it is down."),
            Family(p + "collection_duration_seconds", "gauge", "Duration of the last collection."),
            Family(p + "collections_total", "counter", "Collections attempted."),
            Family(p + "collection_errors_total", "counter", "Collections that failed as a whole."),
            Family(p + "last_collection_success_timestamp_seconds", "gauge",
                   "Unix time of the last successful collection."),
            Family(p + "gpu_up", "gauge", "1 when the GPU answered in the last collection, 0 when it failed."),
            Family(p + "field_supported", "gauge",
                   "1 when the field is read from this GPU, 0 when the GPU reported it unsupported."),
        ]
        up, duration, total, errors, last, gpu_up, supported = fams
        up.add((("backend", self.backend.name),), int(self.backend_up))
        duration.add((), self.last_duration_s)
        total.add((), self.collections_total)
        errors.add((), self.collection_errors_total)
        if self.last_success is not None:
            last.add((), self.last_success)
        for gpu in sorted(healthy):
            gpu_up.add((("gpu", str(gpu)), ("UUID", self._known_gpus.get(gpu, ""))), int(healthy[gpu]))
        for entity in self._entities if self.backend_up else []:
            where = labels_of([("gpu", str(entity.gpu)),
                               ("GPU_I_ID", None if entity.gpu_instance_id is None else str(entity.gpu_instance_id))])
            for counter in self._metrics:
                ok = (entity.key, counter.name) not in self._unsupported
                supported.add((*where, ("field", counter.name)), int(ok))
        fams.extend(self._pod_self_metrics())
        if self._shared is not None:
            fams.extend(self_metric_families(self._shared))
        fams.extend(self._backend_self_metrics())
        return fams

    def _pod_self_metrics(self) -> list[Family]:
        status = self._pod_status
        if status is None:
            return []
        p = "gpu_exporter_pod_resources_"
        up = Family(p + "up", "gauge", "1 when the last kubelet PodResources List call succeeded.")
        up.add((), int(status.up))
        errors = Family(p + "errors_total", "counter", "Failed kubelet PodResources List calls.")
        errors.add((), status.errors_total)
        last = Family(p + "last_success_timestamp_seconds", "gauge", "Unix time of the last successful List call.")
        if status.last_success is not None:
            last.add((), status.last_success)
        return [up, errors, last]

    def _backend_self_metrics(self) -> list[Family]:
        fams = []
        xid = getattr(self.backend, "xid", None)
        if xid is not None:
            events = Family("gpu_exporter_xid_events_total", "counter", "XID events received from NVML.")
            events.add((), xid.events_total)
            fams.append(events)
        state_errors = getattr(self.backend, "state_errors_total", None)
        if state_errors is not None:
            fam = Family("gpu_exporter_fake_state_errors_total", "counter",
                         "Re-reads of the fake state file that failed (the last good state was kept).")
            fam.add((), state_errors)
            fams.append(fam)
        return fams


def _where(entity: GpuEntity) -> str:
    gi = f" GPU instance {entity.gpu_instance_id}" if entity.gpu_instance_id is not None else ""
    return f"GPU {entity.gpu}{gi}"
