"""Alert state kept across restarts of ``gpufleet serve``, as Prometheus keeps
``ALERTS_FOR_STATE``.

Owns :class:`AlertStateKeeper`: an observatory subscriber that writes every active alert (its
rule, labels, state, value, ``active_at``, ``fired_at``, ``resolved_at``) into the plane's store
(blob :data:`ALERTS_BLOB`) after each round in which an alert changed state, and puts them back
into the observatory's rule engine when a server starts (:meth:`AlertStateKeeper.restore`,
before the first round). So after a restart an alert still firing stays the same alert (not
notified again as new), one whose condition stopped while the server was down resolves at the
first round (and its ``resolved`` goes out), and a ``for`` goes on from the kept
``active_at``: the downtime counts towards it (Prometheus leaves the downtime out, up to its
``for_outage_tolerance`` of 1 h; the simulated cluster's clock stops while the server is down,
so there it has none). An alert of a rule that changed since it was kept (or is gone) is not
restored, as a rule file reload drops it (``RuleEngine.replace_rules``). What the notifier sent
is kept beside it (blob :data:`DISPATCH_BLOB`, ``Dispatcher.snapshot``), written by whoever
sends (``cli/serve_observing``) through :func:`keep_blob`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from gpufleet.model.alerts import AlertRule, AlertState
from gpufleet.service.observatory import Observatory, ObservedRound
from gpufleet.service.store import Store
from gpufleet.telemetry.alert_dispatch import alert_data, alert_of

log = logging.getLogger(__name__)

ALERTS_BLOB = "alerts.state"
DISPATCH_BLOB = "alerts.dispatch"
#: The version of the kept form (another is ignored: the alerts start over).
VERSION = 1


def rule_digest(rule: AlertRule) -> str:
    """What identifies a rule's definition: an alert kept under another is not restored."""
    return hashlib.sha256(repr(rule).encode()).hexdigest()[:16]


def read_blob(store: Store, key: str, lock: threading.RLock) -> dict[str, Any] | None:
    """A kept JSON object (None: none, or unreadable, logged)."""
    with lock:
        data = store.blob(key)
    if data is None:
        return None
    try:
        found = json.loads(data)
    except ValueError as error:
        log.error("%s: the kept %s is unreadable (%s); starting over", store.path, key, error)
        return None
    return found if isinstance(found, dict) else None


def keep_blob(store: Store, key: str, lock: threading.RLock) -> Callable[[Mapping[str, Any]], None]:
    """A writer of a JSON object into ``store`` (under ``lock``, the plane's)."""

    def write(value: Mapping[str, Any]) -> None:
        body = json.dumps(value, separators=(",", ":")).encode()
        with lock, store.transaction():
            store.set_blob(key, body)

    return write


class AlertStateKeeper:
    """See the module docstring. ``lock`` is the plane's (the store's writes are under it)."""

    def __init__(self, store: Store, observatory: Observatory, lock: threading.RLock) -> None:
        self.store = store
        self.observatory = observatory
        self.lock = lock
        self._write = keep_blob(store, ALERTS_BLOB, lock)

    def restore(self) -> int:
        """Put the kept alerts of unchanged rules back into the engine; how many."""
        kept = read_blob(self.store, ALERTS_BLOB, self.lock)
        if kept is None or kept.get("version") != VERSION:
            return 0
        digests = {rule.name: rule_digest(rule) for rule in self.observatory.rules}
        alerts = []
        for entry in kept.get("alerts", []):
            try:
                alert = alert_of(entry)
            except (KeyError, ValueError, TypeError) as error:
                log.error("%s: a kept alert is unreadable (%s)", self.store.path, error)
                continue
            if digests.get(alert.rule) == entry.get("digest"):
                alerts.append(alert)
        with self.observatory.lock:
            return self.observatory.engine.restore(alerts)

    def on_round(self, observed: ObservedRound) -> None:
        """Keep the alerts when one changed state this round."""
        if observed.transitions:
            self.save(observed)

    def save(self, observed: ObservedRound) -> None:
        digests = {rule.name: rule_digest(rule) for rule in self.observatory.rules}
        alerts = [
            {**alert_data(alert), "digest": digests.get(alert.rule, "")}
            for alert in observed.alerts
            if alert.state is not AlertState.INACTIVE
        ]
        self._write({"version": VERSION, "at": observed.now, "alerts": alerts})

    @classmethod
    def attach(cls, store: Store, observatory: Observatory, lock: threading.RLock) -> int:
        """Restore ``observatory``'s kept alerts and keep them from now on; how many came back."""
        keeper = cls(store, observatory, lock)
        restored = keeper.restore()
        observatory.subscribe(keeper.on_round)
        return restored
