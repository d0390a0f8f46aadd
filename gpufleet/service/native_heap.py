"""How the process' C heap treats the series store's arrays, on glibc (elsewhere: nothing).

Owns two calls into glibc's allocator, each documented in its manual (mallopt(3),
malloc_trim(3)) and made through ctypes only where ``mallopt``/``malloc_trim`` are found:

* :func:`map_large_blocks`: blocks of :data:`MMAP_THRESHOLD` bytes or more get their own
  mapping, returned to the system when freed. glibc's default threshold moves up to the size of
  the largest block freed (up to 32 MiB), so once the store lets go of one chunk (an hour of
  fine points, a day of coarse ones: 1-3 MB at 1,000 GPUs) every later chunk is carved out of
  the heap, where what chunks leave when they are replaced or let go stays as free holes the
  process keeps (57 MB of 120 in use, measured at 1,000 GPUs and 5,000 pods a day over 3 days).
  Setting the threshold fixes it (the manual: it turns the dynamic adjustment off).
* :func:`release_free_heap`: hands the heap's free pages back (``malloc_trim(0)``), after a
  save, which frees the encoded chunks and the JSON of the usage summaries at once.

Both are process-wide and idempotent; the observatory calls them (``live_observing``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

#: mallopt's parameter number for the mmap threshold (malloc.h: ``M_MMAP_THRESHOLD``).
M_MMAP_THRESHOLD = -3
#: Blocks this large or larger are mapped on their own (a quarter of a MiB: a store's chunks and
#: a query's blocks, not Python's small objects, which its allocator keeps in arenas it maps).
MMAP_THRESHOLD = 256 * 1024


@functools.cache
def _glibc() -> Any | None:
    """The C library, if it is glibc (it has ``mallopt`` and ``malloc_trim``)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


@functools.cache
def map_large_blocks() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` (once); whether it was set."""
    libc = _glibc()
    if libc is None:
        return False
    done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused; the heap keeps glibc's defaults")
    return done


def release_free_heap() -> bool:
    """Give the heap's free pages back to the system; whether any were."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
