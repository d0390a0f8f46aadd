"""The Warning events of GPU-hour budgets: a queue's budget past its warning threshold
(``BudgetWarning``) and spent (``BudgetExhausted``), once per period each, as the control
loop's :class:`~gpufleet.control.budget_usage.BudgetUsage` noted them. Events of a queue, not
of a workload (``workload`` is None). It only turns notices into the plane's events."""

from __future__ import annotations

from gpufleet.control.budget_usage import BudgetUsage
from gpufleet.service.store import StoredEvent


def budget_events(usage: BudgetUsage) -> list[StoredEvent]:
    """The notices since the last call, as Warning events."""
    return [StoredEvent(n.at, None, "Warning", n.reason, n.message) for n in usage.drain()]


__all__ = ["budget_events"]
