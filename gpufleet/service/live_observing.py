"""The live planes' observatory: their own series store, fed from their GPUs, kept in the
plane's SQLite file.

Owns :class:`LiveObserving`, used by the planes that keep their own series (no Prometheus):
the simulated cluster's (:mod:`~gpufleet.service.embedded_plane`, on its scaled clock) and
this machine's (:mod:`~gpufleet.service.local_plane`, on the wall clock, its GPUs read through
NVML). Each round (every 15 s of the plane's clock by default) it reads every GPU (the plane's
``TelemetrySource``; none: a round of no readings), tags each pod's series with its queue,
tenant, workload and kind from the plane's records, hands both to the
:class:`~gpufleet.service.observatory.Observatory`, and every :data:`SAVE_EVERY_S` saves the
series and the pods' usage summaries into the plane's store, so a restarted ``gpufleet serve``
keeps its day of fine points (one per round: :func:`store_shape`) and its 30 days of coarse
ones (a killed process loses what came
after the last save, at most :data:`SAVE_EVERY_S` of the plane's clock; a clean stop saves).

Saves are incremental: the store's durable form (``SeriesStore.durable``) is a head (series,
per-id arrays and the chunks still written to, a few MB at fleet scale) and sealed chunks that
never change; a save writes the head (:data:`SERIES_BLOB`) and only the sealed chunks not yet
written (:data:`CHUNK_PREFIX` and their key), deletes those let go, and writes the usage
summaries of the pods sampled (or forgotten) since the last save as rows of the store's
``pod_usage`` table (an older gpufleet's one blob of them all, :data:`USAGE_BLOB`, is read
once and replaced by rows at the first save). Under the observatory's lock a save only
forgets the summaries past their 30 days, takes that form (the open chunks copied, the
sealed ones shared) and copies the changed summaries (milliseconds: the rounds and the
API's queries wait for it); it deflates the head after letting it go, and writes in one
transaction under the plane's lock, each sealed chunk's piece made as it is written (its
packed planes as they are: no work, and one piece in memory at a time), then hands the
heap's free pages back to the system (``native_heap``, which also keeps the chunks' arrays
out of the heap). A store saved whole by
an older gpufleet (format 1, one blob) is read and converted, then saved in chunks. The
alerts' states are kept apart, at every change (:mod:`~gpufleet.service.alert_state`). Lock
order: the plane's lock is never requested while holding the observatory's (what a round
needs of the records is copied first).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from gpufleet.model.alerts import AlertRule
from gpufleet.service.alert_state import AlertStateKeeper
from gpufleet.service.native_heap import map_large_blocks, release_free_heap
from gpufleet.service.observatory import STEP_S, Observatory, ObservedRound
from gpufleet.service.records import WorkloadRecord, pods_of
from gpufleet.service.store import Store
from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.pod_usage import PodKey, PodUsage, split
from gpufleet.telemetry.recording import SeriesRecorder
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import StoreShape
from gpufleet.telemetry.source import TelemetrySource

log = logging.getLogger(__name__)

SERIES_BLOB = "telemetry.series"
#: The key prefix of the series store's sealed chunks (then "fine.<step>", "coarse.<bucket>").
CHUNK_PREFIX = "telemetry.series/"
#: Where an older gpufleet kept every pod's usage summary, rewritten whole at each save (now
#: rows of the store's ``pod_usage`` table, written as they change; read and deleted once).
USAGE_BLOB = "telemetry.usage"
#: Seconds of the plane's clock between saves of the series (and at stop).
SAVE_EVERY_S = 300.0
#: How long a pod's usage summary is kept after it was last seen (the coarse ring's 30 days).
USAGE_KEEP_S = 30 * 86_400.0


def store_shape(step_s: float) -> StoreShape:
    """The series store's rings for rounds every ``step_s``: a point per round (the store keeps
    one per fine step, stamped at its start, so a coarser step would leave a window shorter than
    it without a point at most instants), a day of them; the default shape at the default step.
    ValueError for a step that is not a whole number of seconds dividing the coarse step."""
    default = StoreShape()
    if step_s == default.fine_step_s:
        return default
    step = round(step_s)
    if step != step_s or step < 1 or default.coarse_step_s % step:
        raise ValueError(
            f"the observatory's step must be a whole number of seconds dividing "
            f"{default.coarse_step_s}, got {step_s}"
        )
    return replace(default, fine_step_s=step, fine_points=default.fine_span_s // step)


class ObservedPlane(Protocol):
    lock: threading.RLock
    telemetry: TelemetrySource | None
    store: Store

    @property
    def records(self) -> dict[str, WorkloadRecord]: ...

    def now(self) -> float: ...


class LiveObserving:
    """See the module docstring."""

    def __init__(
        self,
        plane: ObservedPlane,
        rules: Sequence[AlertRule],
        step_s: float = STEP_S,
    ) -> None:
        self.plane = plane
        map_large_blocks()  # the store's chunks come and go: see ``native_heap``
        store, chunks = self._restored_store(plane.store, store_shape(step_s))
        self.recorder = SeriesRecorder(store)
        self.recorder.adopt()
        usage, from_blob = self._restored_usage(plane.store)
        self.recorder.usage.put_all(sorted(usage.items(), key=lambda item: item[1].last))
        #: Whether the summaries came from an older gpufleet's blob (rewritten as rows, and
        #: the blob deleted, at the first save).
        self._usage_blob = from_blob
        if from_blob:
            self.recorder.changed.update(usage)
        #: The sealed chunks in the plane's store, by key, with the version written (-1: one
        #: the head does not name, deleted at the next save).
        sealed = store.durable().sealed
        self._written = {key: sealed[key].version if key in sealed else -1 for key in chunks}
        self._save_lock = threading.Lock()
        self._starts: dict[PodKey, float] = {}
        self.observatory = Observatory(
            ObservedSeries(self.recorder, lambda: self._starts),
            rules,
            plane.now,
            self.recorder,
            step_s,
        )
        self._saved_at: float | None = None
        # The alerts' states, kept in their own blob whenever one changes (``alert_state``).
        AlertStateKeeper.attach(plane.store, self.observatory, plane.lock)

    def round(self) -> ObservedRound | None:
        """Read, record and evaluate at the newest instant of the step's grid, after
        evaluating any instants missed since the last round (``Observatory.catch_up``)."""
        source = self.plane.telemetry
        with self.plane.lock:
            clock = self.plane.now()
        due = self.observatory.catch_up(clock)
        if not due:
            return None
        [now] = due  # a fixed instant: the reading is stamped with it
        with self.plane.lock:
            readings = source.read() if source is not None else []
            tags, starts = pods_of(self.plane.records)
        self._starts = starts
        observed = self.observatory.observe(now, readings, tags)
        if self._saved_at is None or now - self._saved_at >= SAVE_EVERY_S:
            self.save(now)
        return observed

    def save(self, now: float | None = None) -> None:
        """Write what changed of the series and usage summaries into the plane's store."""
        with self._save_lock:
            with self.observatory.lock:
                at = now if now is not None else self.observatory.last_round or 0.0
                # Ended pods' series are dropped by every round (``Observatory.observe``); a
                # save only forgets the summaries past their 30 days (not a scan of every pod).
                self.recorder.forget_usage(at - USAGE_KEEP_S)
                durable = self.recorder.store.durable()
                # Only the summaries that changed since the last save are written (a few
                # hundred pods, not the 30 days' 150,000): their rows are copied here.
                usage_rows, usage_gone = self.recorder.usage.saved_rows(
                    self.recorder.take_changed()
                )
            head = durable.head(compress=True)
            unwritten = [
                (key, form)
                for key, form in durable.sealed.items()
                if self._written.get(key) != form.version
            ]
            gone = [key for key in self._written if key not in durable.sealed]
            with self.plane.lock, self.plane.store.transaction():
                # A sealed chunk's piece is its packed planes as they are (a copy, no work):
                # made one at a time, so a save holds one piece's bytes at most, not all.
                for key, form in unwritten:
                    self.plane.store.set_blob(
                        CHUNK_PREFIX + key, durable.chunk_bytes(form, compress=True)
                    )
                for key in gone:
                    self.plane.store.delete_blob(CHUNK_PREFIX + key)
                self.plane.store.set_blob(SERIES_BLOB, head)
                self.plane.store.set_pod_usage(usage_rows)
                self.plane.store.delete_pod_usage(usage_gone)
                if self._usage_blob:
                    self.plane.store.delete_blob(USAGE_BLOB)
            self._usage_blob = False
            self._written = {key: form.version for key, form in durable.sealed.items()}
            self._saved_at = at
            del durable, head, unwritten, usage_rows
            release_free_heap()

    @staticmethod
    def _restored_store(store: Store, shape: StoreShape) -> tuple[SeriesStore, set[str]]:
        """The series store kept in ``store`` (an empty one of ``shape`` if none or unreadable)
        and the keys of the sealed chunks found there."""
        data = store.blob(SERIES_BLOB)
        found = store.blobs(CHUNK_PREFIX)
        chunks = {key.removeprefix(CHUNK_PREFIX): value for key, value in found.items()}
        if data is None:
            return SeriesStore(shape=shape), set(chunks)
        try:
            restored = SeriesStore.from_bytes(data, chunks)
        except ValueError as error:
            log.error(
                "%s: the stored telemetry series are unreadable (%s); starting empty",
                store.path,
                error,
            )
            return SeriesStore(shape=shape), set(chunks)
        if restored.shape.fine_step_s != shape.fine_step_s:
            log.warning(
                "%s: the stored series have a point every %d s, the rounds run every %d s; "
                "windows shorter than %d s may find no point",
                store.path, restored.shape.fine_step_s, shape.fine_step_s,
                restored.shape.fine_step_s,
            )  # fmt: skip
        return restored, set(chunks)

    @staticmethod
    def _restored_usage(store: Store) -> tuple[dict[PodKey, PodUsage], bool]:
        """The pods' usage summaries kept in ``store`` (its ``pod_usage`` rows, or the one
        JSON blob of an older gpufleet) and whether they came from that blob."""
        usage: dict[PodKey, PodUsage] = {}
        for key, samples, total, first, last in store.pod_usage():
            usage[split(key)] = PodUsage(samples, total, first, last)
        data = store.blob(USAGE_BLOB)
        if usage or data is None:
            return usage, data is not None
        for key, (samples, total, first, last) in json.loads(data).items():
            usage[split(str(key))] = PodUsage(int(samples), float(total), float(first), float(last))
        return usage, True
