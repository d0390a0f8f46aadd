"""Admission stories for table-driven tests of the core: steps that submit (or finish)
workloads at a time, and what must run and what must have been evicted once the core settled.
Every story also checks that gangs run whole and that every preemption admits its preemptor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpufleet.model import Node
from gpufleet.model.queues import Queue, ResourceQuota
from gpufleet.model.workload import Workload
from gpufleet.testing.builders import make_workload
from gpufleet.testing.fakes import EchoCluster, make_core

LATER = 1_000.0  # well past the minimum run time (120 s) of what started at t=0


@dataclass(frozen=True)
class Step:
    """At ``at`` (None: the core's next timer) finish ``finish`` (workload names) and submit
    ``submit``; once the core settled, check what is given."""

    at: float | None
    submit: tuple[Workload, ...] = ()
    finish: tuple[str, ...] = ()
    #: Names of the workloads with pods running.
    running: frozenset[str] | None = None
    #: Names of every workload evicted so far, or only how many there were.
    evicted: frozenset[str] | None = None
    evicted_count: int | None = None
    #: Whole GPUs held per queue (queues holding none left out).
    gpus_by_queue: Mapping[str, int] | None = None
    #: GPUs held on each node.
    gpus_by_node: Mapping[str, int] | None = None


@dataclass(frozen=True)
class Case:
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    steps: tuple[Step, ...]
    resource_quotas: tuple[ResourceQuota, ...] = ()


def names(*values: str) -> frozenset[str]:
    return frozenset(values)


def jobs(prefix: str, count: int, queue: str, **options: object) -> tuple[Workload, ...]:
    """``count`` workloads named prefix0, prefix1, ... (one pod of one GPU unless told)."""
    return tuple(
        make_workload(f"{prefix}{i}", queue, **options)  # type: ignore[arg-type]
        for i in range(count)
    )


def run(case: Case) -> None:
    core = make_core(case.nodes, case.queues, resource_quotas=case.resource_quotas)
    cluster = EchoCluster(core)
    workloads: dict[str, Workload] = {}
    owner: dict[str, str] = {}
    for number, step in enumerate(case.steps, start=1):
        now = core.next_timer() if step.at is None else step.at
        for workload in step.submit:
            workloads[workload.name] = workload
            owner.update((pod.key, workload.name) for pod in workload.pods)
        for name in step.finish:
            cluster.finish_workload(workloads[name], now=now)
        cluster.submit(*step.submit, now=now)
        where = f"after step {number} (t={now:g})"
        running = {owner[key] for key in cluster.running}
        for name in running:  # gangs run whole or not at all
            gang = workloads[name].pods[: workloads[name].gang_size]
            assert all(p.key in cluster.running for p in gang), f"{name} runs in part {where}"
        for _, preemptor, _ in core.preemptions:  # every preemption admits its preemptor
            assert preemptor in core.running, f"{preemptor} preempted but waits {where}"
        evicted = {owner[key] for key in cluster.evicted}
        if step.running is not None:
            assert running == step.running, where
        if step.evicted is not None:
            assert evicted == step.evicted, where
        if step.evicted_count is not None:
            assert len(evicted) == step.evicted_count, where
        if step.gpus_by_queue is not None:
            queue_of = {key: workloads[name].queue for key, name in owner.items()}
            assert cluster.gpus_of(queue_of) == step.gpus_by_queue, where
        if step.gpus_by_node is not None:
            by_node: dict[str, int] = {}
            for placement in cluster.running.values():
                by_node[placement.node] = by_node.get(placement.node, 0) + len(
                    placement.gpu_indices
                )
            assert by_node == step.gpus_by_node, where
