"""What backends report to the scheduling core: changes to nodes and pods."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.node import Node
from gpufleet.model.placement import Placement
from gpufleet.model.pod import Pod
from gpufleet.model.tenancy import Workload


@dataclass(frozen=True, slots=True)
class NodeAdded:
    node: Node


@dataclass(frozen=True, slots=True)
class NodeRemoved:
    name: str


@dataclass(frozen=True, slots=True)
class PodAdded:
    """A pod to schedule (pending)."""

    pod: Pod


@dataclass(frozen=True, slots=True)
class PodBound:
    """A pod runs on ``placement`` though this core did not bind it (or it is restarting)."""

    pod: Pod
    placement: Placement


@dataclass(frozen=True, slots=True)
class PodDeleted:
    """A pod is gone (finished, deleted or dropped), wherever it was."""

    key: str


@dataclass(frozen=True, slots=True)
class BindFailed:
    """A bind the core asked for did not happen; the pod is pending again."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class WorkloadAdded:
    """A workload (one pod or a gang) to admit and place."""

    workload: Workload


@dataclass(frozen=True, slots=True)
class PodReady:
    """A bound pod is running (its containers started): gangs wait for all their pods."""

    key: str


ClusterEvent = (
    NodeAdded
    | NodeRemoved
    | PodAdded
    | WorkloadAdded
    | PodBound
    | PodReady
    | PodDeleted
    | BindFailed
)
