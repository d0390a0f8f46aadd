"""The durable form of a series store: a round trip keeps every series and point; anything
that is not a store it wrote is refused with a message saying what is wrong."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_codec import MAGIC
from gpufleet.telemetry.series_layout import DEVICE_METRICS, StoreShape
from gpufleet.testing.series import filled_store


def test_round_trip_at_the_default_shape_keeps_queries_and_ids() -> None:
    store = SeriesStore(DEVICE_METRICS, StoreShape())
    util = store.add_many("DCGM_FI_DEV_GPU_UTIL", [{"gpu": str(g), "node": "n"} for g in range(3)])
    temp = store.add("DCGM_FI_DEV_GPU_TEMP", {"gpu": "0", "node": "n"})
    rng = np.random.default_rng(7)
    for k in range(100):
        ids = np.append(util, temp)
        store.append(k * 15.0, ids, np.append(rng.uniform(0, 100, 3), 60 + k % 5))
    data = store.to_bytes()
    restored = SeriesStore.from_bytes(data)
    now = 99 * 15.0
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"):
        for window in (900.0, 3 * 86_400.0):
            assert restored.query(metric, "avg", window, now) == store.query(
                metric, "avg", window, now
            )
    assert restored.series("DCGM_FI_DEV_GPU_TEMP") == store.series("DCGM_FI_DEV_GPU_TEMP")
    assert restored.shape == store.shape
    # Only the chunks written are kept: 4 series in one fine chunk and one coarse chunk, far
    # below a dense day of fine points per series (5,760 x 2 bytes each).
    assert len(store.to_bytes(compress=True)) < len(data) < 4 * 5_760 * 2


def corrupt(data: bytes, how: str) -> bytes:
    prefix = struct.calcsize("<8sHBI")
    if how == "short":
        return data[:5]
    if how == "magic":
        return b"NOTASTOR" + data[8:]
    if how == "version":
        return data[:8] + struct.pack("<H", 99) + data[10:]
    if how == "header":
        return data[:prefix] + b"[" + data[prefix + 1 :]
    if how == "truncated":
        return data[:-10]
    if how == "trailing":
        return data + b"\0\0"
    raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("short", "too short"),
        ("magic", "magic"),
        ("version", "format version 99"),
        ("header", "header is malformed"),
        ("truncated", "ends inside array"),
        ("trailing", "bytes after the last array"),
    ],
    ids=["short", "magic", "version", "header", "truncated", "trailing"],
)
def test_bad_bytes_are_refused_naming_what_is_wrong(how: str, message: str) -> None:
    store, _ = filled_store([[1.0, 2.0]])
    with pytest.raises(ValueError, match=message):
        SeriesStore.from_bytes(corrupt(store.to_bytes(), how))


def test_magic_is_at_the_start() -> None:
    store, _ = filled_store([[1.0]])
    assert store.to_bytes().startswith(MAGIC)
