"""The wall-clock time of each instant of a simulated cluster's clock, across restarts.

The simulated cluster's clock counts simulated seconds from 0 (its first start), ``speed``
times as fast as the wall, and stops while the server is down (a restart goes on from the time
kept in the store). What leaves gpufleet (webhook payloads, pushes to Alertmanager) carries
wall-clock times, as Prometheus' alerts do; :class:`PlaneWallTime` maps the cluster's time to
the wall: each run of the server is a segment (its start on the cluster's clock, the Unix time
then, its speed), and an instant is the wall time at which the cluster was at it: the Unix
time at its run's start plus the simulated seconds since, divided by the speed. An instant of
an earlier run keeps the wall time it had then (the segments are kept in the store's meta
:data:`WALL_META`). Planes whose clock is the wall's (``serve --local``, Kubernetes) need none.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections.abc import Callable

from gpufleet.service.store import Store

log = logging.getLogger(__name__)

#: The store's meta key of the segments: ``[[cluster_at, unix_at, speed], ...]``.
WALL_META = "clock.wall"
#: Runs kept (older ones are folded into the oldest kept: instants before it map through it).
SEGMENTS_KEPT = 1_000

Segment = tuple[float, float, float]


class PlaneWallTime:
    """See the module docstring: ``self(t)`` is the Unix time of the cluster's instant ``t``."""

    def __init__(self, segments: list[Segment]) -> None:
        if not segments:
            raise ValueError("a wall time needs at least one segment")
        self.segments = sorted(segments)
        self._starts = [segment[0] for segment in self.segments]

    def __call__(self, at: float) -> float:
        index = max(0, bisect.bisect_right(self._starts, at) - 1)
        start, unix, speed = self.segments[index]
        return unix + (at - start) / speed

    @classmethod
    def anchored(
        cls,
        store: Store,
        cluster_now: float,
        speed: float,
        unix: Callable[[], float] = time.time,
    ) -> PlaneWallTime:
        """The segments kept in ``store`` and this run's, which starts now (kept too)."""
        segments: list[Segment] = []
        kept = store.meta(WALL_META)
        if kept is not None:
            try:
                segments = [(float(a), float(u), float(s)) for a, u, s in json.loads(kept)]
            except (ValueError, TypeError) as error:
                log.error("%s: the kept wall times are unreadable (%s)", store.path, error)
        # A run that starts where a kept one did (no round since) replaces it.
        segments = [segment for segment in segments if segment[0] < cluster_now]
        segments.append((cluster_now, unix(), speed))
        segments = segments[-SEGMENTS_KEPT:]
        store.set_meta(WALL_META, json.dumps(segments))
        return cls(segments)
