"""Alerts as the rule engine holds them, built plainly for tests of notifications."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.model.alerts import Alert, AlertState, label_set


def firing_alert(
    rule: str, fired_at: float, value: float = 95.0, severity: str = "warning", **labels: str
) -> Alert:
    """A firing alert of ``rule`` (its ``alertname`` is ``rule``) with ``labels``."""
    names = label_set({**labels, "alertname": rule, "severity": severity})
    return Alert(rule, names, AlertState.FIRING, value, fired_at, fired_at=fired_at)


def resolved(alert: Alert, at: float) -> Alert:
    """``alert`` resolved at ``at``."""
    return replace(alert, state=AlertState.RESOLVED, resolved_at=at)
