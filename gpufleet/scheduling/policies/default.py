"""gpufleet's default policy (placeholder until designed; see experiments)."""

from __future__ import annotations

from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.framework import Policy
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies.fgd import fgd_policy
from gpufleet.scheduling.target import TargetWorkload


def default_policy(table: NodeTable, target: TargetWorkload) -> Policy:
    policy = fgd_policy(FragmentationModel(table, target))
    policy.name = "default"
    return policy
