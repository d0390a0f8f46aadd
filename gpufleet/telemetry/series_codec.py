"""The durable form of a series store: versioned pieces of a header and raw numpy arrays, so
the control plane keeps the store in its SQLite database and saves only what changed.

A piece, little-endian: the magic ``GFSERIES``, a ``uint16`` format version, a ``uint8`` flags
byte (bit 0: the payload is zlib-compressed), a ``uint32`` header length, the header as UTF-8
JSON (what the piece is, and each array's name, dtype and shape), then the payload: the arrays'
bytes in the header's order, C order (:func:`pack`, :func:`unpack`). Format 3 adds packed
planes (a sealed chunk's, as ``series_packing`` packs them and the store keeps them): the
header lists each one's name, dtype, shape and byte length under ``packed``, a ``uint64``
length of the payload follows the header, and the planes' bytes follow the payload
(:func:`unpack_piece` leaves them packed). Formats 1 and 2 are still read.

Format 2 (:class:`Durable`): a *head* (the store's shape and metrics, each live series' id,
metric and labels, the per-id arrays and the chunks still written to, inline) and one piece
per sealed chunk (:meth:`Durable.chunk_bytes`), which never changes once written: the head
names the sealed chunks it needs by key and version, so a save writes the head and only the
chunks it lacks. :meth:`Durable.whole` puts every chunk inline (one blob). Format 1 (the
dense rings of before) is read by ``SeriesStore.from_bytes``, which converts it.
Owns only the bytes; what the arrays mean is the store's (``series.py``, ``series_rings.py``).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from gpufleet.telemetry.series_layout import Labels, MetricSpec, StoreShape, as_labels
from gpufleet.telemetry.series_packing import Packed, unpack_plane

MAGIC = b"GFSERIES"
VERSION = 3
READABLE = (1, 2, 3)
_PREFIX = struct.Struct("<8sHBI")
_COMPRESSED = 1
Arrays = dict[str, npt.NDArray[Any]]
#: Planes packed as ``series_packing`` packs them, by name.
PackedPlanes = dict[str, Packed]
#: The arrays a format-2 head keeps per series id.
PER_ID = ("last_step", "born_fine", "born_coarse")


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


class ChunkForm(NamedTuple):
    """A chunk of ring ``ring`` ("fine" or "coarse"): its columns' ids, planes and marks."""

    ring: str
    start: int
    version: int
    sealed: bool
    ids: npt.NDArray[np.int64]
    #: Arrays (an open chunk's) or packed planes (a sealed one's, as the store keeps them).
    planes: Sequence[npt.NDArray[Any] | Packed]
    marks: npt.NDArray[Any]

    @property
    def key(self) -> str:
        return f"{self.ring}.{self.start}"


def pack(
    meta: dict[str, Any], arrays: Arrays, compress: bool, packed: PackedPlanes | None = None
) -> bytes:
    """One piece: ``meta`` (JSON), ``arrays`` and, after them, ``packed`` planes (their bytes
    as they are: already deflated)."""
    packed = packed or {}
    meta = {**meta, "arrays": [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()]}
    if packed:
        meta["packed"] = [
            [name, p.dtype.str, list(p.shape), len(p.data)] for name, p in packed.items()
        ]
    text = json.dumps(meta, separators=(",", ":")).encode()
    # The arrays' bytes are fed as they lie (no copy of them all at once: a save's passing
    # memory), deflated as they come where ``compress``.
    views = [np.ascontiguousarray(a).reshape(-1).view(np.uint8).data for a in arrays.values()]
    if compress:
        deflate = zlib.compressobj(1)
        parts = [deflate.compress(view) for view in views]
        parts.append(deflate.flush())
    else:
        parts = [bytes(view) for view in views]
    size = sum(len(part) for part in parts)
    flags = _COMPRESSED if compress else 0
    prefix = _PREFIX.pack(MAGIC, VERSION, flags, len(text)) + text
    if packed:
        prefix += struct.pack("<Q", size)
    return b"".join([prefix, *parts, *(p.data for p in packed.values())])


def unpack(data: bytes) -> tuple[int, dict[str, Any], Arrays]:
    """The format version, meta and arrays of a piece (packed planes unpacked among them);
    ``ValueError`` saying what is wrong."""
    version, meta, arrays, packed = unpack_piece(data)
    for name, plane in packed.items():
        arrays[name] = unpack_plane(plane)
    return version, meta, arrays


