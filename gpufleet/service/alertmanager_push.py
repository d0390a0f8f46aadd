"""gpufleet's alerts sent to an Alertmanager, the way Prometheus sends its own: a POST of
firing and resolved alerts to ``/api/v2/alerts``.

Owns :func:`push_alerts` (one push: the alerts converted by
:func:`~gpufleet.telemetry.alert_dispatch.postable_alerts`, an error when Alertmanager refuses
them) so that users with an Alertmanager route gpufleet's alerts with everything else they
run. Prometheus pushes every active alert at each evaluation that changes it and at least every
minute (``endsAt`` four minutes ahead keeps a firing alert alive between pushes); whoever calls
this keeps that rhythm (an observatory subscriber per round does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from gpufleet.model.alerts import Alert, AlertRule
from gpufleet.service.alert_webhooks import Post, post_json
from gpufleet.telemetry.alert_dispatch import (
    WallTime,
    postable_alerts,
    rule_annotations,
    same_time,
)

API_PATH = "/api/v2/alerts"


class AlertmanagerError(RuntimeError):
    """Alertmanager did not take the alerts (unreachable, or an HTTP error)."""


def push_alerts(
    url: str,
    alerts: Iterable[Alert],
    now: float,
    *,
    rules: Iterable[AlertRule] = (),
    external_url: str = "",
    timeout_s: float = 10.0,
    post: Post = post_json,
    wall: WallTime = same_time,
) -> int:
    """POST the firing and resolved ``alerts`` (annotated from ``rules``) to the Alertmanager
    at ``url`` (``http://alertmanager:9093``); how many were sent (none: no request). ``now``
    and the alerts' times are the plane's, sent as ``wall`` maps them (the observatory's
    ``wall_time``: wall-clock times on the simulated cluster too)."""
    posted = postable_alerts(
        alerts, now, annotate=rule_annotations(rules), external_url=external_url, wall=wall
    )
    if not posted:
        return 0
    target = url.rstrip("/") + API_PATH
    try:
        status = post(target, json.dumps(posted).encode(), timeout_s)
    except (OSError, ValueError) as error:
        raise AlertmanagerError(f"alertmanager at {url} unreachable: {error}") from error
    if not 200 <= status < 300:
        raise AlertmanagerError(f"alertmanager at {url} answered HTTP {status} to {API_PATH}")
    return len(posted)
