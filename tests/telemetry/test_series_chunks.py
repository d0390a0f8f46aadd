"""The store's time chunks: memory follows the series written (a short-lived series holds
none once dropped and its chunks compacted or let go, growth adds chunks instead of doubling),
a reused id shows nothing of its former owner, and the incremental durable form (a head and
the sealed chunks written once each) restores what the store holds, whole or in format 1."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.telemetry import series_codec
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import MetricSpec, StoreShape
from gpufleet.telemetry.series_rings import COARSE_CHUNK, FINE_CHUNK
from gpufleet.testing.series import SMALL_SHAPE, UTIL, filled_store

#: Three fine chunks of an hour (15 s steps) and two coarse chunks (1 minute buckets).
CHUNKED = StoreShape(fine_step_s=15, fine_points=720, coarse_step_s=60, coarse_points=288)


def durable_pieces(store: SeriesStore, written: dict[str, bytes]) -> bytes:
    """Save ``store`` as the embedded plane does: the head, and the sealed chunks not yet in
    ``written`` (by key and version), deleting those let go; returns the head."""
    durable = store.durable()
    for key, form in durable.sealed.items():
        stored = written.get(key)
        if stored is None or series_codec.unpack(stored)[1]["chunk"][2] != form.version:
            written[key] = durable.chunk_bytes(form, compress=True)
    for key in [k for k in written if k not in durable.sealed]:
        del written[key]
    return durable.head(compress=True)


def test_a_short_lived_series_holds_no_memory_once_dropped() -> None:
    shape = StoreShape()
    lasting = SeriesStore([UTIL], shape)
    both = SeriesStore([UTIL], shape)
    device = lasting.add("util", {"gpu": "0"})
    assert both.add("util", {"gpu": "0"}) == device
    pod = both.add("util", {"pod": "a"})
    for k in range(3 * 144):  # three days, a snapshot every 10 minutes
        t = k * 600.0
        lasting.append(t, [device], [50.0])
        both.append(t, [device, pod] if k < 6 else [device], [50.0, 10.0][: 2 if k < 6 else 1])
        if k == 150:  # a day after its last point, as the recorder forgets an ended pod
            both.drop(pod)
    assert both.nbytes == lasting.nbytes


def test_growth_adds_chunks_not_doubled_rings() -> None:
    store = SeriesStore([UTIL])
    ids = store.add_many("util", [{"gpu": str(g)} for g in range(1_000)])
    store.append(0.0, ids, np.full(1_000, 30.0))
    dense = 1_000 * (5_760 * 2 + 4_320 * 3)
    chunks = 1_016 * (FINE_CHUNK * 2 + COARSE_CHUNK * 3)
    assert store.nbytes < chunks + 100_000 < dense // 10


def test_a_reused_id_shows_nothing_of_its_former_owner() -> None:
    store = SeriesStore([UTIL], CHUNKED)
    old = store.add("util", {"pod": "old"})
    for k in range(600):  # two and a half fine chunks
        store.append(k * 15.0, [old], [90.0])
    store.drop(old)
    new = store.add("util", {"pod": "new"})
    assert new == old
    store.append(600 * 15.0, [new], [10.0])
    now = 600 * 15.0
    assert store.query("util", "max", 3 * 3_600, now) == {
        (("pod", "new"),): pytest.approx(10.0, abs=0.01)
    }
    assert store.query("util", "count", 4 * 3_600, now) == {(("pod", "new"),): 1.0}
    times, _ = store.fine_points(new)
    assert times.tolist() == [now]
    assert store.coarse_points(new).times.tolist() == [now - now % 60]


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.integers(1, 1_500),
    save_every=st.integers(1, 400),
    compress=st.booleans(),
)
def test_incremental_saves_restore_the_store(
    seed: int, steps: int, save_every: int, compress: bool
) -> None:
    rng = np.random.default_rng(seed)
    store = SeriesStore([UTIL], CHUNKED)
    names = [{"pod": str(p)} for p in range(6)]
    live = {store.add("util", names[p]): p for p in range(3)}
    written: dict[str, bytes] = {}
    head = b""
    for step in range(steps):
        if rng.random() < 0.01 and live:  # a pod goes, another comes (ids reused)
            gone = int(rng.choice(list(live)))
            store.drop(gone)
            del live[gone]
            free = sorted(set(range(6)) - set(live.values()))
            if free:
                pod = int(rng.choice(free))
                live[store.add("util", names[pod])] = pod
        ids = np.array(sorted(live), np.int64)
        values = np.where(rng.random(ids.size) < 0.1, np.nan, rng.uniform(0, 100, ids.size))
        store.append(step * 15.0, ids, values)
        if step % save_every == 0 or step == steps - 1:
            head = durable_pieces(store, written)
    restored = SeriesStore.from_bytes(head, written)
    assert restored.to_bytes() == store.to_bytes()
    whole = SeriesStore.from_bytes(store.to_bytes(compress=compress))
    now = (steps - 1) * 15.0
    for window in (900.0, 3 * 3_600.0, 12 * 3_600.0):
        for fn in ("avg", "max", "count", "last"):
            expected = store.query("util", fn, window, now)
            assert restored.query("util", fn, window, now) == expected
            assert whole.query("util", fn, window, now) == expected


def test_a_head_without_its_sealed_chunks_is_refused() -> None:
    store = SeriesStore([UTIL], CHUNKED)
    series = store.add("util", {"gpu": "0"})
    for k in range(300):
        store.append(k * 15.0, [series], [5.0])
    written: dict[str, bytes] = {}
    head = durable_pieces(store, written)
    assert written, "a fine chunk was sealed"
    with pytest.raises(ValueError, match=r"sealed chunk fine\.0 is missing"):
        SeriesStore.from_bytes(head, {})


def v1_bytes(store: SeriesStore, shape: StoreShape, ids: npt.NDArray[np.int64]) -> bytes:
    """``store`` in format 1 (dense rings, steps x ids), as gpufleet before chunks wrote it."""
    newest = store._rings.newest  # a format the store no longer writes: built from its points
    assert newest is not None
    capacity = int(ids.max()) + 1
    fine = np.full((shape.fine_points, capacity), 65535, np.uint16)
    fine_step = np.full(shape.fine_points, -1, np.int64)
    steps = np.arange(max(0, newest - shape.fine_points + 1), newest + 1)
    block, stamped = store._rings.fine_block(int(steps[0]), newest, ids)
    fine[np.ix_(steps % shape.fine_points, ids)] = block
    fine_step[steps[stamped] % shape.fine_points] = steps[stamped]
    per = shape.fine_per_coarse
    buckets = np.arange(max(0, newest // per - shape.coarse_points + 1), newest // per + 1)
    planes, counts = store._rings.coarse_block(int(buckets[0]), newest // per, ids)
    coarse = []
    for plane in planes:
        dense = np.full((shape.coarse_points, capacity), 255, np.uint8)
        dense[np.ix_(buckets % shape.coarse_points, ids)] = plane
        coarse.append(dense)
    bucket_of = np.full(shape.coarse_points, -1, np.int64)
    bucket_of[buckets % shape.coarse_points] = buckets
    count = np.zeros(shape.coarse_points, np.uint16)
    count[buckets % shape.coarse_points] = counts
    last_step = np.full(capacity, -1, np.int64)
    last_step[ids] = newest
    meta = series_codec.header_meta(
        series_codec.Header(
            shape,
            list(store.metrics.values()),
            [(int(i), "util", store.key_of(int(i))[1]) for i in ids],
            capacity,
            newest,
            0,
        )
    )
    arrays: dict[str, npt.NDArray[Any]] = {
        "fine": fine,
        "fine_step": fine_step,
        "coarse_mean": coarse[0],
        "coarse_max": coarse[1],
        "coarse_min": coarse[2],
        "coarse_bucket": bucket_of,
        "coarse_count": count,
        "last_step": last_step,
    }
    data = series_codec.pack(meta, arrays, compress=True)
    return data[:8] + struct.pack("<H", 1) + data[10:]


def test_format_1_is_read_and_converted() -> None:
    raw = np.random.default_rng(3).uniform(0, 100, (90, 3))
    raw[::7, 1] = np.nan
    store, ids = filled_store(raw, start_step=500, shape=SMALL_SHAPE)
    old = v1_bytes(store, SMALL_SHAPE, ids)
    restored = SeriesStore.from_bytes(old)
    now = (500 + 89) * 15.0
    for window in (300.0, 1_200.0):
        for fn in ("avg", "max", "min", "count", "last"):
            assert restored.query("util", fn, window, now) == store.query("util", fn, window, now)
    assert restored.series("util") == store.series("util")


def test_chunk_spans_divide_the_rings() -> None:
    store = SeriesStore([MetricSpec("m", 0.0, 1.0)], StoreShape(fine_points=7, coarse_step_s=15))
    series = store.add("m", {})
    for k in range(30):
        store.append(k * 15.0, [series], [0.5])
    times, _ = store.fine_points(series)
    assert times.tolist() == [k * 15.0 for k in range(23, 30)]
