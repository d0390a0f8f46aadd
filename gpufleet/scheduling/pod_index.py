"""Which pods hold each row of the node table, as counts the inter-pod rules can read.

Every pod placed on a row is known here by its *identity*: its namespace, its labels and the
terms it carries for other pods (required anti-affinity, required affinity and preferred
terms; see :class:`~gpufleet.model.affinity.CarriedTerms`). Identities are interned, and so
are two kinds of columns, added when a pod that needs them is first compiled:

* per *selector* (a tuple of :class:`~gpufleet.model.affinity.PodSelector` that must all
  match), the number of pods on each row that it matches (``matching``);
* per *carried term*, the number of pods on each row that carry it (``carrying``).

A domain's count is then one ``bincount`` of a column over a topology label's value ids (the
node table's ``label_ids``), with no loop over nodes or pods. Changes come through
:meth:`PodIndex.add` from the table's ``allocate`` / ``release`` and are logged inside trials,
so that a rollback undoes them exactly (adding the opposite counts in reverse order); a column
added during a trial is counted from the pods there at that moment and stays exact through the
undo. Pods placed earlier in a trial (a gang's first pods) count for the later ones.

Identities of pods that are no longer on any row are forgotten now and then, outside trials
(their ids are never reused), so that a long-running scheduler that sees many distinct label
sets does not keep them all.

What it does not do: decide anything (``interpod`` and ``spread`` do), or know nodes' labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.model import Pod
from gpufleet.model.affinity import CarriedTerms
from gpufleet.model.selectors import PodSelector

IntArray = npt.NDArray[np.int64]
Selector = tuple[PodSelector, ...]
IdentityKey = tuple[str, frozenset[tuple[str, str]], CarriedTerms | None]


class TermKind:
    """What a carried term does to the pods it matches."""

    REPEL = 0  # required anti-affinity: a filter
    ATTRACT = 1  # required affinity: a score of hardPodAffinityWeight (1) per pod
    PREFER = 2  # preferred affinity: + weight per pod
    AVOID = 3  # preferred anti-affinity: - weight per pod


@dataclass(frozen=True, slots=True)
class CarriedTerm:
    kind: int
    selector: PodSelector
    topology_key: str
    #: Signed score per pod carrying it (0 for REPEL, which filters).
    weight: int


@dataclass(slots=True)
class _Identity:
    namespace: str
    labels: Mapping[str, str]
    #: Row -> pods of this identity there.
    rows: dict[int, int]
    #: Selector ids that match it, and carried term ids it carries (repeats allowed).
    selected_by: list[int]
    carries: list[int]
    repels: bool
    #: Carried terms checked against it so far, and those that match it.
    checked: int = 0
    matched_by: tuple[int, ...] = ()


def _widened(array: IntArray, rows: int, columns: int) -> IntArray:
    """``array`` with at least ``rows`` rows and ``columns`` columns, contents kept."""
    if array.shape[0] >= rows and array.shape[1] >= columns:
        return array
    new_rows = max(rows, array.shape[0])
    new_columns = array.shape[1]
    if columns > new_columns:
        new_columns = max(columns, 2 * new_columns, 4)
    wider = np.zeros((new_rows, new_columns), np.int64)
    wider[: array.shape[0], : array.shape[1]] = array
    return wider


class PodIndex:
    """See the module docstring."""

    def __init__(self, sweep_at: int = 4096) -> None:
        self.capacity = 0
        self._identity_of: dict[IdentityKey, int] = {}
        #: By id; None for an identity forgotten (no pod of it was on any row).
        self._identities: list[_Identity | None] = []
        #: Forget identities without pods once this many are known (then twice as many).
        self._sweep_at = self._sweep_floor = sweep_at
        self.selectors: list[Selector] = []
        self._selector_of: dict[Selector, int] = {}
        self._matching = np.zeros((0, 0), np.int64)
        self.carried: list[CarriedTerm] = []
        self._carried_of: dict[CarriedTerm, int] = {}
        self._carrying = np.zeros((0, 0), np.int64)
        #: Pods placed that carry required anti-affinity (they may repel any new pod).
        self.repelling = 0
        #: Bumped by every change of a count a rule reads (a pod some selector matches or one
        #: that carries terms came or went); restored by a rollback.
        self.changes = 0
        self._log: list[tuple[int, int, int]] | None = None
        self._marks: list[tuple[int, int]] = []

    # ------------------------------------------------------------------------- storage
    def grow(self, capacity: int) -> None:
        """Room for ``capacity`` rows (the table's), contents kept."""
        self.capacity = capacity
        self._matching = _widened(self._matching, capacity, len(self.selectors))
        self._carrying = _widened(self._carrying, capacity, len(self.carried))

    def matching(self, selector: int) -> IntArray:
        """Pods per row that ``selector`` matches (a read-only view over all rows)."""
        column: IntArray = self._matching[:, selector]
        return column

    def carrying(self, term: int) -> IntArray:
        """Pods per row that carry ``term`` (a read-only view over all rows)."""
        column: IntArray = self._carrying[:, term]
        return column

    # ------------------------------------------------------------------------- interning
    def identity(self, pod: Pod) -> int:
        """The identity id of ``pod`` (interned on first sight)."""
        carried = pod.rules.carried if pod.rules is not None else None
        key = (pod.namespace, frozenset(pod.labels.items()), carried)
        found = self._identity_of.get(key)
        if found is not None:
            return found
        if len(self._identity_of) >= self._sweep_at and self._log is None:
            self._sweep()
        return self._new_identity(key, pod.labels, carried)

    def _sweep(self) -> None:
        """Forget the identities no pod of which is on a row (outside trials only: a trial may
        release a pod and take its row again, under the same id)."""
        for key, number in list(self._identity_of.items()):
            known = self._identities[number]
            if known is not None and not known.rows:
                del self._identity_of[key]
                self._identities[number] = None
        self._sweep_at = max(self._sweep_floor, 2 * len(self._identity_of))

    def known(self) -> int:
        """Identities remembered now (for tests)."""
        return len(self._identity_of)

    def _new_identity(
        self, key: IdentityKey, labels: Mapping[str, str], carried: CarriedTerms | None
    ) -> int:
        namespace = key[0]
        number = len(self._identities)
        selected_by = [
            j
            for j, selector in enumerate(self.selectors)
            if all(s.matches(namespace, labels) for s in selector)
        ]
        carries: list[int] = []
        repels = False
        if carried is not None:
            kinds = (
                (TermKind.REPEL, ((0, t) for t in carried.required_anti_affinity)),
                (TermKind.ATTRACT, ((1, t) for t in carried.required_affinity)),
                (TermKind.PREFER, ((w.weight, w.term) for w in carried.preferred_affinity)),
                (TermKind.AVOID, ((-w.weight, w.term) for w in carried.preferred_anti_affinity)),
            )
            for kind, terms in kinds:
                for weight, term in terms:
                    carries.append(
                        self._carried_id(
                            CarriedTerm(kind, term.selector, term.topology_key, weight)
                        )
                    )
                    repels = repels or kind == TermKind.REPEL
        self._identities.append(
            _Identity(namespace, dict(labels), {}, selected_by, carries, repels)
        )
        self._identity_of[key] = number
        return number

    def _carried_id(self, term: CarriedTerm) -> int:
        found = self._carried_of.get(term)
        if found is not None:
            return found
        number = len(self.carried)
        self.carried.append(term)
        self._carried_of[term] = number
        self._carrying = _widened(self._carrying, self.capacity, number + 1)
        return number

    def selector(self, selector: Selector) -> int:
        """The column id of ``selector``, counted from the pods in place when first asked."""
        found = self._selector_of.get(selector)
        if found is not None:
            return found
        number = len(self.selectors)
        self.selectors.append(selector)
        self._selector_of[selector] = number
        self._matching = _widened(self._matching, self.capacity, number + 1)
        column = self._matching[:, number]
        for identity in self._identities:
            if identity is None:
                continue
            if all(s.matches(identity.namespace, identity.labels) for s in selector):
                identity.selected_by.append(number)
                for row, count in identity.rows.items():
                    column[row] += count
        return number

    def carried_matching(self, identity: int) -> tuple[int, ...]:
        """Ids of the carried terms whose selector matches pods of ``identity``."""
        known = self._live(identity)
        if known.checked < len(self.carried):
            found = [
                j
                for j in range(known.checked, len(self.carried))
                if self.carried[j].selector.matches(known.namespace, known.labels)
            ]
            known.matched_by = (*known.matched_by, *found)
            known.checked = len(self.carried)
        return known.matched_by

    # ------------------------------------------------------------------------- changes
    def add(self, row: int, identity: int, delta: int) -> None:
        """``delta`` pods of ``identity`` (+1 placed, -1 gone) on ``row``."""
        self._apply(row, identity, delta)
        if self._log is not None:
            self._log.append((row, identity, delta))

    def _live(self, identity: int) -> _Identity:
        known = self._identities[identity]
        assert known is not None, f"identity {identity} was forgotten while in use"
        return known

    def _apply(self, row: int, identity: int, delta: int) -> None:
        known = self._live(identity)
        rows = known.rows
        count = rows.get(row, 0) + delta
        if count:
            rows[row] = count
        else:
            del rows[row]
        if known.selected_by:
            self._matching[row, known.selected_by] += delta
            self.changes += 1
        if known.carries:
            np.add.at(self._carrying[row], known.carries, delta)
            self.changes += 1
            if known.repels:
                self.repelling += delta

    def begin_trial(self) -> None:
        if self._log is None:
            self._log = []
        self._marks.append((len(self._log), self.changes))

    def rollback(self) -> None:
        assert self._log is not None
        mark, changes = self._marks.pop()
        log = self._log
        while len(log) > mark:
            row, identity, delta = log.pop()
            self._apply(row, identity, -delta)
        self.changes = changes
        if not self._marks:
            self._log = None

    def commit(self) -> None:
        self._marks.pop()
        if not self._marks:
            self._log = None

    # ------------------------------------------------------------------------- checks
    def recount(self, size: int) -> tuple[IntArray, IntArray]:
        """The ``matching`` and ``carrying`` columns counted again from the identities' rows
        (for tests: they must equal the kept ones)."""
        matching = np.zeros((size, len(self.selectors)), np.int64)
        carrying = np.zeros((size, len(self.carried)), np.int64)
        for identity in self._identities:
            if identity is None:
                continue
            for row, count in identity.rows.items():
                for j, selector in enumerate(self.selectors):
                    if all(s.matches(identity.namespace, identity.labels) for s in selector):
                        matching[row, j] += count
                for j in identity.carries:
                    carrying[row, j] += count
        return matching, carrying

    def kept(self, size: int) -> tuple[IntArray, IntArray]:
        """The kept ``matching`` and ``carrying`` columns of the first ``size`` rows."""
        return (
            self._matching[:size, : len(self.selectors)].copy(),
            self._carrying[:size, : len(self.carried)].copy(),
        )
