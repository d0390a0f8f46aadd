"""Fair share over time: each queue's (and each user's in a queue) GPU usage, decayed with a
half-life, as Slurm's multifactor priority decays usage (``PriorityDecayHalfLife``).

Usage is GPU-seconds: the milli-GPUs a queue's running workloads hold (as its quota counts
them) times the seconds they hold them, decayed continuously. Usage ``u`` at ``t0``, with
``r`` milli-GPUs held from ``t0`` to ``t``, is at ``t``::

    u(t) = u * d + r * H / ln 2 * (1 - d),    d = 2 ** (-(t - t0) / H)

(the integral of ``r * 2 ** (-(t - s) / H) ds``): a closed form, not sampling, so that accruing
over ``[a, m]`` then ``[m, b]`` is accruing over ``[a, b]`` (to rounding), and the result
depends only on the binds and ends the core sees and their times, never on how often it is
read. The rate changes only when a running workload starts, shrinks or stops: the history is
one of the running set's watchers, and ``now`` is the core's.

The order it gives (:meth:`UsageHistory.ratios`) is Slurm's fair-share factor
``F = 2 ** (-U / S)``, level by level down the queue tree: among siblings (the queues of one
parent, or the top-level queues), ``U`` is a queue's decayed usage (its whole subtree's) as a
fraction of theirs and ``S`` its share as a fraction of theirs: its nominal GPU quota when some
sibling names one (a queue without one then has no share: once it used anything, it goes
after its siblings), else its ``weight``. A lower ``U / S`` (a higher F) goes first.

A user is the workload's tenant (the label :data:`~gpufleet.model.queues.TENANT_LABEL`, which
the server sets from the token that submitted it), else its namespace; users' usage is kept
per queue, and shown.

Restarts: :meth:`UsageHistory.snapshot` is every queue's and user's usage at one instant;
:meth:`UsageHistory.restore` adds it back, decayed to ``now``. What ran while nothing was
counting (between the snapshot and the restart) is not counted.

What it does not do: order queues (the queue sort does, from :meth:`UsageHistory.ratios`),
persist anything (the world does) or read a clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gpufleet.model.queues import TENANT_LABEL
from gpufleet.model.resources import GPU
from gpufleet.model.workload import Workload
from gpufleet.scheduling.quota import QuotaTree
from gpufleet.scheduling.running import RunningWorkload

K = TypeVar("K")
SECONDS_PER_HOUR = 3600.0
MILLI_PER_GPU = 1000.0


_LN2 = math.log(2.0)


def decayed(usage: float, elapsed: float, half_life: float) -> float:
    """``usage`` after ``elapsed`` seconds of decay (halved per ``half_life``)."""
    return usage * math.exp2(-max(0.0, elapsed) / half_life)


def accrued(usage: float, rate: float, elapsed: float, half_life: float) -> float:
    """``usage`` after ``elapsed`` seconds of decay while ``rate`` more accrued each second
    (the module docstring's closed form)."""
    exponent = -max(0.0, elapsed) / half_life * _LN2
    # expm1: the part decayed away exactly, also when it is tiny (1 - exp would cancel).
    return usage * math.exp(exponent) - rate * half_life / _LN2 * math.expm1(exponent)


def factor(ratio: float) -> float:
    """Slurm's fair-share factor ``2 ** (-U / S)`` of a usage-to-share ratio: 1 for a queue
    that used nothing, 0.5 for one that used exactly its share."""
    return math.exp2(-ratio)


def user_of(workload: Workload) -> str:
    """Whose usage a workload's is, inside its queue: its tenant, else its namespace."""
    return workload.labels.get(TENANT_LABEL) or workload.namespace


@dataclass(slots=True)
class Accrual:
    """Decayed usage (milli-GPU-seconds) at ``at``, and the milli-GPUs held since."""

    usage: float = 0.0
    rate: int = 0
    at: float = 0.0

    def value(self, now: float, half_life: float) -> float:
        return accrued(self.usage, self.rate, now - self.at, half_life)

    def move(self, now: float, half_life: float, more: int) -> None:
        """Bring the usage to ``now``, then hold ``more`` milli-GPUs (fewer when negative)."""
        if now > self.at:
            self.usage = self.value(now, half_life)
            self.at = now
        self.rate += more


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """Every queue's and user's decayed usage (milli-GPU-seconds) at ``at``."""

    at: float
    queues: Mapping[str, float] = field(default_factory=dict)
    users: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """One queue's usage now, as the API's queue view and ``describe queue`` show it."""

    #: Its subtree's decayed usage, in GPU-hours.
    gpu_hours: float
    #: Its share among its siblings (nominal GPUs, or weight) as a fraction of theirs (the
    #: implicit ``default`` queue is a top-level sibling too).
    share: float
    #: Its usage as a fraction of its siblings', divided by ``share`` (lower goes first).
    ratio: float
    #: Slurm's fair-share factor, ``2 ** -ratio``.
    factor: float
    #: Each user's decayed usage in this queue (not below it), in GPU-hours.
    users: Mapping[str, float]


class UsageHistory:
    """See the module docstring. ``clock`` gives the core's ``now``."""

    def __init__(self, half_life: float, tree: QuotaTree, clock: Callable[[], float]) -> None:
        if not half_life > 0 or not math.isfinite(half_life):
            raise ValueError(f"a usage half-life is a positive number of seconds: {half_life}")
        self.half_life = half_life
        self.tree = tree
        self.clock = clock
        self._queues: dict[str, Accrual] = {}
        self._users: dict[tuple[str, str], Accrual] = {}
        #: Workload key -> (queue, user, milli-GPUs it holds), for those counted.
        self._holding: dict[str, tuple[str, str, int]] = {}
        self._shares = self._sibling_shares()
        #: When the events being handled happened, if later than the core's ``now``.
        self._events_at = -math.inf

    def events_at(self, now: float) -> None:
        """The events handed to the core next happened at ``now`` (the core's ``now`` is its
        last cycle's until the next cycle: usage that starts or stops counts from here)."""
        self._events_at = now

    def _now(self) -> float:
        return max(self.clock(), self._events_at)

    # --------------------------------------------------------------------- running set
    def started(self, running: RunningWorkload) -> None:
        self._hold(running)

    def shrunk(self, running: RunningWorkload, freed: Mapping[str, int]) -> None:
        self._hold(running)

    def stopped(self, running: RunningWorkload) -> None:
        self._let_go(running.key)

    def retagged(self, running: RunningWorkload, before: Workload) -> None:
        """(The same queue and user hold the same GPUs.)"""

    def _hold(self, running: RunningWorkload) -> None:
        self._let_go(running.key)
        milli = max(0, running.usage.get(GPU, 0))
        if not milli:
            return
        workload = running.workload
        queue, user = workload.queue, user_of(workload)
        self._holding[workload.key] = (queue, user, milli)
        self._move(queue, user, milli)

    def _let_go(self, key: str) -> None:
        found = self._holding.pop(key, None)
        if found is not None:
            queue, user, milli = found
            self._move(queue, user, -milli)

    def _move(self, queue: str, user: str, milli: int) -> None:
        now, half_life = self._now(), self.half_life
        self._accrual(self._queues, queue, now).move(now, half_life, milli)
        self._accrual(self._users, (queue, user), now).move(now, half_life, milli)

    @staticmethod
    def _accrual(table: dict[K, Accrual], key: K, now: float) -> Accrual:
        found = table.get(key)
        if found is None:
            found = table[key] = Accrual(at=now)
        return found

    # ------------------------------------------------------------------------- reading
    def usage(self, now: float | None = None) -> dict[str, float]:
        """Each queue's own decayed usage (milli-GPU-seconds; not its subtree's) at ``now``."""
        when = self._now() if now is None else now
        return {q: a.value(when, self.half_life) for q, a in self._queues.items()}

    def subtree_usage(self, now: float | None = None) -> list[float]:
        """Each queue's subtree's decayed usage, by the tree's queue index."""
        tree = self.tree
        out = [0.0] * len(tree.names)
        for queue, value in self.usage(now).items():
            i = tree.index.get(queue)
            if i is None:
                continue
            for j in tree.paths[i]:
                out[j] += value
        return out

    def ratios(self, now: float | None = None) -> list[float]:
        """Per queue index: its usage over its share, both as fractions of its siblings'
        (0 when its siblings used nothing)."""
        tree = self.tree
        used = self.subtree_usage(now)
        out = [0.0] * len(tree.names)
        for group in self._sibling_groups():
            total = sum(used[i] for i in group)
            if total <= 0:
                continue
            for i in group:
                share = self._shares[i]
                fraction = used[i] / total
                out[i] = fraction / share if share else (math.inf if fraction else 0.0)
        return out

    def key_of(self, ratios: list[float], queue: str) -> tuple[float, ...]:
        """``queue``'s ratios along its path, top first (the least goes first)."""
        tree = self.tree
        return tuple(ratios[i] for i in tree.paths[tree.index[queue]])

    def describe(self, queue: str, now: float | None = None) -> QueueUsage | None:
        """``queue``'s usage, share and factor now (None for a queue the tree lacks)."""
        tree = self.tree
        i = tree.index.get(queue)
        if i is None:
            return None
        when = self._now() if now is None else now
        ratio = self.ratios(when)[i]
        per_hour = MILLI_PER_GPU * SECONDS_PER_HOUR
        users = {
            user: accrual.value(when, self.half_life) / per_hour
            for (name, user), accrual in sorted(self._users.items())
            if name == queue
        }
        return QueueUsage(
            self.subtree_usage(when)[i] / per_hour, self._shares[i], ratio, factor(ratio), users
        )

    # ------------------------------------------------------------------------ restarts
    def snapshot(self) -> UsageSnapshot:
        now = self._now()
        users: dict[str, dict[str, float]] = {}
        for (queue, user), accrual in sorted(self._users.items()):
            users.setdefault(queue, {})[user] = accrual.value(now, self.half_life)
        return UsageSnapshot(now, dict(sorted(self.usage(now).items())), users)

    def restore(self, snapshot: UsageSnapshot) -> None:
        """Add ``snapshot``'s usage to what is counted (each decayed from its instant; no
        clock is read, so a core that has not run a cycle yet may take it)."""
        for queue, value in snapshot.queues.items():
            self._add(self._queues, queue, value, snapshot.at)
        for queue, users in snapshot.users.items():
            for user, value in users.items():
                self._add(self._users, (queue, user), value, snapshot.at)

    def _add(self, table: dict[K, Accrual], key: K, value: float, at: float) -> None:
        found = table.get(key)
        if found is None:
            table[key] = Accrual(value, 0, at)
            return
        when = max(found.at, at)
        found.move(when, self.half_life, 0)
        found.usage += decayed(value, when - at, self.half_life)

    # ------------------------------------------------------------------------- shares
    def _sibling_groups(self) -> list[list[int]]:
        tree = self.tree
        return [tree.top, *(kids for kids in tree.children if kids)]

    def _sibling_shares(self) -> list[float]:
        """Per queue index: its share as a fraction of its siblings' (see the docstring)."""
        tree = self.tree
        gpu = tree.key_index.get(GPU)
        out = [1.0] * len(tree.names)
        for group in self._sibling_groups():
            nominal = [int(tree.nominal[i, gpu]) if gpu is not None else 0 for i in group]
            given = nominal if any(nominal) else [float(tree.weight[i]) for i in group]
            total = float(sum(given))
            for i, amount in zip(group, given, strict=True):
                out[i] = float(amount) / total
        return out


__all__ = [
    "QueueUsage",
    "UsageHistory",
    "UsageSnapshot",
    "accrued",
    "decayed",
    "factor",
    "user_of",
]