def unpack_piece(data: bytes) -> tuple[int, dict[str, Any], Arrays, PackedPlanes]:
    """The format version, meta, arrays and packed planes (left packed) of a piece;
    ``ValueError`` saying what is wrong."""
    if len(data) < _PREFIX.size:
        raise ValueError(f"series store: {len(data)} bytes is too short for its header")
    magic, version, flags, length = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"series store: magic {magic!r} is not {MAGIC!r}")
    if version not in READABLE:
        raise ValueError(f"series store: format version {version} is not supported ({VERSION})")
    try:
        meta = json.loads(data[_PREFIX.size : _PREFIX.size + length])
        layout = [(str(n), np.dtype(d), tuple(int(x) for x in s)) for n, d, s in meta["arrays"]]
        packed_layout = [
            (str(n), np.dtype(d), (int(s[0]), int(s[1])), int(size))
            for n, d, s, size in meta.get("packed", [])
        ]
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise ValueError(f"series store: header is malformed: {error}") from error
    body = _PREFIX.size + length
    end = len(data)
    if packed_layout:
        if end < body + 8:
            raise ValueError("series store: piece ends before its packed planes' offset")
        (size,) = struct.unpack_from("<Q", data, body)
        body += 8
        end = body + size
        if end > len(data):
            raise ValueError("series store: payload ends inside the arrays")
    packed: PackedPlanes = {}
    offset = end
    for name, dtype, dims, size in packed_layout:
        if offset + size > len(data):
            raise ValueError(f"series store: piece ends inside packed plane {name!r}")
        packed[name] = Packed(bytes(data[offset : offset + size]), dims, dtype)
        offset += size
    if packed_layout and offset != len(data):
        raise ValueError(f"series store: {len(data) - offset} bytes after the last packed plane")
    payload = data[body:end]
    if flags & _COMPRESSED:
        try:
            payload = zlib.decompress(payload)
        except zlib.error as error:
            raise ValueError(f"series store: compressed payload is corrupt: {error}") from error
    arrays: Arrays = {}
    offset = 0
    for name, dtype, shape in layout:
        count = int(np.prod(shape, dtype=np.int64))
        size = dtype.itemsize * count
        if offset + size > len(payload):
            raise ValueError(f"series store: payload ends inside array {name!r}")
        arrays[name] = np.frombuffer(payload, dtype, count, offset).reshape(shape).copy()
        offset += size
    if offset != len(payload):
        raise ValueError(f"series store: {len(payload) - offset} bytes after the last array")
    return int(version), meta, arrays, packed


def header_meta(header: Header) -> dict[str, Any]:
    return {
        "shape": asdict(header.shape),
        "metrics": [asdict(spec) for spec in header.metrics],
        "series": [
            [row, metric, [list(pair) for pair in labels]] for row, metric, labels in header.series
        ],
        "used": header.used,
        "newest": header.newest,
        "clipped": header.clipped,
    }


