"""The one set of metric names: every family gpufleet exposes, with its type, labels and meaning.

Names follow Prometheus' conventions: the ``gpufleet_`` prefix, the unit last (``_seconds``,
``_gpus``), counters ending in ``_total``; amounts of a queue's resources are in the resource's
base unit (cores, bytes, GPUs, or the extended resource's units). :data:`SCHEDULER` families are
served by every world (``gpufleet scheduler``, ``gpufleet serve`` in both modes, and a
simulation's report); :data:`KUBERNETES` ones by the worlds that talk to an API server;
:data:`SERVE` ones by the control plane; :data:`DEVICES` (dcgm-exporter's names, and the
scheduler's allocation beside them) by whatever reads devices: the node agent, and
``gpufleet serve`` over the simulated cluster; :data:`POD_STARTS` (kube-state-metrics' name) by
``gpufleet serve`` where it reads devices. The README's metrics table is this module, in words.

It defines names only: the registry (:mod:`gpufleet.metrics.scheduler`) and the collectors of
each world read them from here, so that no world names a metric of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpufleet.model.alerts import DEVICE_SERIES_LABELS


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class Family:
    #: As exposed (a counter's with its ``_total``).
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- every world
PENDING_WORKLOADS = Family(
    "gpufleet_pending_workloads",
    Kind.GAUGE,
    "Workloads waiting to be admitted, by queue and why they wait (quota, capacity, "
    "preempting: victims are leaving, backoff, untried: not tried yet)",
    ("queue", "reason"),
)
PENDING_PODS = Family(
    "gpufleet_pending_pods", Kind.GAUGE, "Pods of the waiting workloads, by queue", ("queue",)
)
RUNNING_WORKLOADS = Family(
    "gpufleet_running_workloads", Kind.GAUGE, "Workloads admitted and placed, by queue", ("queue",)
)
ALLOCATED_GPUS = Family(
    "gpufleet_allocated_gpus",
    Kind.GAUGE,
    "GPUs held by placed pods (a share counts its fraction; MIG slices, which no GPU quota "
    "counts, are not), by queue and GPU model",
    ("queue", "model"),
)
CLUSTER_GPUS = Family(
    "gpufleet_cluster_gpus", Kind.GAUGE, "GPUs of the nodes, by GPU model", ("model",)
)
UNHEALTHY_GPUS = Family(
    "gpufleet_gpu_unhealthy",
    Kind.GAUGE,
    "1 for each GPU the scheduler withholds because it is unhealthy (an XID, or its node "
    "agent says so), by node and GPU index; healthy GPUs have no series",
    ("node", "gpu"),
)
QUEUE_NOMINAL_QUOTA = Family(
    "gpufleet_queue_nominal_quota",
    Kind.GAUGE,
    "A queue's nominal quota, in the resource's base unit",
    ("queue", "resource"),
)
QUEUE_RESOURCE_USAGE = Family(
    "gpufleet_queue_resource_usage",
    Kind.GAUGE,
    "What a queue's subtree uses, in the resource's base unit",
    ("queue", "resource"),
)
QUEUE_BORROWED_RESOURCES = Family(
    "gpufleet_queue_borrowed_resources",
    Kind.GAUGE,
    "What a queue uses beyond its nominal quota, in the resource's base unit",
    ("queue", "resource"),
)
QUEUE_WEIGHTED_SHARE = Family(
    "gpufleet_queue_weighted_share",
    Kind.GAUGE,
    "A queue's dominant resource share divided by its weight (the fair-sharing order)",
    ("queue",),
)
ADMITTED_WORKLOADS = Family(
    "gpufleet_admitted_workloads_total", Kind.COUNTER, "Workloads admitted and placed", ("queue",)
)
PREEMPTED_WORKLOADS = Family(
    "gpufleet_preempted_workloads_total",
    Kind.COUNTER,
    "Workloads evicted to make room for another, by the evicted one's queue",
    ("queue",),
)
EVICTED_WORKLOADS = Family(
    "gpufleet_evicted_workloads_total",
    Kind.COUNTER,
    "Workloads evicted for any reason (preempted, a bind failed, a gang not ready in time)",
    ("queue",),
)
SCHEDULED_PODS = Family(
    "gpufleet_scheduled_pods_total", Kind.COUNTER, "Pods placed and sent to be bound"
)
BIND_FAILURES = Family(
    "gpufleet_bind_failures_total",
    Kind.COUNTER,
    "Binds the cluster refused (the pod waits again)",
)
IGNORED_EVENTS = Family(
    "gpufleet_ignored_events_total",
    Kind.COUNTER,
    "Cluster changes the core could not take (a pod bound beyond a node's capacity)",
)
TURN_SECONDS = Family(
    "gpufleet_scheduling_turn_seconds",
    Kind.HISTOGRAM,
    "Time of one turn of the control loop: events in, cycles until idle, actions out",
)
BIND_SECONDS = Family(
    "gpufleet_bind_duration_seconds",
    Kind.HISTOGRAM,
    "Time from a bind sent to its answer (the Binding call; a simulated cluster binds at "
    "once and observes none)",
)
SCHEDULER = (
    PENDING_WORKLOADS,
    PENDING_PODS,
    RUNNING_WORKLOADS,
    ALLOCATED_GPUS,
    CLUSTER_GPUS,
    UNHEALTHY_GPUS,
    QUEUE_NOMINAL_QUOTA,
    QUEUE_RESOURCE_USAGE,
    QUEUE_BORROWED_RESOURCES,
    QUEUE_WEIGHTED_SHARE,
    ADMITTED_WORKLOADS,
    PREEMPTED_WORKLOADS,
    EVICTED_WORKLOADS,
    SCHEDULED_PODS,
    BIND_FAILURES,
    IGNORED_EVENTS,
    TURN_SECONDS,
    BIND_SECONDS,
)

# ----------------------------------------------------------------------------- Kubernetes
LEADER = Family("gpufleet_leader", Kind.GAUGE, "1 while this replica leads, else 0")
BIND_CALLS_SUCCEEDED = Family(
    "gpufleet_bind_calls_succeeded_total", Kind.COUNTER, "Bindings the API server took"
)
BIND_CALLS_FAILED = Family(
    "gpufleet_bind_calls_failed_total", Kind.COUNTER, "Bindings the API server refused"
)
EVICTION_CALLS_SUCCEEDED = Family(
    "gpufleet_eviction_calls_succeeded_total", Kind.COUNTER, "Evictions the API server took"
)
EVICTION_CALLS_BLOCKED = Family(
    "gpufleet_eviction_calls_blocked_total",
    Kind.COUNTER,
    "Evictions refused (a PodDisruptionBudget), retried later",
)
INVALID_OBJECTS = Family(
    "gpufleet_invalid_objects_total", Kind.COUNTER, "Objects reported as InvalidSpec"
)
OVERCOMMITTED_PODS = Family(
    "gpufleet_overcommitted_pods",
    Kind.GAUGE,
    "Pods seen bound to a node beyond what it has free (the core refused to count them)",
)
PODS_ON_WITHDRAWN_DEVICES = Family(
    "gpufleet_pods_on_withdrawn_devices",
    Kind.GAUGE,
    "Bound pods holding GPUs their node no longer lists (kept and counted)",
)
REPORTS_DROPPED = Family(
    "gpufleet_reports_dropped_total",
    Kind.COUNTER,
    "Conditions and Events dropped on a full backlog",
)
API_ERRORS = Family(
    "gpufleet_api_errors_total",
    Kind.COUNTER,
    "API calls that failed, by verb and HTTP code (<error>: no answer: refused, reset, timed out)",
    ("verb", "code"),
)
KUBERNETES = (
    LEADER,
    BIND_CALLS_SUCCEEDED,
    BIND_CALLS_FAILED,
    EVICTION_CALLS_SUCCEEDED,
    EVICTION_CALLS_BLOCKED,
    INVALID_OBJECTS,
    PODS_ON_WITHDRAWN_DEVICES,
    REPORTS_DROPPED,
    API_ERRORS,
    OVERCOMMITTED_PODS,
)

# ----------------------------------------------------------------------------- control plane
WORKLOADS = Family(
    "gpufleet_workloads", Kind.GAUGE, "Workloads in the control plane's book, by state", ("state",)
)
CLUSTER_TIME = Family(
    "gpufleet_cluster_time_seconds",
    Kind.GAUGE,
    "The cluster's clock (simulated seconds, or Unix time with --local and on Kubernetes)",
)
SUBMITTED_WORKLOADS = Family(
    "gpufleet_submitted_workloads_total", Kind.COUNTER, "Workloads accepted by the API"
)
STARTED_PODS = Family(
    "gpufleet_started_pods_total", Kind.COUNTER, "Pods of the book seen bound to a node"
)
PREEMPTED_PODS = Family(
    "gpufleet_preempted_pods_total", Kind.COUNTER, "Pods of the book evicted (they wait again)"
)
SUCCEEDED_PODS = Family(
    "gpufleet_succeeded_pods_total", Kind.COUNTER, "Pods of the book that finished their work"
)
FAILED_PODS = Family(
    "gpufleet_failed_pods_total",
    Kind.COUNTER,
    "Pods of the book that failed and were replaced by a new pod",
)
INTERRUPTED_PODS = Family(
    "gpufleet_interrupted_pods_total",
    Kind.COUNTER,
    "Pods of the book lost with their node (a spot interruption, a node failure) or to their "
    "GPU's fault, or taken down with such a pod of their gang",
)
CONTAINER_RESTARTS = Family(
    "gpufleet_container_restarts_total",
    Kind.COUNTER,
    "Containers of the book's pods that failed and restarted in place",
)
API_REQUEST_SECONDS = Family(
    "gpufleet_api_request_seconds",
    Kind.HISTOGRAM,
    "Latency of the control plane's API requests",
    ("method", "route", "status"),
)
#: The control plane's counters (``PlaneBook.counters``), by the key it counts under.
PLANE_COUNTERS = {
    "submitted": SUBMITTED_WORKLOADS,
    "bound": STARTED_PODS,
    "preempted": PREEMPTED_PODS,
    "finished": SUCCEEDED_PODS,
    "failed": FAILED_PODS,
    "interrupted": INTERRUPTED_PODS,
    "restarted": CONTAINER_RESTARTS,
}
COST_DOLLARS = Family(
    "gpufleet_cost_dollars_total",
    Kind.COUNTER,
    "What the workloads' pods cost since the control plane started, up to "
    "gpufleet_cost_priced_until_seconds, in the price list's currency, by split: allocated "
    "(GPU, CPU and memory held), used (the GPU part by measured utilisation, plus CPU and "
    "memory), idle (GPU held but not used), unmeasured (GPU cost of held time no utilisation "
    "sample stands for; allocated = used + idle + unmeasured)",
    ("namespace", "queue", "tenant", "split"),
)
COST_PRICED_UNTIL = Family(
    "gpufleet_cost_priced_until_seconds",
    Kind.GAUGE,
    "The control plane's time up to which the cost counters have priced (they stay two "
    "observatory steps behind its clock, until every utilisation sample of that time is in)",
    (),
)
IDLE_GPU_HOURS = Family(
    "gpufleet_idle_gpu_hours_total",
    Kind.COUNTER,
    "GPU-hours held by pods but not used (held x (1 - measured utilisation)) since the control "
    "plane started",
    ("namespace", "queue"),
)
# ----------------------------------------------------------------------------- alert webhooks
# The control plane's alert notifications (gpufleet.service.alert_webhooks), as Alertmanager
# counts its own (alertmanager_notifications_total, alertmanager_notifications_failed_total).
ALERT_NOTIFICATIONS = Family(
    "gpufleet_alert_notifications_total",
    Kind.COUNTER,
    "Alert notifications delivered to a webhook (Alertmanager's payload), by receiver",
    ("receiver",),
)
ALERT_NOTIFICATIONS_FAILED = Family(
    "gpufleet_alert_notifications_failed_total",
    Kind.COUNTER,
    "Alert notifications not delivered after their retries, by receiver and reason "
    "(http_4xx, http_5xx, connection, queue_full)",
    ("receiver", "reason"),
)
#: Served by ``serve`` in every world (zero until a notifier sends).
ALERTING = (ALERT_NOTIFICATIONS, ALERT_NOTIFICATIONS_FAILED)
# ----------------------------------------------------------------------------- alert rounds
# The observatory's rounds (gpufleet.service.observatory), as Prometheus counts its rule group's
# (prometheus_rule_group_iterations_total, prometheus_rule_group_iterations_missed_total).
OBSERVATORY_ROUNDS = Family(
    "gpufleet_observatory_rounds_total",
    Kind.COUNTER,
    "Rounds of alert rule evaluation, at the fixed instants of the observatory's step (those "
    "evaluated late to catch up included)",
)
OBSERVATORY_ROUNDS_CAUGHT_UP = Family(
    "gpufleet_observatory_rounds_caught_up_total",
    Kind.COUNTER,
    "Rounds evaluated late, without a reading of their own, because the round thread ran "
    "behind the observatory's step",
)
OBSERVATORY_ROUNDS_SKIPPED = Family(
    "gpufleet_observatory_rounds_skipped_total",
    Kind.COUNTER,
    "Instants of the observatory's step never evaluated: the round thread fell further behind "
    "than the rounds it catches up (40)",
)
#: Served by ``serve`` in every world (no sample where the plane observes nothing).
OBSERVING = (OBSERVATORY_ROUNDS, OBSERVATORY_ROUNDS_CAUGHT_UP, OBSERVATORY_ROUNDS_SKIPPED)

SERVE = (
    WORKLOADS,
    CLUSTER_TIME,
    *PLANE_COUNTERS.values(),
    API_REQUEST_SECONDS,
    COST_DOLLARS,
    COST_PRICED_UNTIL,
    IDLE_GPU_HOURS,
    *ALERTING,
    *OBSERVING,
)


# ----------------------------------------------------------------------------- devices
# NVIDIA dcgm-exporter's names, types, help texts and labels (its etc/default-counters.csv and
# its Prometheus format), so that dashboards built on it work unchanged; served by the node
# agent and by ``gpufleet serve`` over the simulated cluster (gpufleet.metrics.dcgm).
#: The labels of every device series, in dcgm-exporter's order; ``GPU_I_PROFILE`` and
#: ``GPU_I_ID`` only on MIG instances, ``DCGM_FI_DRIVER_VERSION`` where the driver is known,
#: ``container``, ``namespace`` and ``pod`` on a device a pod holds.
DEVICE_LABELS = DEVICE_SERIES_LABELS
DCGM_GPU_UTIL = Family("DCGM_FI_DEV_GPU_UTIL", Kind.GAUGE, "GPU utilization (in %).", DEVICE_LABELS)
DCGM_MEM_COPY_UTIL = Family(
    "DCGM_FI_DEV_MEM_COPY_UTIL", Kind.GAUGE, "Memory utilization (in %).", DEVICE_LABELS
)
DCGM_FB_FREE = Family(
    "DCGM_FI_DEV_FB_FREE", Kind.GAUGE, "Framebuffer memory free (in MiB).", DEVICE_LABELS
)
DCGM_FB_USED = Family(
    "DCGM_FI_DEV_FB_USED", Kind.GAUGE, "Framebuffer memory used (in MiB).", DEVICE_LABELS
)
DCGM_GPU_TEMP = Family("DCGM_FI_DEV_GPU_TEMP", Kind.GAUGE, "GPU temperature (in C).", DEVICE_LABELS)
DCGM_POWER_USAGE = Family(
    "DCGM_FI_DEV_POWER_USAGE", Kind.GAUGE, "Power draw (in W).", DEVICE_LABELS
)
DCGM_SM_CLOCK = Family(
    "DCGM_FI_DEV_SM_CLOCK", Kind.GAUGE, "SM clock frequency (in MHz).", DEVICE_LABELS
)
DCGM_XID_ERRORS = Family(
    "DCGM_FI_DEV_XID_ERRORS",
    Kind.GAUGE,
    "Value of the last XID error encountered.",
    (*DEVICE_LABELS, "err_code", "err_msg"),
)
DCGM_GR_ENGINE_ACTIVE = Family(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    Kind.GAUGE,
    "Ratio of time the graphics engine is active.",
    DEVICE_LABELS,
)
GPU_ALLOCATED = Family(
    "gpufleet_gpu_allocated",
    Kind.GAUGE,
    "The fraction of a GPU or MIG instance the scheduler allocated (0..1), with the device "
    "labels of the DCGM_FI_* series",
    DEVICE_LABELS[:9],
)
DEVICES = (
    DCGM_GPU_UTIL,
    DCGM_MEM_COPY_UTIL,
    DCGM_FB_FREE,
    DCGM_FB_USED,
    DCGM_GPU_TEMP,
    DCGM_POWER_USAGE,
    DCGM_SM_CLOCK,
    DCGM_XID_ERRORS,
    DCGM_GR_ENGINE_ACTIVE,
    GPU_ALLOCATED,
)


# ----------------------------------------------------------------------------- pods' starts
# kube-state-metrics' name, help text and the labels the exported alert rules join on
# (``minRunning``: ``time() - kube_pod_start_time``), served by ``gpufleet serve`` beside the
# device families where it reads the GPUs itself (on Kubernetes, kube-state-metrics serves it).
KUBE_POD_START_TIME = Family(
    "kube_pod_start_time",
    Kind.GAUGE,
    "Start time in unix timestamp for a pod.",
    ("namespace", "pod"),
)
POD_STARTS = (KUBE_POD_START_TIME,)

ALL = SCHEDULER + KUBERNETES + SERVE + DEVICES + POD_STARTS
