"""Extension points of the scheduling cycle: small protocols, configured by a profile.

Placement (per pod, inside the engine):

* :class:`FilterPlugin` returns a boolean mask over all nodes where one pod can go, and names
  the reason a node fails (counted per reason for ``explain``). The built-in filters are
  compiled into each pod shape's demand; a profile adds its own after them.
* :class:`ScorePlugin` returns raw scores for some rows; scores of a row that depend only on
  that row's state are cached by the engine and recomputed only when the row changes.
* :class:`DeviceChooser` picks the devices (GPU positions, MIG slices) on the chosen node.

The cycle (per workload, in the core):

* :class:`QueueSort`: which queue's head is tried next.
* :class:`AdmissionCheck`: may a workload start now, besides its quota (a budget, say)? And
  (:class:`AdmitsAs`) as what: preemptible, say. A check that needs more says so by the
  optional hooks it has (found by protocol, never by its class): what the world counts for it
  around each turn (:class:`TurnHooks`, with the world's :class:`CheckWorld`), when it may
  admit without any event (:class:`Timed`), and which wakes may change its mind
  (:class:`Requeued`, as kube-scheduler's queueing hints).
* :class:`PostFilter`: preemption: whom to evict so that a workload that did not get in would.
* :class:`Permit`: does an admitted gang keep its place (all its pods ready in time)?

Plugins of the cycle that keep their own accounting watch the running set
(:class:`RunningWatcher`). A :class:`Policy` bundles scorers (with weights) and a device
chooser. A rejection is a returned value with reasons, never an exception. Which plugins run,
with which arguments and weights, is a :class:`~gpufleet.scheduling.profile.Profile`; where
their names lead is the :class:`~gpufleet.scheduling.registry.Registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from gpufleet.scheduling.demand import Demand
from gpufleet.scheduling.node_table import BoolArray, IntArray, NodeTable
from gpufleet.scheduling.pending import Parked

if TYPE_CHECKING:  # (they import the engine, which imports this module)
    from gpufleet.model.workload import Workload
    from gpufleet.scheduling.flavors import ModelChoice
    from gpufleet.scheduling.running import RunningWorkload

FloatArray = npt.NDArray[np.float64]
Kept = TypeVar("Kept")


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


class RunningWatcher(Protocol):
    """Told of every change to the core's running set, in the order they happen."""

    def started(self, running: RunningWorkload) -> None:
        """``running`` was admitted (or found bound) and now runs."""
        ...

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        """One of its pods ended (or failed to bind): ``freed`` is the usage it gave back."""
        ...

    def stopped(self, running: RunningWorkload) -> None:
        """It no longer runs: being evicted, or all its pods are gone."""
        ...

    def retagged(self, running: RunningWorkload, before: Workload) -> None:
        """It runs on where it is as another workload of the same key and queue
        (``running.workload``; it was ``before``): lowered to preemptible, say."""
        ...


#: A queue's place in the order across queues: the least goes first (tuples compare in order).
QueueKey = tuple[object, ...]


class QueueSort(Protocol):
    """Which queue's head the cycle tries next. Asked once per cycle for the key of each queue
    with work; the key of a queue is asked again after each admission from it (so that shares
    move). Within a queue, workloads go by priority and arrival (:mod:`.ordering`)."""

    name: str

    def key_for(self, queues: Sequence[str]) -> Callable[[str], QueueKey]: ...


class AdmissionCheck(RunningWatcher, Protocol):
    """May a workload start now, besides its queue's quota (Kueue's admission checks: a
    GPU-hour budget, a provisioning request)? Asked before the quota, with the gang's request
    as quotas count it; a refusal parks the workload for the check (``Parked.ADMISSION_CHECK``)
    with the check's name and message (shown to users and by explain as it is), until the
    check wakes it (its optional hooks: :class:`TurnHooks`, :class:`Timed`) or a wake it
    named does (:class:`Requeued`). Told of every workload that starts, shrinks or stops, to
    keep its own accounting."""

    name: str

    def check(self, workload: Workload, request: Mapping[str, int], now: float) -> str | None:
        """None admits; otherwise why not."""
        ...


@dataclass(frozen=True, slots=True)
class CheckNotice:
    """Something an admission check tells a queue's users at ``at`` (a budget past its
    warning threshold, say): the world turns it into a Warning event of the queue."""

    at: float
    queue: str
    reason: str
    message: str


