"""Placement policies, selectable by name.

The six policies of the FGD paper (``random``, ``dotprod``, ``gpu-clustering``,
``gpu-packing``, ``bestfit``, ``fgd``), faithful to ``benchmarks/fgd-protocol.md``, and
``default``, gpufleet's own policy (see :mod:`gpufleet.scheduling.policies.default`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpufleet.scheduling.fragmentation import FragmentationModel
from gpufleet.scheduling.framework import Policy
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.policies.bestfit import bestfit_policy
from gpufleet.scheduling.policies.clustering import clustering_policy
from gpufleet.scheduling.policies.default import default_policy
from gpufleet.scheduling.policies.dotprod import dotprod_policy
from gpufleet.scheduling.policies.fgd import fgd_policy
from gpufleet.scheduling.policies.packing import packing_policy
from gpufleet.scheduling.policies.random_fit import random_policy
from gpufleet.scheduling.policy_names import POLICY_DESCRIPTIONS, POLICY_NAMES
from gpufleet.scheduling.target import TargetWorkload


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may know besides the cluster: the expected workload and a seed."""

    target: TargetWorkload
    seed: int = 0


_FACTORIES: dict[str, Callable[[NodeTable, PolicyContext], Policy]] = {
    "random": lambda table, ctx: random_policy(np.random.default_rng([ctx.seed, 1])),
    "dotprod": lambda table, ctx: dotprod_policy(),
    "gpu-clustering": lambda table, ctx: clustering_policy(),
    "gpu-packing": lambda table, ctx: packing_policy(),
    "bestfit": lambda table, ctx: bestfit_policy(),
    "fgd": lambda table, ctx: fgd_policy(FragmentationModel(table, ctx.target)),
    "default": lambda table, ctx: default_policy(table, ctx.target),
}

PAPER_POLICIES: tuple[str, ...] = POLICY_NAMES[:6]


class UnknownPolicyError(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
        self.name = name


def make_policy(name: str, table: NodeTable, context: PolicyContext) -> Policy:
    """Build the policy called ``name`` for ``table``."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise UnknownPolicyError(name) from None
    return factory(table, context)


__all__ = [
    "PAPER_POLICIES",
    "POLICY_DESCRIPTIONS",
    "POLICY_NAMES",
    "PolicyContext",
    "UnknownPolicyError",
    "make_policy",
]
