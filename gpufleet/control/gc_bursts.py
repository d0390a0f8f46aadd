"""Python's cycle collector around bursts of objects: long-lived ones, and short-lived ones.

Owns :func:`long_lived_burst` and :func:`short_lived_burst`. A scheduler's start makes about a
million long-lived objects at once (the first listing of a cluster's pods and nodes, each read
into the model, and a core built over them), and CPython's cycle collector, triggered by
allocation counts, scans every tracked container each time its oldest generation fills: with
10,000 pods that was about half of the time to the first bind. During the burst the collector is
off; afterwards what survived is frozen (``gc.freeze``: out of the collector's sight for good,
still freed by reference counting when dropped), so later collections scan only what is new.

A snapshot of a core (its view of thousands of running workloads, read for metrics or a
queue's status) makes tens of thousands of small objects that hold no reference cycles and are
dropped before the reader returns: the collector, counting them, would run its young
generations over and over and at times its oldest one over the whole heap (0.06 s of the 0.1 s
a fill run's final metrics took). Inside :func:`short_lived_burst` it is off; reference
counting frees what was made. Nothing here reads or changes scheduling state.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived_burst() -> Iterator[None]:
    """The collector off inside; what exists at the end frozen; the collector on after (also
    when a caller turned it off before, as ``gpufleet scheduler`` does from its start)."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


@contextmanager
def short_lived_burst() -> Iterator[None]:
    """The collector off inside, back as it was after (it nests). For code whose objects are
    all dropped by the end of the block and hold no reference cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def thaw() -> None:
    """Give the objects frozen so far back to the collector (when those made in a burst are
    about to be replaced, as a rebuilt core replaces the first one, whose reference cycles
    would otherwise never be collected)."""
    gc.unfreeze()
