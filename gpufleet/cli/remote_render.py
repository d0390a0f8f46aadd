"""How the remote commands show what the server answers: tables, descriptions, formats.

Functions of schema instances only (no HTTP, no typer), so that rendering is tested without a
server. Used by :mod:`gpufleet.cli.remote`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpufleet.api.schemas import (
    AlertView,
    BudgetView,
    ClusterSummary,
    DeviceView,
    Explanation,
    NodeView,
    PriorityClassView,
    QueueView,
    WorkloadDetail,
    WorkloadState,
    WorkloadSummary,
)
from gpufleet.model.times import format_duration, time_format

GPU = "nvidia.com/gpu"


class Output(StrEnum):
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


def text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


# -- formatting helpers ---------------------------------------------------------------------


def format_gpus(value: float) -> str:
    """GPUs for people: 2, 0.5, 0.25, 1.125."""
    return f"{round(value, 3):g}"


def format_cpu(value: float) -> str:
    return f"{round(value, 2):g}"


def format_mib(value: float) -> str:
    """MiB as kubectl writes quantities: 512Mi, 8Gi, 1.5Gi, 2Ti."""
    if value >= 1024 * 1024:
        return f"{round(value / (1024 * 1024), 1):g}Ti"
    if value >= 1024:
        return f"{round(value / 1024, 1):g}Gi"
    return f"{round(value):g}Mi"


def format_resource(name: str, value: float) -> str:
    if name == "memory":
        return format_mib(value)
    if name == "cpu":
        return format_cpu(value)
    return format_gpus(value)


def format_resources(values: dict[str, float]) -> str:
    """{'nvidia.com/gpu': 8, 'cpu': 64} -> 'gpu=8 cpu=64' (the GPU first)."""
    if not values:
        return "-"
    order = sorted(values, key=lambda name: (not name.startswith(GPU), name))
    short = {"memory": "mem", GPU: "gpu"}
    return " ".join(
        f"{short.get(name, name.removeprefix(GPU + '.'))}={format_resource(name, values[name])}"
        for name in order
    )


def gpu_bar(fraction: float, width: int = 10) -> Text:
    """A bar of ``width`` cells, coloured by how full it is."""
    fraction = min(max(fraction, 0.0), 1.0)
    full = round(fraction * width)
    colour = "green" if fraction < 0.5 else "yellow" if fraction < 0.9 else "red"
    return Text("█" * full, style=colour) + Text("░" * (width - full), style="dim")


@dataclass(frozen=True)
class Clock:
    """Cluster times for people (:mod:`gpufleet.model.times`): simulated seconds as t=5m00s,
    Unix time as a UTC date."""

    now: float
    simulated: bool = True

    @classmethod
    def of(cls, cluster: ClusterSummary) -> Clock:
        return cls(cluster.time, cluster.backend == "simulated")

    def at(self, time: float | None) -> str:
        return "-" if time is None else time_format(self.simulated)(time)

    def age(self, time: float | None) -> str:
        return "-" if time is None else format_duration(max(self.now - time, 0.0))


#: Columns of free text, folded within the width the others leave (:mod:`gpufleet.cli.tables`);
#: every other column (names first) is shown whole.
FREE_TEXT_COLUMNS = frozenset(
    {"MESSAGE", "WAITING FOR", "PODS", "LABELS", "TAINTS", "NOMINAL", "USAGE", "SUMMARY"}
    | {"BORROWING LIMIT", "LENDING LIMIT", "GPU MODELS", "PREEMPTION"}
)


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(box=None, title=title, title_justify="left", pad_edge=False, show_edge=False)
    for column in columns:
        free = column.strip() in FREE_TEXT_COLUMNS
        table.add_column(column, no_wrap=not free, overflow="fold")
    return table


def dump(models: BaseModel | Sequence[BaseModel], output: Output) -> str:
    """The schema dumps, as JSON or YAML text."""
    data: object = (
        models.model_dump(mode="json")
        if isinstance(models, BaseModel)
        else [model.model_dump(mode="json") for model in models]
    )
    if output is Output.YAML:
        import yaml  # for -o yaml only: a command against a server starts faster without

        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return json.dumps(data, indent=2) + "\n"


# -- tables ---------------------------------------------------------------------------------


def workloads_table(
    workloads: Sequence[WorkloadSummary], clock: Clock, *, wide: bool = False, namespaces: bool
) -> Table:
    columns = ["NAME", "KIND", "QUEUE", "STATE", "PODS", "GPUS", "REQUEST", "AGE"]
    if namespaces:
        columns.insert(0, "NAMESPACE")
    if wide:
        columns += ["TENANT", "PRIORITY", "STARTED", "WAITING FOR", "MESSAGE"]
    table = _table(*columns)
    for w in workloads:
        row: list[str | Text] = [w.name, w.kind, w.queue, _state(w.state, w.reason)]
        row += [f"{w.pods_running}/{w.pods}"]
        row += [format_gpus(w.gpus), w.gpu_request, clock.age(w.submitted)]
        if namespaces:
            row.insert(0, w.namespace)
        if wide:
            priority = f"{w.priority}" + (f" ({w.priority_class})" if w.priority_class else "")
            row += [w.tenant, priority, clock.at(w.started), w.waiting_for or "-"]
            row += [w.message or ""]
        table.add_row(*row)
    return table


def queues_table(queues: Sequence[QueueView], *, wide: bool = False) -> Table:
    columns = ["NAME", "PARENT", "WEIGHT", "GPU QUOTA", "GPU USED", "GPU BORROWED", "SHARE"]
    columns += ["PENDING", "RUNNING", "BUDGET", "REMAINING"]
    if wide:
        columns += ["NOMINAL", "USAGE", "BORROWING LIMIT", "LENDING LIMIT"]
        columns += ["STRATEGY", "GPU MODELS", "PREEMPTION"]
    table = _table(*columns)
    for q in queues:
        row = [q.name, q.parent or "-", f"{q.weight:g}", _gpu_of(q.nominal), _gpu_of(q.usage)]
        row += [_gpu_of(q.borrowed), f"{q.share:.2f}", str(q.pending), str(q.running)]
        row += _budget_cells(q.budget)
        if wide:
            row += [format_resources(q.nominal), format_resources(q.usage)]
            row += [format_resources(q.borrowing_limit), format_resources(q.lending_limit)]
            row += [q.queueing_strategy, ",".join(q.gpu_models) or "-"]
            row += [",".join(f"{k}={v}" for k, v in q.preemption.items()) or "-"]
        table.add_row(*row)
    return table


def priority_classes_table(classes: Sequence[PriorityClassView]) -> Table:
    """NAME, VALUE, PREEMPTION and GLOBAL-DEFAULT of each class, as kubectl lists them."""
    table = _table("NAME", "VALUE", "PREEMPTION", "GLOBAL-DEFAULT")
    for c in classes:
        table.add_row(c.name, str(c.value), c.preemption_policy, str(c.global_default).lower())
    return table


def _budget_cells(budget: BudgetView | None) -> list[str]:
    """BUDGET (used/limit GPU-hours, per period, with its action once spent) and REMAINING."""
    if budget is None:
        return ["-", "-"]
    used = f"{budget.used_gpu_hours:.1f}/{budget.gpu_hours:g} GPU-h/{budget.period}"
    if budget.state == "exhausted":
        used += f" ({budget.action})"
    elif budget.state == "warn":
        used += " (warn)"
    return [used, f"{budget.remaining_gpu_hours:.1f}"]


def alert_subject(alert: AlertView) -> str:
    """What an alert is about: a node's GPU (and the pod holding it, if one does), else a
    workload's pod, else its labels."""
    labels = alert.labels
    pod = f"{labels.get('namespace', '')}/{labels['pod']}" if labels.get("pod") else ""
    if labels.get("Hostname") and "gpu" in labels:
        device = f"{labels['Hostname']} gpu {labels['gpu']}"
        return f"{device} ({pod})" if pod else device
    if pod:
        return pod
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


