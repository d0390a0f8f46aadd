"""Sealed chunks' code planes kept packed in memory: lossless, a few times smaller than the
codes themselves for a GPU's readings, unpacked when a query reads them.

Owns :func:`pack_plane` and :func:`unpack_plane` (one plane of codes, steps x columns, to bytes
and back, bit for bit) and :class:`Packed` (a packed plane: its bytes, shape and dtype).

How: each column's codes are replaced by their differences from the step before (the first
step kept as it is; unsigned arithmetic wraps, so the sum undoes it exactly), each difference
zigzag-coded (small steps either way become small numbers), a ``uint16`` plane's low bytes
put before its high bytes (a steady series' high bytes are all 0), and the lot deflated
(zlib, level 1: sealing a chunk is part of a round). A steady gauge (memory used, XIDs, a
temperature in whole degrees, an idle or saturated GPU's utilisation) packs to a few bits a
step; a noisy one (power in fractions of a watt) to a little less than its code. Nothing is
rounded: queries read the codes they would have read unpacked, so every error bound of
``series_layout`` holds as it is.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

#: zlib's level when packing: level 1 packs a GPU's codes about as small as level 6 at a
#: fraction of its time, and the packing of a chunk happens when a round seals it.
LEVEL = 1
#: About how many bytes of a plane are coded at a time (packing's and unpacking's passing
#: memory, beside the packed bytes and, unpacking, the inflated ones).
BLOCK_BYTES = 1 << 18

CodeArray = npt.NDArray[np.unsignedinteger[Any]]
_SIGNED: dict[np.dtype[Any], type[np.signedinteger[Any]]] = {
    np.dtype(np.uint8): np.int8,
    np.dtype(np.uint16): np.int16,
}


@dataclass(frozen=True, slots=True)
class Packed:
    """A plane of codes packed by :func:`pack_plane`."""

    data: bytes
    shape: tuple[int, int]
    dtype: np.dtype[Any]

    @property
    def nbytes(self) -> int:
        return len(self.data)


def pack_plane(plane: CodeArray) -> Packed:
    """``plane`` (steps x columns of ``uint8`` or ``uint16`` codes) packed; see the module.
    It is coded a block of steps at a time (passing memory: a block's, not the plane's)."""
    dtype = plane.dtype
    if dtype not in _SIGNED or plane.ndim != 2:
        raise ValueError(f"pack_plane: a 2-d uint8 or uint16 plane, not {plane.ndim}-d {dtype}")
    steps, columns = (int(plane.shape[0]), int(plane.shape[1]))
    block = max(1, BLOCK_BYTES // max(1, columns * dtype.itemsize))
    deflate = zlib.compressobj(LEVEL)
    parts: list[bytes] = []
    for byte in range(dtype.itemsize):  # the low bytes of every step, then the high ones
        for lo in range(0, steps, block):
            coded = _zigzag(plane, lo, min(steps, lo + block))
            parts.append(
                deflate.compress(((coded >> (8 * byte)) & 0xFF).astype(np.uint8).tobytes())
            )
    parts.append(deflate.flush())
    return Packed(b"".join(parts), (steps, columns), dtype)


def unpack_plane(packed: Packed) -> CodeArray:
    """The plane :func:`pack_plane` packed, as it was (a new, writable array); a
    ``ValueError`` for bytes that are not such a plane."""
    dtype, (steps, columns) = packed.dtype, packed.shape
    try:
        raw = np.frombuffer(zlib.decompress(packed.data), np.uint8)
    except zlib.error as error:
        raise ValueError(f"packed plane: corrupt: {error}") from error
    if dtype not in _SIGNED or raw.size != steps * columns * dtype.itemsize:
        raise ValueError(f"packed plane: {raw.size} bytes are not a {packed.shape} {dtype} plane")
    width = steps * columns
    plane: CodeArray = np.empty((steps, columns), dtype)
    block = max(1, BLOCK_BYTES // max(1, columns * dtype.itemsize))
    for lo in range(0, steps, block):
        hi = min(steps, lo + block)
        coded = raw[lo * columns : hi * columns].astype(dtype)
        for byte in range(1, dtype.itemsize):
            part = raw[byte * width + lo * columns : byte * width + hi * columns]
            coded |= part.astype(dtype) << (8 * byte)
        delta = (coded >> 1) ^ (0 - (coded & 1)).astype(dtype)
        delta = delta.reshape(hi - lo, columns)
        if lo:
            delta[0] += plane[lo - 1]  # wraps, as the differences did
        np.cumsum(delta, axis=0, dtype=dtype, out=plane[lo:hi])
    return plane


def _zigzag(plane: CodeArray, lo: int, hi: int) -> CodeArray:
    """Steps ``lo..hi-1`` of ``plane`` as zigzag-coded differences from the step before."""
    dtype = plane.dtype
    delta = np.empty((hi - lo, plane.shape[1]), dtype)
    if hi > lo:
        delta[0] = plane[lo] - plane[lo - 1] if lo else plane[lo]
        np.subtract(plane[lo + 1 : hi], plane[lo : hi - 1], out=delta[1:])
    signed = delta.view(_SIGNED[dtype])
    bits = 8 * dtype.itemsize
    zigzag: CodeArray = ((signed << 1) ^ (signed >> (bits - 1))).view(dtype)
    return zigzag
