"""Placement policies, selectable by name.

The six policies of the FGD paper (``random``, ``dotprod``, ``gpu-clustering``,
``gpu-packing``, ``bestfit``, ``fgd``), faithful to ``benchmarks/fgd-protocol.md``, and
``default``, gpufleet's own policy (see :mod:`gpufleet.scheduling.policies.default`). Each is
built for a node table by its factory (:data:`POLICY_FACTORIES`, under the names of
:mod:`..policy_names`); a :class:`~gpufleet.scheduling.registry.Registry` starts with these and
may register more.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
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


#: Builds a policy for a node table.
PolicyFactory = Callable[[NodeTable, PolicyContext], Policy]


def _random(table: NodeTable, context: PolicyContext) -> Policy:
    return random_policy(np.random.default_rng([context.seed, 1]))


def _dotprod(table: NodeTable, context: PolicyContext) -> Policy:
    return dotprod_policy()


def _clustering(table: NodeTable, context: PolicyContext) -> Policy:
    return clustering_policy()


def _packing(table: NodeTable, context: PolicyContext) -> Policy:
    return packing_policy()


def _bestfit(table: NodeTable, context: PolicyContext) -> Policy:
    return bestfit_policy()


def _fgd(table: NodeTable, context: PolicyContext) -> Policy:
    return fgd_policy(FragmentationModel(table, context.target))


def _default(table: NodeTable, context: PolicyContext) -> Policy:
    return default_policy(table, context.target)


#: The built-in policies by name (the names of :data:`POLICY_NAMES`, in their order).
POLICY_FACTORIES: Mapping[str, PolicyFactory] = {
    "random": _random,
    "dotprod": _dotprod,
    "gpu-clustering": _clustering,
    "gpu-packing": _packing,
    "bestfit": _bestfit,
    "fgd": _fgd,
    "default": _default,
}

PAPER_POLICIES: tuple[str, ...] = POLICY_NAMES[:6]


class UnknownPolicyError(ValueError):
    def __init__(self, name: str, known: Collection[str] = POLICY_NAMES) -> None:
        super().__init__(f"unknown policy {name!r}; choose one of: {', '.join(known)}")
        self.name = name


def make_policy(
    name: str,
    table: NodeTable,
    context: PolicyContext,
    factories: Mapping[str, PolicyFactory] = POLICY_FACTORIES,
) -> Policy:
    """Build the policy called ``name`` for ``table`` (from ``factories``: the built-in ones
    unless a registry gives its own)."""
    try:
        factory = factories[name]
    except KeyError:
        raise UnknownPolicyError(name, list(factories)) from None
    return factory(table, context)


__all__ = [
    "PAPER_POLICIES",
    "POLICY_DESCRIPTIONS",
    "POLICY_FACTORIES",
    "POLICY_NAMES",
    "PolicyContext",
    "PolicyFactory",
    "UnknownPolicyError",
    "make_policy",
]
