"""Sealed chunks kept packed (issue 29 item 12): packing gives back every code bit for bit, a
steady series' sealed chunks take a fraction of their codes' bytes, windows over whole sealed
chunks are answered from their summaries with exactly the values their codes give, a save
writes the packed planes as they are, and a corrupt packed plane is refused on restore."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpufleet.telemetry import series_codec
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import StoreShape, as_labels
from gpufleet.telemetry.series_packing import BLOCK_BYTES, Packed, pack_plane, unpack_plane
from gpufleet.telemetry.series_window import reduce_coarse, reduce_fine
from gpufleet.testing.series import UTIL, filled_store

#: Three fine chunks of an hour (15 s steps) and two coarse chunks of 144 one-minute buckets.
CHUNKED = StoreShape(fine_step_s=15, fine_points=720, coarse_step_s=60, coarse_points=288)

#: Each code dtype and its largest code (the missing one).
TOPS: dict[np.dtype[Any], int] = {np.dtype(np.uint8): 255, np.dtype(np.uint16): 65_535}
planes = st.sampled_from(list(TOPS)).flatmap(
    lambda dtype: arrays(
        dtype,
        st.tuples(st.integers(0, 50), st.integers(0, 12)),
        elements=st.integers(0, TOPS[dtype]),
    )
)


@settings(max_examples=200, deadline=None)
@given(plane=planes)
def test_unpacking_gives_back_every_code(plane: npt.NDArray[np.unsignedinteger]) -> None:
    again = unpack_plane(pack_plane(plane))
    assert again.dtype == plane.dtype
    assert again.shape == plane.shape
    assert np.array_equal(again, plane)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16], ids=["uint8", "uint16"])
def test_a_plane_of_many_blocks_comes_back_whole(dtype: type[np.unsignedinteger]) -> None:
    rng = np.random.default_rng(7)
    steps = 3 * BLOCK_BYTES // (1_000 * np.dtype(dtype).itemsize) + 5  # blocks, and a part one
    plane = rng.integers(0, np.iinfo(dtype).max + 1, (steps, 1_000)).astype(dtype)
    plane[:, :3] = np.iinfo(dtype).max  # never written
    plane[:, 3] = np.arange(steps) % 3  # a steady one
    assert np.array_equal(unpack_plane(pack_plane(plane)), plane)


@pytest.mark.parametrize(
    ("data", "shape"),
    [
        pytest.param(b"not deflated", (2, 2), id="not-zlib"),
        pytest.param(pack_plane(np.zeros((2, 2), np.uint16)).data, (2, 3), id="wrong-size"),
    ],
)
def test_a_corrupt_packed_plane_is_refused(data: bytes, shape: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="packed plane"):
        unpack_plane(Packed(data, shape, np.dtype(np.uint16)))


def steady_store(hours: int, series: int = 100) -> SeriesStore:
    store = SeriesStore([UTIL])
    ids = store.add_many("util", [{"gpu": str(g)} for g in range(series)])
    levels = np.linspace(0.0, 100.0, series)
    for step in range(hours * 240):
        store.append(step * 15.0, ids, levels)
    return store


def test_a_steady_series_sealed_chunks_take_a_fraction_of_their_codes() -> None:
    store = steady_store(hours=3)  # two sealed fine chunks of an hour, one open
    codes = 240 * 100 * 2  # an hour of 100 series' uint16 codes
    sealed = [c for c in store._rings.fine if c.sealed]
    assert len(sealed) == 2
    for chunk in sealed:
        assert chunk.packed is not None
        assert sum(p.nbytes for p in chunk.packed) < codes / 20


def reference(
    store: SeriesStore, fn: str, window_s: float, now: float
) -> dict[tuple[tuple[str, str], ...], float]:
    """``fn`` over the window from the points' codes (the path of ``last`` and ``quantile``:
    every chunk's codes gathered), for every series; what folding must equal exactly."""
    shape, rings = store.shape, store._rings
    newest = rings.newest
    assert newest is not None
    labels, rows = store._rows_of("util", None)
    lo, hi = store._lo[rows], store._hi[rows]
    first = int(np.floor((now - window_s) / shape.fine_step_s)) + 1
    last = min(int(np.floor(now / shape.fine_step_s)), newest)
    if first >= newest - shape.fine_points + 1:
        block, stamped = rings.fine_block(first, last, rows)
        values, has = reduce_fine(fn, block[stamped], shape.fine, lo, hi)  # type: ignore[arg-type]
    else:
        bucket = newest // shape.fine_per_coarse
        (mean, top, least), counts = rings.coarse_block(
            max(int(np.floor((now - window_s) / shape.coarse_step_s)) + 1,
                bucket - shape.coarse_points + 1),
            min(int(np.floor(now / shape.coarse_step_s)), bucket),
            rows,
        )  # fmt: skip
        values, has = reduce_coarse(fn, mean, top, least, counts, shape.coarse, lo, hi)  # type: ignore[arg-type]
    return {labels[i]: float(values[i]) for i in np.flatnonzero(has)}