#: The order alerts are listed in: firing first, then pending, then resolved; the most severe
#: first within a state.
_STATE_ORDER = {"firing": 0, "pending": 1, "resolved": 2}
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def alert_order(alert: AlertView) -> tuple[int, int, str, str]:
    return (
        _STATE_ORDER.get(alert.state.value, 3),
        _SEVERITY_ORDER.get(alert.severity, 3),
        alert.alertname,
        alert_subject(alert),
    )


def alerts_table(alerts: Sequence[AlertView], clock: Clock, *, wide: bool = False) -> Table:
    columns = ["STATE", "SEVERITY", "ALERT", "SUBJECT", "VALUE", "SINCE"]
    if wide:
        columns += ["GPU", "WORKLOAD", "CONDITION", "SUMMARY"]
    table = _table(*columns)
    for a in sorted(alerts, key=alert_order):
        since = a.resolved_at if a.resolved_at is not None else (a.fired_at or a.active_at)
        row = [a.state.value, a.severity, a.alertname, alert_subject(a)]
        row += [f"{a.value:.4g}", clock.age(since)]
        if wide:
            gpu = f"{a.labels.get('Hostname', '-')}/{a.labels.get('gpu', '-')}"
            row += [gpu if "gpu" in a.labels else "-", a.workload or "-", a.condition, a.summary]
        table.add_row(*row)
    return table


