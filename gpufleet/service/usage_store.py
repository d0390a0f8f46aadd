"""Fair sharing's usage history kept in the store, so that a restarted server orders queues by
what they used before it stopped.

Owns the one meta entry (:data:`USAGE_META`): every queue's and user's decayed usage at one
instant of the world's clock (:class:`~gpufleet.scheduling.usage_history.UsageSnapshot`, as
JSON). It is written when the plane samples its history and when it stops, and read back into
the core built at start (decayed from its instant: what ran between the last write and a crash
is not counted). A core built again (queues changed) takes the old core's history directly
(:func:`carry_usage`).

What it does not do: count usage (the core does) or decide when to save (the plane does).
"""

from __future__ import annotations

import json
import logging

from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.usage_history import UsageSnapshot
from gpufleet.service.store import Store

log = logging.getLogger(__name__)

USAGE_META = "fair_share_usage"


def save_usage(store: Store, core: SchedulerCore) -> None:
    """Write the core's usage history (nothing where fair sharing over time is off)."""
    history = core.state.usage_history
    if history is None:
        return
    snapshot = history.snapshot()
    document = {"at": snapshot.at, "queues": snapshot.queues, "users": snapshot.users}
    store.set_meta(USAGE_META, json.dumps(document, sort_keys=True))


def load_usage(store: Store, core: SchedulerCore) -> None:
    """Add the stored usage history to the core's (where fair sharing over time is on); one
    that cannot be read is logged and left out (usage starts again from nothing)."""
    history = core.state.usage_history
    kept = store.meta(USAGE_META)
    if history is None or kept is None:
        return
    try:
        document = json.loads(kept)
        snapshot = UsageSnapshot(
            float(document["at"]),
            {str(q): float(v) for q, v in document["queues"].items()},
            {
                str(q): {str(u): float(v) for u, v in users.items()}
                for q, users in document["users"].items()
            },
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        log.warning("stored fair-share usage left out (it starts again from nothing): %s", error)
        return
    history.restore(snapshot)


def carry_usage(old: SchedulerCore | None, new: SchedulerCore) -> None:
    """A core built again takes the usage history of the one it replaces."""
    before = old.state.usage_history if old is not None else None
    after = new.state.usage_history
    if before is not None and after is not None:
        after.restore(before.snapshot())


__all__ = ["USAGE_META", "carry_usage", "load_usage", "save_usage"]
