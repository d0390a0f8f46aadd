"""The control plane's own vocabulary: the states of a workload and the kinds of change it
publishes.

The service owns these; the API (:mod:`gpufleet.api.schemas`) serves them as they are, so the
values here are also the wire format. Plain enums, imported by the command-line client too:
this module imports nothing else.
"""

from __future__ import annotations

from enum import StrEnum


class WorkloadState(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"  # placed, victims still leaving or pods not all running yet
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    CANCELLED = "Cancelled"
    FAILED = "Failed"


class ChangeKind(StrEnum):
    """What a change published by the plane is about."""

    WORKLOAD = "workload"
    QUEUE = "queue"
    NODE = "node"
    CLUSTER = "cluster"
    EVENT = "event"
    #: An alert changed state (pending, firing, resolved...).
    ALERT = "alert"
