"""The sampling thread: reads every field of every entity on an interval and renders one text snapshot.

``/metrics`` only ever serves the latest complete snapshot (an immutable bytes object swapped in one
assignment), so a scrape never waits for NVML and never sees a half-written collection. Values never freeze:
a scrape leaves out every GPU whose values are older than ``max_value_age_s`` (the check runs at scrape time, so
it holds even while the sampling thread is stuck), and a GPU whose NVML call hangs is left behind by a fresh
sampling thread (see :mod:`exporter.serving.hangwatch`) so the other GPUs stay fresh.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
from exporter.exposition import Family, Labels, labels_of, render
from exporter.fields.catalogue import CLOCK_EVENTS_COUNT, XID_ERRORS_COUNT
from exporter.fields.counters import Counter
from exporter.fields.entities import GpuEntity
from exporter.fields.event_windows import CLOCK_EVENT_NAMES, EventWindow, clock_event_bits
from exporter.fields.table import FIELDS_BY_NAME
from exporter.fields.xid import xid_message
from exporter.pods.mapping import EntityKey, PodRef, build_pod_index, build_share_index, pod_labels_for
from exporter.pods.process_attribution import ProcessAttribution, SharedGpuResult, self_metric_families
from exporter.serving.hangwatch import HangWatch, WatchedBackend, WorkerAbandoned
from exporter.serving.snapshot import Snapshot

if TYPE_CHECKING:  # grpc adds megabytes of RSS; only Kubernetes mode loads it
    from exporter.pods.podresources.client import PodResourcesStatus

log = logging.getLogger("exporter.collector")

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
CLOCK_EVENTS_FIELD = FIELDS_BY_NAME["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]
DEFAULT_EVENT_WINDOW_MS = 300_000  # dcgm-exporter's -x and --clock-events-count-window-size default: 5 minutes


__all__ = ["Collector", "CollectorOptions", "PodAttribution", "Snapshot"]


@dataclass(frozen=True)
class PodAttribution:
    """Kubernetes mode: where pod allocations come from, how device IDs are matched, and (optional) how GPU
    processes are placed in pods for the per-pod families of shared GPUs."""

    source: Callable[[], PodResourcesStatus]
    id_type: Literal["uid", "device-name"] = "uid"
    extra_resource_names: frozenset[str] = frozenset()
    processes: ProcessAttribution | None = None
    # extra labels of a container's pod (pod labels, pod_uid) from the Kubernetes API; see exporter.pods.metadata_labels
    metadata: Callable[[PodRef], dict[str, str]] | None = None


@dataclass(frozen=True)
class CollectorOptions:
    interval_s: float = 1.0
    device_mode: DeviceMode = "f"
    hostname_label: str | None = "Hostname"  # None: no hostname label (-n)
    hostname: str = ""
    replace_blanks_in_model_name: bool = False
    enumerate_every_s: float = 30.0
    pods: PodAttribution | None = None
    max_value_age_s: float | None = None  # None: max(3 intervals, 10 s)

    @property
    def value_age_limit_s(self) -> float:
        """How old a GPU's values may be and still be served (and collections be late before /health is 503)."""
        if self.max_value_age_s is not None:
            return self.max_value_age_s
        return max(3 * self.interval_s, 10.0)

    @property
    def hang_after_s(self) -> float:
        """How long one GPU's backend call may take before that GPU is left behind as hung."""
        return min(max(self.interval_s, 1.0), self.value_age_limit_s / 2)
    xid_count_window_ms: int = DEFAULT_EVENT_WINDOW_MS
    clock_events_count_window_ms: int = DEFAULT_EVENT_WINDOW_MS
    old_namespace: bool = False  # --use-old-namespace: dcgm-exporter 1.x label names


# dcgm-exporter's --use-old-namespace: ``uuid`` for the GPU entity's ``UUID`` (collector/gpu_collector.go) and the
# pod labels' 1.x names (transformation/const.go).
OLD_NAMESPACE_LABELS = {"UUID": "uuid", "pod": "pod_name", "namespace": "pod_namespace",
                        "container": "container_name"}


def rename_labels(labels: Labels, names: dict[str, str]) -> Labels:
    return tuple((names.get(k, k), v) for k, v in labels)


