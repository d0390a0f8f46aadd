"""The options of ``gpufleet serve`` about what it observes, tells and does: alert rules, where
the GPUs' series come from on Kubernetes (a Prometheus server), where alerts are sent (webhooks in
Alertmanager's format, with the workloads' ends, failures and preemptions:
``service/workload_notifier``), the prices of cost, the idle policies and their dry run.

Owns :class:`ObserveSettings` (what the options say, checked before the server starts: a bad
rule file is one clear error and nothing is served) and the options' declarations, kept here so
``serve``'s own module stays about starting the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.alerts import collect_rules
from gpufleet.economics import PriceList
from gpufleet.io.errors import InputError
from gpufleet.io.fleet.alert_routing import AlertRouting, read_alert_routing, webhook_routing
from gpufleet.io.fleet.idle_policies import read_idle_policies
from gpufleet.io.fleet.prices import read_prices
from gpufleet.model.alerts import AlertRule
from gpufleet.model.idle import IdlePolicy
from gpufleet.service.alert_state import DISPATCH_BLOB, keep_blob, read_blob
from gpufleet.service.alert_webhooks import AlertNotifier, WebhookSender
from gpufleet.service.protocol import Plane
from gpufleet.service.workload_notifier import TERMINAL, WorkloadIdentity, WorkloadNotifier
from gpufleet.telemetry.alert_dispatch import same_time

AlertRulesOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--alert-rules",
        help="GPUAlertRule file or directory, evaluated beside the built-in rules (repeatable)",
    ),
]
BuiltinAlertsOption = Annotated[
    bool,
    typer.Option("--builtin-alerts/--no-builtin-alerts", help="evaluate gpufleet's built-in rules"),
]
PrometheusUrlOption = Annotated[
    str | None,
    typer.Option(
        "--prometheus-url",
        help="with --kubeconfig: the Prometheus server that scrapes the GPUs (the node agent or "
        "dcgm-exporter), read for alerts, idle GPUs and cost",
        show_default=False,
    ),
]


PricesOption = Annotated[
    Path | None,
    typer.Option(
        "--prices",
        help="price list YAML for cost (default: gpufleet's, public list prices with dates)",
        show_default=False,
    ),
]


AlertConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--alert-config",
        help="where alerts (and workloads' ends, failures, preemptions) go: Alertmanager's "
        "route and receivers (webhook_configs) YAML",
        show_default=False,
    ),
]
AlertWebhookOption = Annotated[
    str | None,
    typer.Option(
        "--alert-webhook",
        help="send alerts to this URL in Alertmanager's webhook format (grouped by alertname; "
        "30s wait, 5m interval, 4h repeat), and workloads' ends, failures and preemptions",
        show_default=False,
    ),
]
IdlePoliciesOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--idle-policies",
        help="IdlePolicy file or directory: act on workloads that hold idle GPUs (repeatable)",
        show_default=False,
    ),
]
IdleDryRunOption = Annotated[
    bool,
    typer.Option(
        "--idle-dry-run",
        help="idle policies only report what they would do (Normal events), never act",
    ),
]
ReplicaAutoscalingOption = Annotated[
    bool | None,
    typer.Option(
        "--replica-autoscaling/--no-replica-autoscaling",
        help="with --kubeconfig and --prometheus-url (where it is on unless turned off): scale "
        "the Deployments, StatefulSets and ReplicaSets annotated gpufleet.dev/max-replicas "
        "(and a target) on their metrics in Prometheus, every 15 s",
        show_default=False,
    ),
]


@dataclass(frozen=True, slots=True)
class ObserveSettings:
    alert_rules: tuple[AlertRule, ...]
    prometheus_url: str | None = None
    #: The price list of cost (None: gpufleet's default).
    prices: PriceList | None = None
    #: Where alerts are sent (None: nowhere; they are still served and streamed).
    routing: AlertRouting | None = None
    #: The idle policies of ``--idle-policies`` (a scenario's are added by ``serve``).
    idle_policies: tuple[IdlePolicy, ...] = ()
    idle_dry_run: bool = False
    #: Scale the workloads annotated for it (Kubernetes with Prometheus only).
    replica_autoscaling: bool = False


def replica_autoscaling_on(
    asked: bool | None, kubeconfig: object | None, prometheus_url: str | None
) -> bool:
    """Whether ``serve`` scales the annotated workloads: asked for (``--replica-autoscaling``),
    it needs ``--kubeconfig`` and ``--prometheus-url`` (a BadParameter says which is missing);
    not said, it is on where both are given."""
    if asked is None:
        return kubeconfig is not None and prometheus_url is not None
    if asked and kubeconfig is None:
        raise typer.BadParameter(
            "is for --kubeconfig (in the simulated cluster, `gpufleet simulate --scenario` "
            "serves and scales inference workloads)",
            param_hint="--replica-autoscaling",
        )
    if asked and prometheus_url is None:
        raise typer.BadParameter(
            "needs --prometheus-url: the workloads' metrics are read from Prometheus",
            param_hint="--replica-autoscaling",
        )
    return asked


def observe_settings(
    rule_paths: list[Path] | None,
    builtin: bool,
    prometheus_url: str | None,
    prices_path: Path | None = None,
    alert_config: Path | None = None,
    alert_webhook: str | None = None,
    idle_paths: list[Path] | None = None,
    idle_dry_run: bool = False,
) -> ObserveSettings:
    """The settings the options give; an InputError names a bad rule, price, routing or
    idle-policy file (two policies of one name across files too)."""
    rules = collect_rules(list(rule_paths or []), builtin)
    prices = read_prices(prices_path) if prices_path is not None else None
    idle = join_idle_policies([(str(path), read_idle_policies(path)) for path in idle_paths or []])
    if alert_config is not None and alert_webhook is not None:
        raise typer.BadParameter(
            "give --alert-config or --alert-webhook, not both (a webhook is one receiver of "
            "the config)",
            param_hint="--alert-webhook",
        )
    routing = None
    if alert_config is not None:
        routing = read_alert_routing(alert_config)
    elif alert_webhook is not None:
        if not alert_webhook.startswith(("http://", "https://")):
            raise typer.BadParameter(
                f"{alert_webhook!r} is not an http:// or https:// URL", param_hint="--alert-webhook"
            )
        routing = webhook_routing(alert_webhook)
    url = prometheus_url.rstrip("/") if prometheus_url else None
    if url is not None and not url.startswith(("http://", "https://")):
        raise typer.BadParameter(
            f"{prometheus_url!r} is not an http:// or https:// URL", param_hint="--prometheus-url"
        )
    return ObserveSettings(tuple(rules), url, prices, routing, tuple(idle), idle_dry_run)


def join_idle_policies(read: list[tuple[str, list[IdlePolicy]]]) -> list[IdlePolicy]:
    """The policies of several sources, in order; a name given twice is an InputError."""
    seen: dict[str, str] = {}
    joined: list[IdlePolicy] = []
    for source, policies in read:
        for policy in policies:
            if policy.name in seen:
                raise InputError(
                    source,
                    f"IdlePolicy {policy.name!r} is given twice (first in {seen[policy.name]})",
                    field="metadata.name",
                )
            seen[policy.name] = source
            joined.append(policy)
    return joined


def start_notifier(plane: Plane, routing: AlertRouting, external_url: str) -> AlertNotifier:
    """Send ``plane``'s alerts as ``routing`` says, from now on (the caller stops it), going
    on from what an earlier server sent (kept in the plane's store), with wall-clock times."""
    observatory = plane.observatory
    if observatory is None:
        raise typer.BadParameter("this control plane evaluates no alerts to send")
    notifier = AlertNotifier(
        routing,
        observatory.now,
        rules=lambda: observatory.rules,
        external_url=external_url,
        sender=WebhookSender(plane.notifications),
        wall=observatory.wall_time,
        kept=read_blob(plane.store, DISPATCH_BLOB, plane.lock),
        keep=keep_blob(plane.store, DISPATCH_BLOB, plane.lock),
    )
    observatory.subscribe(notifier.on_round)
    start_workload_notices(plane, routing, notifier.sender, external_url)
    notifier.start()
    return notifier


def start_workload_notices(
    plane: Plane, routing: AlertRouting, sender: WebhookSender, external_url: str
) -> WorkloadNotifier:
    """Send ``plane``'s workloads' ends, failures and preemptions to ``routing``'s receivers,
    through the alerts' ``sender``, from now on (those ended already are not told)."""

    def identify(key: str) -> WorkloadIdentity | None:
        with plane.lock:
            record = plane.records.get(key)
        if record is None:
            return None
        workload = record.timed.workload
        return WorkloadIdentity(workload.namespace, workload.name, record.kind, record.tenant)

    with plane.lock:
        ended = [key for key, record in plane.records.items() if record.state.value in TERMINAL]
    notices = WorkloadNotifier(
        routing,
        sender,
        identify,
        ended=ended,
        external_url=external_url,
        wall=plane.observatory.wall_time if plane.observatory is not None else same_time,
    )
    plane.subscribe(notices.on_changes)
    return notices
