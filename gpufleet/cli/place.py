"""``gpufleet place``: place a workload's pods on a cluster once, and show where each went."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpufleet.cli.common import check_policies, console, friendly_errors
from gpufleet.io.readers import read_cluster, read_workload
from gpufleet.model.actions import Bind, MarkUnschedulable
from gpufleet.model.events import PodAdded
from gpufleet.scheduling.core import SchedulerCore
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies import PolicyContext, make_policy
from gpufleet.scheduling.target import typical_shapes


def place(
    cluster: Annotated[Path, typer.Option(help="Cluster spec YAML, Node YAML or node CSV.")],
    workload: Annotated[Path, typer.Option(help="Pod/Job YAML (file or directory) or pod CSV.")],
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "default",
    seed: Annotated[int, typer.Option(help="Seed for policies that draw at random.")] = 0,
) -> None:
    """Place every pod of a workload in order and print its node and GPU devices, or why not."""
    _place(cluster, workload, policy, seed)


@friendly_errors
def _place(cluster: Path, workload: Path, policy: str, seed: int) -> None:
    check_policies([policy])
    nodes = read_cluster(cluster)
    pods = [t.pod for t in read_workload(workload)]
    table = NodeTable(nodes)
    core = SchedulerCore(
        table, make_policy(policy, table, PolicyContext(typical_shapes(pods), seed))
    )
    for pod in pods:
        core.handle(PodAdded(pod))
    actions = core.run_until_idle()
    placed = Table(title=f"Placements ({policy})")
    for column in ("pod", "node", "GPUs", "share (milli)", "MIG slices"):
        placed.add_column(column)
    waiting = Table(title="Pending")
    waiting.add_column("pod")
    waiting.add_column("why")
    for action in actions:
        if isinstance(action, Bind):
            p = action.placement
            placed.add_row(
                action.pod.key,
                p.node,
                ",".join(map(str, p.gpu_indices)) or "-",
                str(p.gpu_milli_per_device) if action.pod.gpu.is_shared else "-",
                ", ".join(f"gpu {g} slot {s}" for g, s in p.mig_slices) or "-",
            )
        elif isinstance(action, MarkUnschedulable):
            waiting.add_row(action.pod.key, action.message)
    console.print(placed)
    if waiting.row_count:
        console.print(waiting)
    bound = sum(isinstance(a, Bind) for a in actions)
    console.print(f"{bound} of {len(pods)} pods placed on {len(nodes)} nodes")
