"""Python's cycle collector around a burst of long-lived objects.

Owns :func:`long_lived_burst`. A scheduler's start makes about a million long-lived objects
at once (the first listing of a cluster's pods and nodes, each read into the model, and a core
built over them), and CPython's cycle collector, triggered by allocation counts, scans every
tracked container each time its oldest generation fills: with 10,000 pods that was about half
of the time to the first bind. During the burst the collector is off; afterwards what
survived is frozen (``gc.freeze``: out of the collector's sight for good, still freed by
reference counting when dropped), so later collections scan only what is new. Nothing here
reads or changes scheduling state.
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


def thaw() -> None:
    """Give the objects frozen so far back to the collector (when those made in a burst are
    about to be replaced, as a rebuilt core replaces the first one, whose reference cycles
    would otherwise never be collected)."""
    gc.unfreeze()