def nodes_table(nodes: Sequence[NodeView], *, wide: bool = False) -> Table:
    columns = ["NAME", "GPU MODEL", "GPUS", "GPU%", "CPU", "MEMORY"]
    if wide:
        columns += ["LABELS", "TAINTS"]
    table = _table(*columns)
    for n in nodes:
        row = [n.name, n.gpu_model or "-", node_gpus(n)]
        row += [_percent(n.gpus_allocated, n.gpus_allocatable)]
        row += [f"{format_cpu(n.cpu_allocated)}/{format_cpu(n.cpu)}"]
        row += [f"{format_mib(n.memory_allocated_mib)}/{format_mib(n.memory_mib)}"]
        if wide:
            labels = ",".join(f"{k}={v}" for k, v in sorted(n.labels.items()))
            row += [labels or "-", ",".join(n.taints) or "-"]
        table.add_row(*row)
    return table


def node_gpus(node: NodeView) -> str:
    """GPUs allocated of those allocatable, and the capacity when some are withdrawn (as
    unhealthy): ``3/8``, ``0/7 of 8``."""
    text = f"{format_gpus(node.gpus_allocated)}/{node.gpus_allocatable}"
    return text if node.gpus_allocatable == node.gpus else f"{text} of {node.gpus}"


def top_nodes(nodes: Sequence[NodeView], *, devices: bool = True) -> Group:
    """GPU allocation per node and, indented under it, per device, with bars. Allocation is
    of the GPUs allocatable: a GPU withdrawn as unhealthy is no free room."""
    total = sum(n.gpus_allocatable for n in nodes)
    allocated = sum(n.gpus_allocated for n in nodes)
    withdrawn = sum(n.gpus - n.gpus_allocatable for n in nodes)
    summary = Text(
        f"{len(nodes)} nodes, {format_gpus(allocated)}/{total} GPUs allocated "
        f"({_percent(allocated, total)})"
        + (f"; {withdrawn} GPU(s) withdrawn as unhealthy" if withdrawn else "")
    )
    table = _table("NAME", "MODEL", "GPU ALLOCATION", "GPUS", "GPU%", "CPU%", "MEMORY%", "PODS")
    for n in nodes:
        fraction = min(1.0, n.gpus_allocated / n.gpus_allocatable) if n.gpus_allocatable else 0.0
        table.add_row(
            Text(n.name, style="bold"),
            n.gpu_model or "-",
            gpu_bar(fraction),
            node_gpus(n),
            _percent(n.gpus_allocated, n.gpus_allocatable),
            _percent(n.cpu_allocated, n.cpu),
            _percent(n.memory_allocated_mib, n.memory_mib),
            "",
        )
        if devices:
            for device in n.devices:
                table.add_row(*_device_row(device))
    return Group(summary, Text(""), table)


