"""The durable form of a series store: a versioned header and the raw numpy arrays, so the
control plane can keep the store as one blob (in its SQLite database) and restore it.

Layout, little-endian: the magic ``GFSERIES``, a ``uint16`` format version, a ``uint8`` flags
byte (bit 0: the payload is zlib-compressed), a ``uint32`` header length, the header as UTF-8
JSON (the store's shape and metrics, each live series' id, metric and labels, and each array's
name, dtype and shape), then the payload: the arrays' bytes in the header's order, C order.
Owns only the bytes; which arrays a store has and what they mean is the store's.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.telemetry.series_layout import Labels, MetricSpec, StoreShape, as_labels

MAGIC = b"GFSERIES"
VERSION = 1
_PREFIX = struct.Struct("<8sHBI")
_COMPRESSED = 1


@dataclass(frozen=True, slots=True)
class Header:
    """What a store is besides its arrays."""

    shape: StoreShape
    metrics: list[MetricSpec]
    #: (id, metric, labels) of each live series.
    series: list[tuple[int, str, Labels]]
    #: Ids handed out so far (a dropped one below it is free for reuse).
    used: int
    newest: int | None
    clipped: int


def encode(header: Header, arrays: dict[str, npt.NDArray[Any]], compress: bool) -> bytes:
    meta = {
        "shape": asdict(header.shape),
        "metrics": [asdict(spec) for spec in header.metrics],
        "series": [
            [row, metric, [list(pair) for pair in labels]] for row, metric, labels in header.series
        ],
        "used": header.used,
        "newest": header.newest,
        "clipped": header.clipped,
        "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()],
    }
    text = json.dumps(meta, separators=(",", ":")).encode()
    payload = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays.values())
    if compress:
        payload = zlib.compress(payload, 1)
    flags = _COMPRESSED if compress else 0
    return _PREFIX.pack(MAGIC, VERSION, flags, len(text)) + text + payload


def decode(data: bytes) -> tuple[Header, dict[str, npt.NDArray[Any]]]:
    """The header and arrays of ``data``; ``ValueError`` saying what is wrong otherwise."""
    if len(data) < _PREFIX.size:
        raise ValueError(f"series store: {len(data)} bytes is too short for its header")
    magic, version, flags, length = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"series store: magic {magic!r} is not {MAGIC!r}")
    if version != VERSION:
        raise ValueError(f"series store: format version {version} is not supported ({VERSION})")
    try:
        meta = json.loads(data[_PREFIX.size : _PREFIX.size + length])
        header = Header(
            shape=StoreShape(**meta["shape"]),
            metrics=[MetricSpec(**spec) for spec in meta["metrics"]],
            series=[(int(row), str(m), as_labels(map(tuple, ls))) for row, m, ls in meta["series"]],
            used=int(meta["used"]),
            newest=None if meta["newest"] is None else int(meta["newest"]),
            clipped=int(meta["clipped"]),
        )
        layout = [(str(n), np.dtype(d), tuple(int(x) for x in s)) for n, d, s in meta["arrays"]]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"series store: header is malformed: {error}") from error
    payload = data[_PREFIX.size + length :]
    if flags & _COMPRESSED:
        try:
            payload = zlib.decompress(payload)
        except zlib.error as error:
            raise ValueError(f"series store: compressed payload is corrupt: {error}") from error
    arrays: dict[str, npt.NDArray[Any]] = {}
    offset = 0
    for name, dtype, shape in layout:
        size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if offset + size > len(payload):
            raise ValueError(f"series store: payload ends inside array {name!r}")
        arrays[name] = (
            np.frombuffer(payload, dtype, int(np.prod(shape)), offset).reshape(shape).copy()
        )
        offset += size
    if offset != len(payload):
        raise ValueError(f"series store: {len(payload) - offset} bytes after the last array")
    _check(header, arrays)
    return header, arrays


def _check(header: Header, arrays: dict[str, npt.NDArray[Any]]) -> None:
    shape = header.shape
    expected = {
        "fine": (shape.fine_points, None),
        "fine_step": (shape.fine_points,),
        "coarse_mean": (shape.coarse_points, None),
        "coarse_max": (shape.coarse_points, None),
        "coarse_min": (shape.coarse_points, None),
        "coarse_bucket": (shape.coarse_points,),
        "coarse_count": (shape.coarse_points,),
        "last_step": (None,),
    }
    if set(arrays) != set(expected):
        raise ValueError(f"series store: arrays {sorted(arrays)} are not {sorted(expected)}")
    capacity = arrays["fine"].shape[1]
    for name, dims in expected.items():
        want = tuple(capacity if d is None else d for d in dims)
        if arrays[name].shape != want:
            raise ValueError(
                f"series store: array {name!r} has shape {arrays[name].shape}, not {want}"
            )
    known = {spec.name for spec in header.metrics}
    for row, metric, _ in header.series:
        if metric not in known or not 0 <= row < header.used <= capacity:
            raise ValueError(f"series store: series {row} ({metric}) is not a known metric or id")
