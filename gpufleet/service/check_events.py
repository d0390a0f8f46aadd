"""The Warning events of admission checks' notices: a queue's GPU-hour budget past its warning
threshold (``BudgetWarning``) and spent (``BudgetExhausted``), once per period each, say, as
the checks left them in the control loop's
:class:`~gpufleet.scheduling.framework.CheckWorld`. Events of a queue, not of a workload
(``workload`` is None). It only turns notices into the plane's events."""

from __future__ import annotations

from gpufleet.scheduling.framework import CheckWorld
from gpufleet.service.store import StoredEvent


def check_events(world: CheckWorld) -> list[StoredEvent]:
    """The notices since the last call, as Warning events."""
    return [StoredEvent(n.at, None, "Warning", n.reason, n.message) for n in world.drain()]


__all__ = ["check_events"]
