"""The alerts a caller may see, as the API serves them (``GET /api/v1/alerts``).

An alert about a pod (its labels name ``namespace`` and ``pod``) belongs to that pod's
workload: a tenant sees it only for its own workloads (a pod gpufleet does not know, on
Kubernetes: when it is in one of the tenant's namespaces); an admin sees every alert. An alert
about a device nobody holds (heat, an XID) is everyone's to see, as the nodes are.
"""

from __future__ import annotations

from collections.abc import Mapping

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
        owner_tenant = tenants.get(owner) if owner is not None else None
        if not may_see_alert(principal, dict(alert.labels), owner_tenant):
            continue
        shown.append(view(alert, rules.get(alert.rule), owner))
    return AlertList(
        alerts=shown,
        rules=len(rules),
        evaluated_at=observatory.last_round,
        error=observatory.last_error,
    )


def may_see_alert(
    principal: Principal, labels: Mapping[str, str], owner_tenant: str | None
) -> bool:
    """Whether ``principal`` may see an alert with ``labels`` (see the module docstring);
    ``owner_tenant`` is the tenant of the workload holding the pod it names, None when
    gpufleet knows no such workload. The API's list and its event stream both ask this."""
    if principal.is_admin or not labels.get("pod"):
        return True
    if owner_tenant is not None:
        return principal.may_see(owner_tenant)
    # A pod gpufleet did not submit (on Kubernetes): its namespace's tenant sees it.
    return labels.get("namespace") in principal.namespaces


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