def header_of(meta: dict[str, Any]) -> Header:
    """The header in ``meta``; ``ValueError`` if it is malformed."""
    try:
        return Header(
            shape=StoreShape(**meta["shape"]),
            metrics=[MetricSpec(**spec) for spec in meta["metrics"]],
            series=[(int(row), str(m), as_labels(map(tuple, ls))) for row, m, ls in meta["series"]],
            used=int(meta["used"]),
            newest=None if meta["newest"] is None else int(meta["newest"]),
            clipped=int(meta["clipped"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"series store: header is malformed: {error}") from error


@dataclass(frozen=True, slots=True)
class Durable:
    """A store's durable form as taken at one moment: its header, per-id arrays and chunks
    (the open ones copied, the sealed ones shared: they never change)."""

    header: Header
    per_id: Arrays
    open: list[ChunkForm]
    sealed: dict[str, ChunkForm]

    def head(self, compress: bool) -> bytes:
        """The head: everything but the sealed chunks, which it names (key, version)."""
        return self._encode(self.open, compress, external=True)

    def whole(self, compress: bool) -> bytes:
        """Every chunk inline: the store in one piece."""
        return self._encode([*self.sealed.values(), *self.open], compress, external=False)

    @staticmethod
    def chunk_bytes(chunk: ChunkForm, compress: bool) -> bytes:
        """A sealed chunk's piece (packed planes are written as they are, not deflated
        again)."""
        meta = {"chunk": [chunk.ring, chunk.start, chunk.version, chunk.sealed]}
        arrays, packed = _chunk_arrays("", chunk)
        return pack(meta, arrays, compress and not packed, packed)

    def _encode(self, chunks: list[ChunkForm], compress: bool, external: bool) -> bytes:
        meta = header_meta(self.header)
        meta["chunks"] = [[c.ring, c.start, c.version, c.sealed] for c in chunks]
        meta["sealed"] = [[key, c.version] for key, c in self.sealed.items()] if external else []
        arrays = dict(self.per_id)
        packed: PackedPlanes = {}
        for i, chunk in enumerate(chunks):
            more, more_packed = _chunk_arrays(f"{i}.", chunk)
            arrays.update(more)
            packed.update(more_packed)
        return pack(meta, arrays, compress, packed)


def _chunk_arrays(prefix: str, chunk: ChunkForm) -> tuple[Arrays, PackedPlanes]:
    arrays: Arrays = {f"{prefix}ids": chunk.ids, f"{prefix}marks": chunk.marks}
    packed: PackedPlanes = {}
    for k, plane in enumerate(chunk.planes):
        if isinstance(plane, Packed):
            packed[f"{prefix}p{k}"] = plane
        else:
            arrays[f"{prefix}p{k}"] = plane
    return arrays, packed


def read(
    meta: dict[str, Any],
    arrays: Arrays,
    external: Mapping[str, bytes],
    packed: PackedPlanes | None = None,
) -> tuple[Header, Arrays, list[ChunkForm]]:
    """A format-2 or 3 head's header, per-id arrays and chunks (its own ``arrays`` and
    ``packed`` planes, and sealed ones from ``external``, by key); ``ValueError`` saying what
    is wrong or missing."""
    header = header_of(meta)
    try:
        per_id = {name: arrays[name] for name in PER_ID}
        chunks = [
            _chunk_of(f"{i}.", str(ring), int(start), int(version), bool(sealed), arrays, packed)
            for i, (ring, start, version, sealed) in enumerate(meta["chunks"])
        ]
        for key, version in meta["sealed"]:
            data = external.get(str(key))
            if data is None:
                raise ValueError(f"series store: sealed chunk {key} is missing")
            _, chunk_meta, chunk_arrays, chunk_packed = unpack_piece(data)
            ring, start, got, _ = chunk_meta["chunk"]
            if int(got) != int(version):
                raise ValueError(
                    f"series store: sealed chunk {key} is version {got}, the head needs {version}"
                )
            chunks.append(
                _chunk_of("", str(ring), int(start), int(got), True, chunk_arrays, chunk_packed)
            )
    except (KeyError, TypeError) as error:
        raise ValueError(f"series store: header is malformed: {error}") from error
    _check(header, per_id, chunks)
    return header, per_id, sorted(chunks, key=lambda c: (c.ring, c.start))


def _chunk_of(
    prefix: str,
    ring: str,
    start: int,
    version: int,
    sealed: bool,
    arrays: Arrays,
    packed: PackedPlanes | None,
) -> ChunkForm:
    packed = packed or {}
    planes: list[npt.NDArray[Any]] = []
    while f"{prefix}p{len(planes)}" in arrays:
        planes.append(arrays[f"{prefix}p{len(planes)}"])
    packed_planes: list[Packed] = []
    while f"{prefix}p{len(packed_planes)}" in packed:
        packed_planes.append(packed[f"{prefix}p{len(packed_planes)}"])
    if packed_planes and (planes or not sealed):
        raise ValueError(f"series store: chunk {ring}.{start} mixes packed and unpacked planes")
    return ChunkForm(
        ring,
        start,
        version,
        sealed,
        arrays[f"{prefix}ids"],
        packed_planes or planes,
        arrays[f"{prefix}marks"],
    )


def _check(header: Header, per_id: Arrays, chunks: list[ChunkForm]) -> None:
    shape = header.shape
    for name, array in per_id.items():
        if array.shape != (header.used,):
            raise ValueError(
                f"series store: array {name!r} has shape {array.shape}, not ({header.used},)"
            )
    planes = {"fine": 1, "coarse": 3}
    for chunk in chunks:
        n = chunk.ids.size
        if (
            chunk.ring not in planes
            or len(chunk.planes) != planes[chunk.ring]
            or chunk.marks.ndim != 1
            or any(p.shape != (chunk.marks.size, n) for p in chunk.planes)
            or (n and not 0 <= int(chunk.ids.min()) <= int(chunk.ids.max()) < header.used)
        ):
            raise ValueError(f"series store: chunk {chunk.key} is malformed")
    known = {spec.name for spec in header.metrics}
    for row, metric, _ in header.series:
        if metric not in known or not 0 <= row < header.used:
            raise ValueError(f"series store: series {row} ({metric}) is not a known metric or id")
    del shape


def check_v1(header: Header, arrays: Arrays) -> None:
    """That format-1 ``arrays`` (the dense rings) fit ``header``."""
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
