"""On glibc, the store's large arrays get their own mappings and a save's freed heap goes back."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.service.native_heap import MMAP_THRESHOLD, release_free_heap

GLIBC = ctypes.util.find_library("c") is not None and hasattr(
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), "mallinfo2"
)
pytestmark = pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")


def mapped_bytes() -> int:
    """glibc's bytes in blocks mapped on their own (``mallinfo2().hblkhd``)."""

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in "abcdefghij"]

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = MallInfo2
    return int(libc.mallinfo2().e)


def resident_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


MAPPED_AFTER_A_LARGER_FREE = f"""
import numpy as np
from gpufleet.service.native_heap import map_large_blocks
from {__name__} import mapped_bytes

big = np.ones(8 * 1024 * 1024, np.uint8)  # freed: glibc's own threshold would rise to it
del big
assert map_large_blocks()
before = mapped_bytes()
chunk = np.ones({4 * MMAP_THRESHOLD}, np.uint8)
print(mapped_bytes() - before >= chunk.nbytes)
"""


def test_a_chunk_sized_array_is_mapped_even_after_a_larger_one_was_freed() -> None:
    # In a fresh process: the setting is process-wide, and no other thread frees meanwhile.
    ran = subprocess.run(
        [sys.executable, "-c", MAPPED_AFTER_A_LARGER_FREE],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert ran.stdout.strip() == "True", ran.stderr


def test_the_heap_freed_under_a_live_block_goes_back() -> None:
    held = [b"x" * 100_000 for _ in range(600)]  # 60 MB of heap blocks (below the threshold)
    keep = held[-1]
    del held
    before = resident_bytes()
    assert release_free_heap()
    assert before - resident_bytes() >= 30_000_000
    assert keep[:1] == b"x"