def _device_kind(device: DeviceView) -> str:
    kind = "mig" if device.mig else "shared" if device.shared else ""
    return kind if device.healthy else f"{kind} withdrawn".strip()


def _device_row(device: DeviceView) -> list[RenderableType]:
    kind = _device_kind(device)
    return [
        f"  gpu{device.index}",
        device.model,
        gpu_bar(device.allocated),
        format_gpus(device.allocated) + (f" {kind}" if kind else ""),
        _percent(device.allocated, 1.0),
        "",
        "",
        ", ".join(device.pods) or "-",
    ]


def _gpu_of(values: dict[str, float]) -> str:
    return format_gpus(values[GPU]) if GPU in values else "-"


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


_STATE_STYLES = {
    WorkloadState.PENDING: "yellow",
    WorkloadState.ADMITTED: "cyan",
    WorkloadState.RUNNING: "green",
    WorkloadState.FAILED: "red",
    WorkloadState.CANCELLED: "dim",
    WorkloadState.SUCCEEDED: "dim green",
}


def _state(state: WorkloadState, reason: str | None = None) -> Text:
    """Its state, or, as kubectl's STATUS, why it is not as that says (CrashLoopBackOff)."""
    if reason:
        return Text(reason, style="red")
    return Text(state.value, style=_STATE_STYLES.get(state, ""))


# -- describe and explain -------------------------------------------------------------------


