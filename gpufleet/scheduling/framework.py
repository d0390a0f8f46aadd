"""Extension points of the placement engine: small protocols, one plugin per file.

* :class:`FilterPlugin` returns a boolean mask over all nodes where one pod can go, and names
  the reason a node fails (counted per reason for ``explain``).
* :class:`ScorePlugin` returns raw scores for some rows; scores of a row that depend only on
  that row's state are cached by the engine and recomputed only when the row changes.
* :class:`DeviceChooser` picks the devices (GPU positions, MIG slices) on the chosen node.

A :class:`Policy` bundles scorers (with weights) and a device chooser; filters are shared by all
policies. A rejection is a returned value with reasons, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable

FloatArray = npt.NDArray[np.float64]


class FilterPlugin(Protocol):
    """Where can one pod go? ``static`` filters depend on the node set only, not on usage."""

    name: str
    static: bool

    def applies(self, demand: Demand) -> bool:
        """False when the filter passes every node for this pod (so it can be skipped)."""
        ...

    def mask(self, table: NodeTable, demand: Demand, rows: IntArray | None = None) -> BoolArray:
        """Which of ``rows`` (default: all rows ``0..table.size``) pass."""
        ...

    def reasons(self, table: NodeTable, demand: Demand) -> Mapping[str, BoolArray]:
        """Masks of the nodes that fail, per human-readable reason."""
        ...


class ScorePlugin(Protocol):
    """How good is each candidate row? Higher wins.

    When ``row_local`` is true, a row's score depends only on that row's state and the pod's
    CPU and GPU request (``Demand.score_key``), so the engine caches it per (plugin, key) and
    recomputes only rows that changed. Such a plugin must not read the pod's memory, selectors
    or tolerations (filters deal with those), nor other rows.
    """

    name: str
    row_local: bool

    def score(self, table: NodeTable, demand: Demand, rows: IntArray) -> FloatArray:
        """Raw scores of ``rows`` (all of them fit the pod)."""
        ...

    def normalize(self, scores: FloatArray) -> FloatArray:
        """Turn raw scores over all feasible rows into the values that are compared."""
        ...


@dataclass(frozen=True, slots=True)
class DeviceChoice:
    """Column positions of the GPUs a pod takes on its node, or the MIG slices it takes."""

    positions: tuple[int, ...] = ()
    mig_slices: tuple[tuple[int, int], ...] = ()


class DeviceChooser(Protocol):
    """Which devices on the chosen row (Reserve)."""

    def choose(self, table: NodeTable, row: int, demand: Demand) -> DeviceChoice: ...


class PolicyState(Protocol):
    """Policies that learn from arrivals (the default policy's slot reserve). The scheduling
    core calls :meth:`observe` once per arriving pod, not per placement attempt."""

    def observe(self, demand: Demand) -> None: ...


@dataclass(slots=True)
class Policy:
    """A named placement policy: weighted scorers and a device chooser."""

    name: str
    scorers: Sequence[tuple[ScorePlugin, float]]
    devices: DeviceChooser
    description: str = ""
    observers: Sequence[PolicyState] = field(default_factory=tuple)


def identity(scores: FloatArray) -> FloatArray:
    return scores


def minmax_normalize_int(scores: FloatArray, top: int = 100) -> FloatArray:
    """kube-scheduler's integer min-max normalisation to 0..top (all equal -> all 0)."""
    if scores.size == 0:
        return scores
    low = scores.min()
    high = scores.max()
    if high == low:
        return np.zeros_like(scores)
    raw = (scores - low).astype(np.int64)
    normalised: FloatArray = ((raw * top) // int(high - low)).astype(np.float64)
    return normalised