class CheckWorld:
    """What a world's control loop keeps for its admission checks: one record per check name
    that lasts as long as the world (across the cores it rebuilds when queues change: a
    budget's GPU-hours counted so far), and the notices the checks leave for its events."""

    def __init__(self) -> None:
        self._kept: dict[str, object] = {}
        self._notices: list[CheckNotice] = []

    def kept(self, name: str, kind: type[Kept]) -> Kept:
        """The record the check ``name`` keeps here: a new ``kind()`` the first time (or when
        what is kept under that name is of another kind)."""
        found = self._kept.get(name)
        if not isinstance(found, kind):
            found = self._kept[name] = kind()
        return found

    def notice(self, notice: CheckNotice) -> None:
        self._notices.append(notice)

    def drain(self) -> list[CheckNotice]:
        """The notices since the last drain (for the world's events)."""
        out, self._notices = self._notices, []
        return out


@runtime_checkable
class TurnHooks(Protocol):
    """An admission check the world's loop tells of each turn, around its cycles, with the
    world's :class:`CheckWorld` and the turn's ``now``: to count what happened between turns
    (the GPU-hours a budget's queues used), to wake what it refused once it may admit it, and
    to leave notices."""

    def before_cycles(self, world: CheckWorld, now: float) -> None: ...

    def after_cycles(self, world: CheckWorld, now: float) -> None: ...


@runtime_checkable
class Timed(Protocol):
    """An admission check that may admit what it refused without any event, at a time it
    knows (a budget's next period, a calendar window's opening): the world's loop waits no
    later than that (and, at that turn, the check's ``before_cycles`` wakes what it
    refused)."""

    def next_timer(self, now: float) -> float | None:
        """When a refused workload may next be admitted (None: no refusal waits on time)."""
        ...


#: The wakes that wake what a check without ``requeue_on`` refused: quota given back.
REQUEUE_ON_QUOTA = frozenset({Parked.QUOTA})


@runtime_checkable
class Requeued(Protocol):
    """An admission check that says which wakes may lift its refusals (kube-scheduler's
    queueing hints): ``requeue_on`` names the :class:`~.pending.Parked` reasons (``"quota"``:
    quota given back; ``"capacity"``) whose wakes also wake what it refused; empty, only the
    check itself wakes them (from its turn hooks). A check without it is woken with quota
    (:data:`REQUEUE_ON_QUOTA`: a refusal that depends on what runs may end when work ends)."""

    requeue_on: frozenset[str]


@runtime_checkable
class AdmitsAs(Protocol):
    """An admission check that may change how a workload it lets in starts (a spent GPU-hour
    budget admits it only as preemptible, at the lowest priority). Asked after every check
    admitted it, before quota: the quota, placement and preemption see what it returns."""

    def admitted_as(self, workload: Workload) -> Workload: ...


@dataclass(frozen=True, slots=True)
class Preemption:
    """Victims whose eviction admits a preemptor, what its admission will charge to its
    queue, and the rows its placement would take (held for it while the victims leave)."""

    victims: Sequence[RunningWorkload]
    request: dict[str, int]
    rows: IntArray


class PostFilter(RunningWatcher, Protocol):
    """Preemption, for a workload that quota or capacity kept out: choose victims on a trial
    (pure; the core then holds the freed room and evicts them). Searches cost, so a plugin may
    put some off to the next cycle, and may wake parked workloads when new victims appear."""

    name: str

    def begin_cycle(self) -> list[str]:
        """A cycle starts: searches may run again. The workloads whose search was put off in
        the last cycle (to be woken)."""
        ...

    def select(self, workload: Workload, model: ModelChoice | None) -> Preemption | None:
        """Victims that admit ``workload`` (on ``model``'s rows and quota key, if given)."""
        ...

    def wake(self) -> None:
        """Wake the parked workloads that may now preempt (a victim became eligible)."""
        ...

    def searches_put_off(self) -> bool:
        """Did this cycle put off a search (the core runs another cycle)?"""
        ...

    def next_timer(self) -> float | None:
        """When a parked workload may next find victims without an event (None: never)."""
        ...


class Permit(RunningWatcher, Protocol):
    """Does an admitted gang keep its place? A gang binds all at once (the cycle places all
    its pods or none); the permit then waits for its pods to be ready and names the gangs that
    lost it, with why, to be evicted and retried after a backoff."""

    name: str

    def pod_ready(self, running: RunningWorkload, pod_key: str) -> None: ...

    def revoked(self, now: float) -> list[tuple[RunningWorkload, str]]:
        """The running gangs whose permit ended by ``now``, each with the reason."""
        ...

    def next_deadline(self) -> float | None:
        """When a permit may next end (None: no gang is waiting)."""
        ...


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