def field_table(rows: Sequence[tuple[str, str | Text]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column()
    for key, value in rows:
        table.add_row(f"{key}:", value)
    return table


def describe_workload(
    detail: WorkloadDetail, clock: Clock, explanation: Explanation | None = None
) -> Group:
    """kubectl describe: the fields, the timeline, each pod down to its GPUs, the events."""
    priority = f"{detail.priority}" + (
        f" ({detail.priority_class})" if detail.priority_class else ""
    )
    rows: list[tuple[str, str | Text]] = [
        ("Name", detail.name),
        ("Namespace", detail.namespace),
        ("Kind", detail.kind),
        ("Tenant", detail.tenant),
        ("Queue", detail.queue),
        ("Priority", priority),
        ("State", _state(detail.state, detail.reason)),
    ]
    if detail.waiting_for or detail.message:
        rows.append(("Waiting for", detail.waiting_for or "-"))
        rows.append(("Message", detail.message or "-"))
    if explanation is not None:
        position = f"{explanation.position}" if explanation.position is not None else "-"
        rows.append(("Queue position", position))
        rows.append(("Estimated start", _estimate(explanation, clock)))
    gang = f" (gang of {detail.min_member})" if detail.min_member > 1 else ""
    rows += [
        ("Pods", f"{detail.pods_running}/{detail.pods} running{gang}"),
        ("GPUs", f"{format_gpus(detail.gpus)} held (asks {detail.gpu_request})"),
        ("Preemptible", "yes" if detail.preemptible else "no"),
    ]
    for job in detail.jobs:
        state = job.state + (f" ({job.reason})" if job.reason and job.state != "Running" else "")
        rows += [
            (f"{job.kind}", state),
            ("  Completions", f"{job.completed}/{job.completions}"),
            ("  Failed pods", str(job.failed_pods)),
            ("  Restarts", str(job.restarts)),
        ]
        if job.failed_indexes:
            rows.append(("  Failed indexes", _index_ranges(job.failed_indexes)))
        if job.message and job.state == "Failed":
            rows.append(("  Message", job.message))
    if detail.expected_runtime is not None:
        rows.append(("Expected runtime", format_duration(detail.expected_runtime)))
    if detail.checkpoint_interval is not None:
        rows.append(("Checkpoint every", format_duration(detail.checkpoint_interval)))
    parts: list[RenderableType] = [field_table(rows), Text("\nTimeline:", style="bold")]
    parts.append(timeline_table(detail, clock))
    parts.append(Text("\nPods:", style="bold"))
    parts.append(pods_table(detail) if detail.pod_views else Text("  <none>"))
    parts.append(Text("\nEvents:", style="bold"))
    parts.append(events_table(detail, clock) if detail.events else Text("  <none>"))
    return Group(*parts)


def timeline_table(detail: WorkloadSummary, clock: Clock) -> Table:
    table = _table("", "AT", "")
    table.add_row("  submitted", clock.at(detail.submitted), f"{clock.age(detail.submitted)} ago")
    if detail.started is not None:
        waited = format_duration(detail.started - detail.submitted)
        table.add_row("  started", clock.at(detail.started), f"after waiting {waited}")
    elif detail.finished is None:
        table.add_row("  started", "-", f"waiting for {clock.age(detail.submitted)}")
    if detail.finished is not None:
        ran = (
            f"after running {format_duration(detail.finished - detail.started)}"
            if detail.started is not None
            else ""
        )
        table.add_row(f"  {detail.state.value.lower()}", clock.at(detail.finished), ran)
    elif detail.started is not None:
        table.add_row("  running", "-", f"for {clock.age(detail.started)}")
    return table


def pods_table(detail: WorkloadDetail) -> Table:
    table = _table(
        "  NAME", "STATE", "NODE", "GPU INDICES", "SHARE", "MIG", "GPUS", "REQUEST", "CPU"
    )
    table.add_column("MEMORY", no_wrap=True)
    jobs = bool(detail.jobs)
    if jobs:
        table.add_column("RESTARTS", no_wrap=True)
    indexed = any(pod.completion_index is not None for pod in detail.pod_views)
    if indexed:
        table.add_column("INDEX", no_wrap=True)
    for pod in detail.pod_views:
        indices = ",".join(str(i) for i in pod.gpu_indices) or "-"
        share = format_gpus(pod.gpu_share) if pod.gpu_share is not None else "-"
        cells = [
            f"  {pod.name}",
            pod.reason or pod.state,
            pod.node or "-",
            indices,
            share,
            ",".join(pod.mig_slices) or "-",
            format_gpus(pod.gpus),
            pod.gpu_request,
            format_cpu(pod.cpu),
            format_mib(pod.memory_mib),
        ]
        if jobs:
            cells.append(str(pod.restarts))
        if indexed:
            index = pod.completion_index
            cells.append("-" if index is None else str(index))
        table.add_row(*cells)
    return table


def events_table(detail: WorkloadDetail, clock: Clock) -> Table:
    table = _table("  AT", "SINCE SUBMIT", "TYPE", "REASON", "MESSAGE")
    for event in sorted(detail.events, key=lambda e: e.time):
        style = "yellow" if event.type == "Warning" else ""
        table.add_row(
            f"  {clock.at(event.time)}",
            "+" + format_duration(max(event.time - detail.submitted, 0.0)),
            Text(event.type, style=style),
            event.reason,
            event.message,
        )
    return table


def _capacity(node: NodeView) -> str:
    """Capacity and allocatable, as ``kubectl describe node`` shows them, naming the GPUs
    withdrawn as unhealthy."""
    text = f"{node.gpus}, allocatable {node.gpus_allocatable}"
    out = [str(d.index) for d in node.devices if not d.healthy]
    return text + (f" (GPU {', '.join(out)} withdrawn: unhealthy)" if out else "")


def describe_queue(queue: QueueView) -> Group:
    """One queue: its quota and what it uses now, its budget, and (fair sharing over time on)
    its decayed usage, share and fair-share factor, per user too."""
    budget, _ = _budget_cells(queue.budget)
    rows: list[tuple[str, str | Text]] = [
        ("Name", queue.name),
        ("Parent", queue.parent or "-"),
        ("Weight", f"{queue.weight:g}"),
        ("Nominal", format_resources(queue.nominal)),
        ("Usage", format_resources(queue.usage)),
        ("Borrowed", format_resources(queue.borrowed)),
        ("Share now", f"{queue.share:.2f}"),
        ("Workloads", f"{queue.pending} pending, {queue.running} running"),
        ("Budget", budget),
    ]
    fair = queue.fair_share
    if fair is None:
        rows.append(("Fair share", "off (no fairSharing in the scheduling profile)"))
        return Group(field_table(rows))
    ratio = "- (used some, has no share)" if fair.ratio is None else f"{fair.ratio:.3f}"
    rows += [
        ("Usage half-life", format_duration(fair.usage_half_life)),
        ("Decayed usage", f"{fair.usage_gpu_hours:,.2f} GPU-hours"),
        ("Fair share", f"{fair.share:.3f} of its siblings'"),
        ("Usage / share", ratio),
        ("Fair-share factor", f"{fair.factor:.3f}"),
    ]
    users = _table("  USER", "DECAYED GPU-HOURS")
    for user, hours in sorted(fair.users.items()):
        users.add_row(f"  {user}", f"{hours:,.2f}")
    return Group(field_table(rows), Text("\nUsers:", style="bold"), users)


def describe_node(node: NodeView) -> Group:
    rows: list[tuple[str, str | Text]] = [
        ("Name", node.name),
        ("GPU model", node.gpu_model or "-"),
        ("GPUs", f"{format_gpus(node.gpus_allocated)}/{node.gpus_allocatable} allocated"),
        ("GPU capacity", _capacity(node)),
        ("CPU", f"{format_cpu(node.cpu_allocated)}/{format_cpu(node.cpu)} allocated"),
        (
            "Memory",
            f"{format_mib(node.memory_allocated_mib)}/{format_mib(node.memory_mib)} allocated",
        ),
        ("Labels", "\n".join(f"{k}={v}" for k, v in sorted(node.labels.items())) or "-"),
        ("Taints", "\n".join(node.taints) or "-"),
    ]
    devices = _table("  GPU", "MODEL", "MEMORY", "ALLOCATION", "GPUS", "PODS")
    for device in node.devices:
        kind = _device_kind(device)
        devices.add_row(
            f"  {device.index}",
            device.model,
            format_mib(device.memory_mib),
            gpu_bar(device.allocated),
            format_gpus(device.allocated) + (f" {kind}" if kind else ""),
            ", ".join(device.pods) or "-",
        )
    return Group(field_table(rows), Text("\nDevices:", style="bold"), devices)


def _estimate(explanation: Explanation, clock: Clock) -> str:
    if explanation.never:
        return "never"
    if explanation.estimated_start is None:
        return "unknown"
    wait = explanation.estimated_start - clock.now
    when = f"in {format_duration(wait)}" if wait > 0 else "any moment"
    return f"{clock.at(explanation.estimated_start)} ({when})"


def describe_explanation(explanation: Explanation, clock: Clock) -> Group:
    rows: list[tuple[str, str | Text]] = [
        ("Workload", explanation.workload),
        ("State", _state(explanation.state)),
        ("Queue", explanation.queue),
    ]
    if explanation.state is WorkloadState.PENDING:
        position = f"{explanation.position}" if explanation.position is not None else "-"
        if explanation.never:
            position += " (inadmissible: it can never fit as the cluster stands)"
        elif explanation.position == 1:
            position += " (next to be tried)"
        rows += [
            ("Position", position),
            ("Waiting for", explanation.waiting_for or "-"),
            ("Estimated start", _estimate(explanation, clock)),
        ]
    return Group(field_table(rows), Text(""), Text(explanation.message))


# -- names ----------------------------------------------------------------------------------


def _index_ranges(indexes: Sequence[int]) -> str:
    """Indexes as Kubernetes writes a Job's ``status.failedIndexes``: ``1,3-5,9``."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
