"""Topology domains: the nodes that share a value of a label (``kubernetes.io/hostname``,
``topology.kubernetes.io/zone``, a rack label), and per-domain totals of a per-row column.

The node table keeps, per label key, the value id of each row (-1 where the node lacks the
label); a domain total is one ``bincount`` over those ids. Nodes that have left the cluster
never count. What it does not do: know what the column counts (``interpod``, ``spread``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Domains:
    """The domains of one label key over the table's rows."""

    #: Value id of each row (-1: the node lacks the label).
    ids: IntArray
    #: Number of values the key has (domain ids are 0..size-1).
    size: int

    @property
    def labelled(self) -> BoolArray:
        has: BoolArray = self.ids >= 0
        return has

    def totals(self, column: IntArray | FloatArray, counted: BoolArray) -> FloatArray:
        """Per domain, the sum of ``column`` over the rows of ``counted`` that are labelled."""
        take = counted & (self.ids >= 0)
        weights = column[: self.ids.size][take].astype(np.float64)
        totals = np.bincount(self.ids[take], weights=weights, minlength=self.size)
        return totals.astype(np.float64, copy=False)

    def present(self, counted: BoolArray) -> BoolArray:
        """Per domain, whether some row of ``counted`` is in it."""
        take = counted & (self.ids >= 0)
        found: BoolArray = np.bincount(self.ids[take], minlength=self.size) > 0
        return found

    def per_row(self, totals: FloatArray) -> FloatArray:
        """Each row's domain total (0 where the node lacks the label)."""
        if totals.size == 0:
            return np.zeros(self.ids.size, np.float64)
        values: FloatArray = np.where(self.ids >= 0, totals[np.maximum(self.ids, 0)], 0.0)
        return values


def domains_of(table: NodeTable, key: str) -> Domains:
    """The domains of ``key`` over rows ``0..table.size``."""
    n = table.size
    column = table.label_ids.get(key)
    if column is None:
        return Domains(np.full(n, -1, np.int64), 0)
    return Domains(column[:n], len(table.label_values[key]))
