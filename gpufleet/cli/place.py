"""``gpufleet place``: place a workload's pods on a cluster once, and show where each went.

With ``--scenario`` (queues, priority classes, quotas and gangs from YAML), every workload is
admitted through its queue at once (submit times ignored) and the pending ones are explained:
queue position, what they wait for, why, and an estimated start. A Job of ``parallelism: 0``
is valid and runs no pods: it is said as paused (``paused: Job ns/x: ...``), not an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpufleet.cli.inputs import (
    check_policies,
    console,
    fail,
    friendly_errors,
    note_paused,
    warn,
    warn_skipped,
)
from gpufleet.cli.tables import show
from gpufleet.io.kinds import Skipped
from gpufleet.io.readers import read_cluster, read_scenario, read_workload
from gpufleet.model import MILLI_PER_GPU
from gpufleet.model.actions import Action, Bind, MarkUnschedulable
from gpufleet.model.events import PodAdded, WorkloadAdded
from gpufleet.model.times import simulated_time
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import typical_shapes


def place(
    cluster: Annotated[Path, typer.Option(help="Cluster spec YAML, Node YAML or node CSV.")],
    workload: Annotated[
        Path | None,
        typer.Option(
            help="Pod, Job, Deployment, StatefulSet or ReplicaSet YAML (file or directory) "
            "or pod CSV."
        ),
    ] = None,
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "default",
    seed: Annotated[int, typer.Option(help="Seed for policies that draw at random.")] = 0,
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            help="Instead of --workload: YAML files or directories with queues, priority "
            "classes, quotas and workloads (repeatable); pending workloads are explained."
        ),
    ] = None,
) -> None:
    """Place every pod of a workload in order and print its node and GPU devices, or why not."""
    if (workload is None) == (not scenario):
        raise fail("give either --workload or --scenario")
    if scenario:
        _place_scenario(cluster, scenario, policy, seed)
    else:
        assert workload is not None
        _place(cluster, workload, policy, seed)


@friendly_errors
def _place(cluster: Path, workload: Path, policy: str, seed: int) -> None:
    check_policies([policy])
    skipped = Skipped()
    nodes = read_cluster(cluster, skipped)
    paused: list[str] = []
    pods = [t.pod for t in read_workload(workload, skipped, paused)]
    warn_skipped(skipped)
    note_paused(paused)
    table = NodeTable(nodes)
    core = SchedulerCore(
        table, make_policy(policy, table, PolicyContext(typical_shapes(pods), seed))
    )
    for pod in pods:
        core.handle(PodAdded(pod))
    actions = core.run_until_idle()
    _print_placements(actions, policy)
    waiting = Table(title="Pending")
    waiting.add_column("pod", no_wrap=True)
    waiting.add_column("why", overflow="fold")
    for action in actions:
        if isinstance(action, MarkUnschedulable):
            waiting.add_row(action.pod.key, action.message)
    if waiting.row_count:
        show(waiting)
    bound = sum(isinstance(a, Bind) for a in actions)
    console.print(f"{bound} of {len(pods)} pods placed on {len(nodes)} nodes")


@friendly_errors
def _place_scenario(cluster: Path, paths: Sequence[str], policy: str, seed: int) -> None:
    check_policies([policy])
    skipped = Skipped()
    nodes = read_cluster(cluster, skipped)
    scenario = read_scenario(paths, skipped)
    warn_skipped(skipped)
    note_paused(scenario.paused_jobs)
    if scenario.node_pools:
        names = ", ".join(pool.name for pool in scenario.node_pools)
        warn(f"NodePool {names}: node pools grow a simulated cluster (simulate --scenario); "
             "placed on the cluster's nodes only")  # fmt: skip
    pods = [p for t in scenario.workloads for p in t.workload.pods]
    table = NodeTable(nodes)
    core = SchedulerCore(
        table,
        make_policy(policy, table, PolicyContext(typical_shapes(pods), seed)),
        queues=scenario.queues,
        resource_quotas=scenario.resource_quotas,
    )
    for message in core.quota_warnings():
        warn(message)
    for timed in scenario.workloads:
        core.handle(WorkloadAdded(timed.workload))
    actions = core.run_until_idle(now=0.0)
    _print_placements(actions, policy)
    pending = core.explain_pending()
    if pending:
        waiting = Table(title="Pending workloads")
        for column in ("workload", "queue", "pos", "waiting for", "why", "est. start"):
            waiting.add_column(
                column,
                justify="right" if column == "pos" else "left",
                no_wrap=column != "why",  # the rest are names and short values, shown whole
                overflow="fold",
            )
        for p in sorted(pending, key=lambda p: (p.queue, p.position)):
            start = "-" if p.estimated_start is None else simulated_time(p.estimated_start)
            waiting.add_row(p.workload, p.queue, str(p.position), p.waiting_for, p.message, start)
        show(waiting)
    bound = sum(isinstance(a, Bind) for a in actions)
    console.print(
        f"{bound} of {len(pods)} pods placed on {len(nodes)} nodes; "
        f"{len(scenario.workloads) - len(pending)} of {len(scenario.workloads)} workloads "
        "admitted"
    )


def _print_placements(actions: Sequence[Action], policy: str) -> None:
    placed = Table(title=f"Placements ({policy})")
    for column in ("pod", "node", "GPUs", "share (milli)", "MIG slices"):
        placed.add_column(column, no_wrap=column != "MIG slices", overflow="fold")
    for action in actions:
        if isinstance(action, Bind):
            p = action.placement
            placed.add_row(
                action.pod.key,
                p.node,
                ",".join(map(str, p.gpu_indices)) or "-",
                str(p.gpu_milli_per_device)
                if action.pod.gpu.is_shared or 0 < p.gpu_milli_per_device < MILLI_PER_GPU
                else "-",
                ", ".join(f"gpu {g} slot {s}" for g, s in p.mig_slices) or "-",
            )
    show(placed)
