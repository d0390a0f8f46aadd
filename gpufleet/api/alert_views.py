"""The alerts a caller may see, as the API serves them (``GET /api/v1/alerts``).

An alert about a pod (its labels name ``namespace`` and ``pod``) belongs to that pod's
workload: a tenant sees it only for its own workloads (a pod gpufleet does not know, on
Kubernetes: when it is in one of the tenant's namespaces); an admin sees every alert. An alert
about a device nobody holds (heat, an XID) is everyone's to see, as the nodes are.
"""

from __future__ import annotations

from gpufleet.api.schemas import AlertList, AlertStateName, AlertView
from gpufleet.model.alerts import Alert, AlertRule
from gpufleet.service.auth import Principal
from gpufleet.service.protocol import Plane


def alert_list(
    plane: Plane, principal: Principal, state: AlertStateName | None = None
) -> AlertList:
    observatory = plane.observatory
    if observatory is None:
        return AlertList(alerts=[], rules=0, error="this control plane observes no GPU telemetry")
    rules = {rule.name: rule for rule in observatory.rules}
    owners = plane.pod_owners()
    with plane.lock:
        tenants = {key: record.tenant for key, record in plane.records.items()}
    shown = []
    for alert in observatory.alerts():
        if state is not None and alert.state.value != state:
            continue
        owner = owners.get((alert.label("namespace"), alert.label("pod")))
        if alert.label("pod") and not _may_see(principal, alert, owner, tenants):
            continue
        shown.append(view(alert, rules.get(alert.rule), owner))
    return AlertList(
        alerts=shown,
        rules=len(rules),
        evaluated_at=observatory.last_round,
        error=observatory.last_error,
    )


def _may_see(
    principal: Principal, alert: Alert, owner: str | None, tenants: dict[str, str]
) -> bool:
    if principal.is_admin:
        return True
    if owner is not None:
        return principal.may_see(tenants[owner])
    # A pod gpufleet did not submit (on Kubernetes): its namespace's tenant sees it.
    return alert.label("namespace") in principal.namespaces


def view(alert: Alert, rule: AlertRule | None, workload: str | None) -> AlertView:
    return AlertView(
        rule=alert.rule,
        alertname=alert.label("alertname"),
        state=AlertStateName(alert.state.value),
        severity=alert.label("severity"),
        summary=rule.summary if rule is not None else "",
        condition=rule.condition if rule is not None else "",
        value=alert.value,
        labels=dict(alert.labels),
        workload=workload,
        active_at=alert.active_at,
        fired_at=alert.fired_at,
        resolved_at=alert.resolved_at,
    )