readings = st.one_of(st.floats(0, 100, allow_nan=False), st.just(np.nan))


@settings(max_examples=30, deadline=None)
@given(
    raw=st.integers(1, 4).flatmap(
        lambda n: arrays(
            np.float64, st.tuples(st.integers(250, 1_100), st.just(n)), elements=readings
        )
    ),
    start=st.integers(0, 1_000),
    drop=st.booleans(),
    windows=st.lists(st.integers(1, 4 * 86_400), min_size=1, max_size=4),
)
def test_folded_windows_equal_the_codes_reductions_exactly(
    raw: npt.NDArray[np.float64], start: int, drop: bool, windows: list[int]
) -> None:
    store, ids = filled_store(raw, start_step=start, shape=CHUNKED)
    if drop and len(ids) > 1:
        store.drop(int(ids[0]))
        again = store.add("util", {"gpu": "again"})
        store.append((start + len(raw)) * 15.0, [again], [42.0])
    now = float((start + len(raw)) * 15)
    for window in [*windows, 3_600, 3 * 3_600, 6 * 3_600]:
        for fn in ("avg", "max", "min", "count"):
            assert store.query("util", fn, window, now) == reference(store, fn, window, now)


def test_a_save_writes_the_packed_planes_as_they_are() -> None:
    store = steady_store(hours=2)
    durable = store.durable()
    (form,) = [f for f in durable.sealed.values() if f.ring == "fine"]
    piece = durable.chunk_bytes(form, compress=True)
    packed = form.planes[0]
    assert isinstance(packed, Packed)
    assert packed.data in piece  # not deflated again
    _, _, _, planes = series_codec.unpack_piece(piece)
    assert planes["p0"] == packed
    restored = SeriesStore.from_bytes(durable.head(compress=True), {form.key: piece})
    now = 2 * 3_600.0 - 15
    assert restored.query("util", "avg", 7_200, now) == store.query("util", "avg", 7_200, now)
    assert restored.fine_points(0)[1].tolist() == store.fine_points(0)[1].tolist()


def test_a_corrupt_sealed_chunk_is_refused_on_restore() -> None:
    store = steady_store(hours=2, series=3)
    durable = store.durable()
    (form,) = [f for f in durable.sealed.values() if f.ring == "fine"]
    piece = bytearray(durable.chunk_bytes(form, compress=True))
    piece[-5] ^= 0xFF  # inside the packed plane's bytes
    with pytest.raises(ValueError, match="packed plane"):
        SeriesStore.from_bytes(durable.head(compress=True), {form.key: bytes(piece)})


def test_old_data_reads_the_same_packed_as_unpacked() -> None:
    raw = np.tile(np.array([[10.0, 95.5, np.nan]]), (900, 1))
    raw[::7, 1] = 3.0
    store, _ = filled_store(raw, shape=CHUNKED)
    now = 900 * 15.0
    key = as_labels({"gpu": "1"})
    assert store.query("util", "min", 6 * 3_600, now)[key] == pytest.approx(3.0, abs=0.2)
    assert store.query("util", "max", 3_600, now)[key] == pytest.approx(95.5, abs=0.01)
    assert as_labels({"gpu": "2"}) not in store.query("util", "count", 6 * 3_600, now)