class Collector:
    def __init__(self, backend: Backend, counters: Sequence[Counter], options: CollectorOptions, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self._clock = clock  # the windows' clock (XID event times come from the backend on the same clock)
        self.options = options
        self._watch = HangWatch()
        self._calls = WatchedBackend(backend, self._watch)  # GPU-specific calls, so a hung one names its GPU
        self._xid_window = EventWindow(options.xid_count_window_ms)
        self._clock_window = EventWindow(options.clock_events_count_window_ms)
        self._no_clock_reasons: set[int] = set()  # GPUs that answered NotSupported: not probed again
        self._counters_wanted = self._counters_active = tuple(counters)
        self._use_counters(self._counters_active)
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
        self._published = threading.Event()
        self.gzip_wanted = False  # set once a client asks for gzip; then each snapshot is compressed here
        self.more_self_metrics: list[Callable[[], list[Family]]] = []  # other parts' own series (counters reload)
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None

    # -- public ------------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        """What /metrics serves now: the latest snapshot without the GPUs whose values are too old."""
        snap = self._snapshot
        return snap.without(snap.stale_gpus(time.monotonic(), self.options.value_age_limit_s))

    def replace_counters(self, counters: Sequence[Counter]) -> None:
        """Use ``counters`` from the next collection on (switched between collections, never during one)."""
        self._counters_wanted = tuple(counters)

    def _use_counters(self, counters: tuple[Counter, ...]) -> None:
        # The counters read from a field-table row, each with that row.
        self._metrics = [(c, c.field) for c in counters if not c.is_label and c.field is not None]
        self._label_fields = sorted(((c, c.field) for c in counters if c.is_label and c.field is not None),
                                    key=lambda pair: pair[0].name)
        self._never = [c for c in counters if c.unsupported]  # warned about at load; field_supported 0
        windowed = {c.name: c for c in counters if c.windowed}
        self._xid_count = windowed.get(XID_ERRORS_COUNT)
        self._clock_count = windowed.get(CLOCK_EVENTS_COUNT)
        self._static_labels = {}
        self._counters_active = counters

    def health(self) -> tuple[bool, str]:
        """(healthy, reason): unhealthy when the backend is down, collections stopped arriving, or a GPU's
        values are no longer served because its backend call hangs."""
        now = time.monotonic()
        stuck = self._watch.in_flight(self._worker)
        if stuck is not None and now - stuck.since < self.options.hang_after_s:
            stuck = None  # a call in progress, not one that hangs
        where = "" if stuck is None else f": {self._describe(stuck.gpu)}{stuck.describe(now)}"
        if not self.backend_up:
            return False, (self.backend_error or "backend down") + where
        limit = self.options.value_age_limit_s
        if self.last_success is None or time.time() - self.last_success > limit:
            return False, f"no successful collection in the last {limit:g}s{where}"
        served = self.snapshot.read_at
        dropped = [f"{self._describe(gpu)}{call.describe(now)}; its values are older than {limit:g}s and no "
                   "longer served" for gpu, call in sorted(self._watch.hung.items()) if gpu not in served]
        if dropped:
            return False, "; ".join(dropped)
        return True, "OK"

    def _describe(self, gpu: int | None) -> str:
        if gpu is None:
            return ""
        uuid = self._known_gpus.get(gpu)
        return f"GPU {gpu} ({uuid}): " if uuid else f"GPU {gpu}: "

    def start(self) -> None:
        """Sample on a worker thread, watched for hung calls; return once the first snapshot is there (or once
        the value-age limit passed without one: /health then says why)."""
        self._spawn(self._watch.generation)
        self._watchdog = threading.Thread(target=self._watch_for_hangs, name="collector-watchdog", daemon=True)
        self._watchdog.start()
        self._published.wait(self.options.value_age_limit_s)

    def stop(self) -> None:
        self._stop.set()
        worker = self._worker
        if worker is not None:
            worker.join(timeout=1 if self._watch.in_flight(worker) else 10)
        if self._watchdog is not None:
            self._watchdog.join(timeout=5)
        self.backend.stop_events()

    def _spawn(self, generation: int) -> None:
        self._worker = threading.Thread(target=self._run, args=(generation,), name=f"collector-{generation}",
                                        daemon=True)
        self._worker.start()

    def _run(self, generation: int) -> None:
        self._watch.bind(generation)
        interval = self.options.interval_s
        next_at = time.monotonic()
        try:
            while not self._stop.wait(max(0.0, next_at - time.monotonic())) and not self._watch.abandoned():
                try:
                    self.collect_once()
                except WorkerAbandoned:
                    raise
                except Exception:  # never let the sampling thread die silently
                    self.collection_errors_total += 1
                    log.exception("collection failed")
                next_at += interval
                now = time.monotonic()
                if next_at < now:  # fell behind: skip missed ticks rather than bursting
                    next_at = now + interval
        except WorkerAbandoned:
            pass
        if self._watch.abandoned():
            for gpu, stuck in list(self._watch.hung.items()):
                if stuck.thread == threading.get_ident():
                    log.warning("%s%s returned after %.0fs; collecting it again", self._describe(gpu), stuck.call,
                                time.monotonic() - stuck.since)
            self._watch.release()

    def _watch_for_hangs(self) -> None:
        """Leave a GPU behind when the worker has been in one of its calls longer than the hang limit."""
        hang_after = self.options.hang_after_s
        while not self._stop.wait(min(0.25, hang_after / 4)):
            stuck = self._watch.in_flight(self._worker)
            if stuck is None or stuck.gpu is None or time.monotonic() - stuck.since < hang_after:
                continue
            log.error("%s%s; collecting the other GPUs without it (its last values are served until they are "
                      "older than %gs)", self._describe(stuck.gpu), stuck.describe(time.monotonic()),
                      self.options.value_age_limit_s)
            self._spawn(self._watch.abandon(stuck))

    # -- one collection ------------------------------------------------------------------------------
    def collect_once(self) -> None:
        started = time.perf_counter()
        wanted = self._counters_wanted
        if wanted is not self._counters_active:
            self._use_counters(wanted)
        read_at = time.monotonic()
        families = [Family(c.name, c.kind, c.help) for c, _ in self._metrics]
        self.collections_total += 1
        try:
            self._calls.begin_collection()
            entities = self._current_entities()
            pods, shares = self._pod_labels(entities)
            healthy = self._read_all(entities, families, pods)
            families.extend(self._windowed_families(entities, pods, healthy))
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
        tail = render(self._self_metrics(healthy)) + generate_latest(self._process).decode()
        fresh = {gpu: read_at for gpu, ok in healthy.items() if ok}
        snapshot = Snapshot.build(families, tail, time.time(), fresh, self._carry() if self.backend_up else None)
        if self.gzip_wanted:
            snapshot.gzipped()
        if self._watch.abandoned():
            raise WorkerAbandoned
        self._snapshot = snapshot
        self._published.set()
        self.last_duration_s = time.perf_counter() - started

    def _carry(self) -> tuple[Snapshot, frozenset[int]]:
        """Hung GPUs keep their last values (with their read time) until those are older than the limit."""
        previous, limit, now = self._snapshot, self.options.value_age_limit_s, time.monotonic()
        return previous, frozenset(gpu for gpu in list(self._watch.hung)
                                   if gpu in previous.read_at and now - previous.read_at[gpu] <= limit)

    def _current_entities(self) -> list[GpuEntity]:
        now = time.monotonic()
        if self._watch.hung and self._entities:
            return self._entities  # enumeration touches every GPU, the hung one too
        if self._lost_gpus or now - self._enumerated_at >= self.options.enumerate_every_s:
            self._entities = self._calls.entities(self.options.device_mode)
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
                if pods.metadata is not None:
                    found = {**pods.metadata(refs[0]), **found}
                labels[key] = found
        if pods.processes is None:
            return labels, {}
        return labels, build_share_index(status.allocations, entities, id_type=pods.id_type,
                                         extra_resource_names=pods.extra_resource_names)

    def _windowed_families(self, entities: list[GpuEntity], pods: dict[EntityKey, dict[str, str]],
                           healthy: dict[int, bool]) -> list[Family]:
        """DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT (see exporter.fields.event_windows)."""
        now = self._clock()
        families = []
        events = self.backend.xid_events()  # drained every time, so the backend never hoards them
        if self._xid_count is not None:
            for event in events:
                self._xid_window.record(event.gpu, event.at, [event.xid])
            families.append(self._window_family(self._xid_count, self._xid_window, "xid", str, entities, pods,
                                                healthy, now))
        if self._clock_count is not None:
            self._sample_clock_events(entities, healthy, now)
            families.append(self._window_family(self._clock_count, self._clock_window, "clock_event",
                                                CLOCK_EVENT_NAMES.__getitem__, entities, pods, healthy, now))
        return families

    def _sample_clock_events(self, entities: list[GpuEntity], healthy: dict[int, bool], now: float) -> None:
        """One clock-event-reasons sample per GPU and collection (DCGM samples the field every interval)."""
        sampled: set[int] = set()
        for entity in entities:
            if entity.gpu in sampled or entity.gpu in self._no_clock_reasons or not healthy.get(entity.gpu, False):
                continue
            sampled.add(entity.gpu)
            try:
                bitmask = int(self.backend.read(entity, CLOCK_EVENTS_FIELD))
            except FieldNotSupported:
                self._no_clock_reasons.add(entity.gpu)
                continue
            except (FieldUnavailable, DeviceLost):
                continue  # no sample: the GPU reports 0 events, as dcgm-exporter does for blank values
            self._clock_window.record(entity.gpu, now, clock_event_bits(bitmask))

    def _window_family(self, counter: Counter, window: EventWindow, label: str, label_value: Callable[[int], str],
                       entities: list[GpuEntity], pods: dict[EntityKey, dict[str, str]], healthy: dict[int, bool],
                       now: float) -> Family:
        family = Family(counter.name, counter.kind, counter.help)
        size: Labels = (("window_size_in_ms", str(window.window_ms)),)
        counts_by_gpu: dict[int, dict[int, int]] = {}
        for entity in entities:
            if not healthy.get(entity.gpu, False):
                continue
            if entity.gpu not in counts_by_gpu:
                counts_by_gpu[entity.gpu] = window.counts(entity.gpu, now)
            base = self._base_labels(entity) + size
            pod_labels = _pod_label_pairs(pods.get(entity.key), (*base, (label, "")))
            counts = counts_by_gpu[entity.gpu]
            rows = [(base + pod_labels, 0)] if not counts else [
                ((*base, (label, label_value(value)), *pod_labels), count) for value, count in sorted(counts.items())]
            for labels, count in rows:
                family.add(rename_labels(labels, OLD_NAMESPACE_LABELS) if self.options.old_namespace else labels,
                           count)
        return family

    def _shared_families(self, entities: list[GpuEntity], shares: dict[EntityKey, tuple[PodRef, ...]],
                         healthy: dict[int, bool]) -> list[Family]:
        """Per-pod families of shared GPUs (Kubernetes mode with process attribution); none for failed GPUs."""
        attribution = self.options.pods.processes if self.options.pods else None
        if attribution is None:
            return []
        alive = [e for e in entities if healthy.get(e.gpu, False)]
        self._shared = attribution.collect(self._calls, alive, shares, self._base_labels)
        return self._shared.families

    def _read_all(self, entities: list[GpuEntity], families: list[Family],
                  pods: dict[tuple[int, int | None], dict[str, str]]) -> dict[int, bool]:
        healthy: dict[int, bool] = dict.fromkeys(self._lost_gpus, False)
        healthy.update(dict.fromkeys(list(self._watch.hung), False))
        lost_now: set[int] = set()
        for entity in entities:
            if entity.gpu in lost_now or entity.gpu in self._watch.hung:
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
            pod_labels = _pod_label_pairs(pods.get(entity.key), base)
            for i, value in rows:
                extra: Labels = ()
                if self._metrics[i][1].name == XID_FIELD:
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
        for i, (counter, field) in enumerate(self._metrics):
            key = (entity.key, counter.name)
            if key in self._unsupported:
                continue
            try:
                rows.append((i, self._calls.read(entity, field)))
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
        for counter, field in self._label_fields:
            try:
                pairs.append((counter.name, self._calls.label(entity, field)))
            except FieldNotSupported:
                self._unsupported.add((entity.key, counter.name))
            except FieldUnavailable:
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
            for counter, _ in (*self._metrics, *self._label_fields):
                ok = (entity.key, counter.name) not in self._unsupported
                supported.add((*where, ("field", counter.name)), int(ok))
            for counter in self._never:
                supported.add((*where, ("field", counter.name)), 0)
            for windowed in (self._xid_count, self._clock_count):
                if windowed is not None:
                    supported.add((*where, ("field", windowed.name)), 1)
        fams.extend(self._pod_self_metrics())
        if self._shared is not None:
            fams.extend(self_metric_families(self._shared))
        fams.extend(self._backend_self_metrics())
        for more in self.more_self_metrics:
            fams.extend(more())
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


_POD_KEYS = ("container", "namespace", "pod")


def _pod_label_pairs(pod: dict[str, str] | None, base: Labels) -> Labels:
    """pod/namespace/container, then the pod's extra labels (sorted) minus any named like a label of the GPU."""
    if not pod:
        return ()
    taken = {k for k, _ in base}.union(_POD_KEYS, ("err_code", "err_msg"))
    extra = sorted((k, v) for k, v in pod.items() if k not in taken)
    return tuple((k, pod[k]) for k in _POD_KEYS) + tuple(extra)


def _where(entity: GpuEntity) -> str:
    gi = f" GPU instance {entity.gpu_instance_id}" if entity.gpu_instance_id is not None else ""
    return f"GPU {entity.gpu}{gi}"
