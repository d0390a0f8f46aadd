"""Quotas over a tree of queues: usage, what a queue may still take, fair shares.

Every resource key (``cpu``, ``memory``, ``nvidia.com/gpu``, ``nvidia.com/gpu.<model>``) that
some queue names is accounted over the whole tree; a key nobody names is not limited. Per key,
each queue q has a nominal quota N_q (0 if it does not name the key), a borrowing limit B_q (how
far beyond N_q it may go; unlimited if absent) and a lending limit L_q (how much of its unused
N_q others may use; all of it if absent). U_q is the usage of q's whole subtree.

The amount q's subtree may use, ``avail(q)``, follows Kueue's cohort rule at every level of the
tree: with p the parent of q,

    avail(q) = min(N_q + B_q, avail(p) - sum over siblings s of max(U_s, N_s - L_s))

where ``N_s - L_s`` is the part of a sibling's quota it never lends, and avail(root) is the
cluster's capacity of the key, as it is now (:meth:`QuotaTree.set_capacity` as nodes join and
leave: an autoscaler's new nodes count). A parent that names no quota of a key has its children's
nominal quotas added up as its own (Kueue: a cohort's subtree quota). A workload of usage u
fits in leaf q when U_x + u <= avail(x) for every queue x on the path from q to the top; it fits
*within nominal* when also U_x + u <= N_x (it then borrows nothing).

Ordering across queues uses the weighted dominant-resource share: for q under p, the largest,
over keys, of q's borrowed amount (max(0, U_q - N_q)) divided by what it borrows from (p's
nominal quota, or the cluster's capacity at the top or where p has none), divided by q's
weight; compared level by level from the top. ``entitlement`` divides each
parent's amount among its children by weighted water-filling over their demand, nominal first.
Per-model keys name models as users write them (``nvidia.com/gpu.H100``); a node's GPU counts
under the most specific key whose name covers its product (:func:`~gpufleet.model.gpu.
model_matches`: ``H100`` covers ``NVIDIA-H100-80GB-HBM3``), see :class:`ModelKeys`.

*Borrowing levels* (Kueue's hierarchical cohorts): a request that fits its queue's nominal
quota borrows nothing (level 0); else it borrows from the closest ancestor whose subtree's
nominal quota still holds it, and its level is that ancestor's height in the tree (so that
requests of queues at different depths that borrow from the same ancestor compare equal); the
cluster above the top-level queues has the greatest height.

What this module does not do: decide where pods go (the engine) or which workloads to evict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from gpufleet.model.gpu import canonical_model, model_matches
from gpufleet.model.queues import Queue, validate_queue_tree
from gpufleet.model.resources import GPU_MODEL_PREFIX, Resources, quantity

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
#: Stands for "no limit" in integer arithmetic (far above any real quantity).
UNLIMITED = 1 << 60


class Verdict(Enum):
    FITS = "fits"
    BORROWS = "borrows"
    EXCEEDS = "exceeds"


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """The outcome of a quota check; on EXCEEDS, which queue and key stop it and by how much."""

    verdict: Verdict
    queue: str = ""
    key: str = ""
    used: int = 0
    wanted: int = 0
    limit: int = 0
    why: str = ""
    #: "queue", or "namespace" for a Kubernetes ResourceQuota cap.
    scope: str = "queue"
    #: :meth:`message`, once made (a memoised check is told to many waiting workloads).
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def admits(self) -> bool:
        return self.verdict is not Verdict.EXCEEDS

    def message(self) -> str:
        text = self._text
        if text is None:
            text = self._message()
            object.__setattr__(self, "_text", text)
        return text

    def _message(self) -> str:
        if self.admits:
            return f"fits{' by borrowing' if self.verdict is Verdict.BORROWS else ''}"
        key = self.key
        text = (
            f"{self.scope} {self.queue}: {key} would be {quantity(key, self.used + self.wanted)} "
            f"of at most {quantity(key, self.limit)} (uses {quantity(key, self.used)}, "
            f"asks {quantity(key, self.wanted)})"
        )
        return f"{self.why}: {text}" if self.why else text


#: The checks that pass carry nothing but their verdict: one of each is shared.
_FITS = QuotaCheck(Verdict.FITS)
_BORROWS = QuotaCheck(Verdict.BORROWS)


class ModelKeys:
    """Which per-model quota key (``nvidia.com/gpu.<name>``) a node's GPU model counts under:
    the most specific key whose name covers the model (:func:`model_matches`), or None."""

    def __init__(self, keys: Iterable[str]) -> None:
        named = [k for k in keys if k.startswith(GPU_MODEL_PREFIX)]
        #: Most specific first: the longest canonical name, then the key (for a stable choice).
        self._keys = sorted(
            named, key=lambda k: (-len(canonical_model(k[len(GPU_MODEL_PREFIX) :])), k)
        )
        self._memo: dict[str, str | None] = {}

    def __call__(self, model: str | None) -> str | None:
        if model is None or not self._keys:
            return None
        if model not in self._memo:
            self._memo[model] = next(
                (k for k in self._keys if model_matches(k[len(GPU_MODEL_PREFIX) :], model)),
                None,
            )
        return self._memo[model]

    def unmatched(self, models: Iterable[str]) -> list[str]:
        """The per-model keys none of ``models`` counts under (a quota no GPU can use)."""
        taken = {self(m) for m in models}
        return sorted(k for k in self._keys if k not in taken)


def fold_models(amounts: Resources, model_keys: ModelKeys) -> dict[str, int]:
    """``amounts`` with every per-model key moved to the quota key its model counts under
    (dropped where none does); other keys as they are."""
    folded: dict[str, int] = {}
    for key, amount in amounts.items():
        if key.startswith(GPU_MODEL_PREFIX):
            target = model_keys(key[len(GPU_MODEL_PREFIX) :])
            if target is None:
                continue
            key = target
        folded[key] = folded.get(key, 0) + amount
    return folded


class QuotaTree:
    """Usage and limits of a queue tree (see the module docstring)."""

    def __init__(self, queues: Mapping[str, Queue], capacity: Resources) -> None:
        """``capacity``: what the cluster has per key, GPUs per model under keys named by the
        nodes' models (``nvidia.com/gpu.NVIDIA-H100-80GB-HBM3``): folded into the quota keys
        their models count under."""
        validate_queue_tree(queues)
        names = list(queues)
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        keys = sorted(
            {k for q in queues.values() for k in (*q.nominal, *q.borrowing_limit, *q.lending_limit)}
        )
        self.keys = keys
        self.model_keys = ModelKeys(keys)
        capacity = fold_models(capacity, self.model_keys)
        self.key_index = {key: i for i, key in enumerate(keys)}
        n, k = len(names), len(keys)
        self.parent = np.array(
            [self.index[q.parent] if q.parent is not None else -1 for q in queues.values()],
            np.int64,
        )
        self.children: list[list[int]] = [[] for _ in names]
        self.top: list[int] = []
        for i, p in enumerate(self.parent):
            (self.children[int(p)] if p >= 0 else self.top).append(i)
        self.nominal = np.zeros((n, k), np.int64)
        self.borrow = np.full((n, k), UNLIMITED, np.int64)
        self.lend = np.full((n, k), UNLIMITED, np.int64)
        for name, queue in queues.items():
            i = self.index[name]
            for key, j in self.key_index.items():
                self.nominal[i, j] = queue.nominal.get(key, 0)
                if key in queue.borrowing_limit:
                    self.borrow[i, j] = queue.borrowing_limit[key]
                if key in queue.lending_limit:
                    self.lend[i, j] = queue.lending_limit[key]
        # A parent that names no quota of a key holds its children's (Kueue: a cohort's
        # subtree quota is its own plus its children's), so that it is not seen to borrow
        # what its children are guaranteed. Children come after parents in no given order:
        # add up from the deepest queues.
        named = np.array(
            [[key in q.nominal for key in keys] for q in queues.values()], np.bool_
        ).reshape(n, k)
        for i in sorted(range(n), key=lambda i: -self._depth(i)):
            p = int(self.parent[i])
            if p >= 0:
                self.nominal[p] = np.where(
                    named[p], self.nominal[p], self.nominal[p] + self.nominal[i]
                )
        self.weight = np.array([q.weight for q in queues.values()], np.float64)
        self.capacity = np.array([capacity.get(key, UNLIMITED) for key in keys], np.int64)
        self.usage = np.zeros((n, k), np.int64)
        #: Names the content of ``usage``: a new number whenever it changes, so that callers
        #: may memoise what they derive from it. Whoever writes ``usage`` other than through
        #: add/remove sets it too: to :meth:`new_version`, or back to the version of the same
        #: content (a restored snapshot).
        self.version = 0
        self._versions = 0
        self._limits_version = -1
        self._borrowing_version = -1
        self._borrowing = np.zeros(0, np.bool_)
        self._any_borrowing = False
        self._scalars: TreeScalars | None = None
        self._no_amounts = (0,) * k
        self._limits: dict[str, list[tuple[int, list[int], list[int], list[int]]]] = {}
        self._others_kept: list[list[int]] = []
        self._usage_rows: list[list[int]] = []
        self.guarded = np.maximum(self.nominal - self.lend, 0)
        self.paths = [self._path(i) for i in range(n)]
        #: Each queue's height (0 for a leaf) and, above the top-level queues, the cluster's:
        #: the borrowing level of a request that no queue's nominal quota holds.
        self.height = [0] * n
        for path in self.paths:
            for k, ancestor in enumerate(path):
                self.height[ancestor] = max(self.height[ancestor], len(path) - 1 - k)
        self.root_height = 1 + max((self.height[i] for i in self.top), default=0)
        self._rows_version = -1
        self._rows: list[list[int]] = []
        # Fixed by the tree, read by every check (the hot path of a cycle): each queue's
        # ceiling (nominal + borrowing limit) and its siblings (at the top, the other tops).
        self._ceiling = self.nominal + self.borrow
        self._others: list[IntArray] = [
            np.array([s for s in (self.children[p] if p >= 0 else self.top) if s != i], np.int64)
            for i, p in enumerate(self.parent.tolist())
        ]

    def set_capacity(self, capacity: Resources) -> bool:
        """The cluster's capacity is now ``capacity`` (as in the constructor: nodes joined or
        left); whether any accounted key's changed. Every limit derived from it is forgotten
        (a new usage version)."""
        folded = fold_models(capacity, self.model_keys)
        new = np.array([folded.get(key, UNLIMITED) for key in self.keys], np.int64)
        if np.array_equal(new, self.capacity):
            return False
        self.capacity = new
        self._scalars = None
        self.new_version()
        return True

    def _depth(self, i: int) -> int:
        depth = 0
        while self.parent[i] >= 0:
            i = int(self.parent[i])
            depth += 1
        return depth

    def _path(self, i: int) -> list[int]:
        """Queue i and its ancestors, from the top down."""
        path = []
        while i >= 0:
            path.append(i)
            i = int(self.parent[i])
        return path[::-1]

    def vector(self, usage: Resources) -> IntArray:
        """A usage mapping as a vector over the accounted keys (other keys are dropped)."""
        return np.array(self.limited(usage), np.int64)

    def limited(self, usage: Resources) -> tuple[int, ...]:
        """:meth:`vector` as a tuple (hashable, and cheaper to make)."""
        return tuple(map(usage.get, self.keys, self._no_amounts))

    # ----------------------------------------------------------------------------- usage
    def new_version(self) -> None:
        """Give ``usage`` a version never used before (it changed)."""
        self._versions += 1
        self.version = self._versions

    def add(self, queue: str, usage: IntArray) -> None:
        """Charge ``usage`` to ``queue`` and all its ancestors."""
        self.new_version()
        for i in self.paths[self.index[queue]]:
            self.usage[i] += usage

    def remove(self, queue: str, usage: IntArray) -> None:
        self.new_version()
        for i in self.paths[self.index[queue]]:
            self.usage[i] -= usage
        if (self.usage < 0).any():
            raise AssertionError(f"negative usage after releasing {usage} from {queue}")

    # ----------------------------------------------------------------------------- limits
    def available(self, queue: str) -> IntArray:
        """How much ``queue``'s subtree may use in all, per key (see the module docstring)."""
        avail = self.capacity.copy()
        siblings = self.top
        for i in self.paths[self.index[queue]]:
            others = [s for s in siblings if s != i]
            taken = (
                np.maximum(self.usage[others], self.guarded[others]).sum(axis=0) if others else 0
            )
            avail = np.minimum(self.nominal[i] + self.borrow[i], avail - taken)
            siblings = self.children[i]
        result: IntArray = avail
        return result

    def check(self, queue: str, usage: IntArray) -> QuotaCheck:
        """May ``queue`` take ``usage`` more now? Within nominal, by borrowing, or not."""
        asks = usage > 0
        if not asks.any():
            return _FITS  # nothing asked: no level can refuse or be exceeded
        # The same sums as available(), with each sibling's max(usage, guarded) taken once.
        kept = np.maximum(self.usage, self.guarded)
        avail = self.capacity
        borrows = False
        refusal: QuotaCheck | None = None
        for i in self.paths[self.index[queue]]:
            others = self._others[i]
            if others.size:
                avail = np.minimum(self._ceiling[i], avail - kept[others].sum(axis=0))
            else:
                avail = np.minimum(self._ceiling[i], avail)
            after = self.usage[i] + usage
            over = np.flatnonzero((after > avail) & asks)
            if over.size:  # keep the deepest level that refuses: it explains the most
                j = int(over[0])
                refusal = QuotaCheck(
                    Verdict.EXCEEDS,
                    self.names[i],
                    self.keys[j],
                    int(self.usage[i, j]),
                    int(usage[j]),
                    int(max(avail[j], 0)),
                )
            if not borrows and ((after > self.nominal[i]) & asks).any():
                borrows = True
        if refusal is not None:
            return refusal
        return _BORROWS if borrows else _FITS

    def check_amounts(self, queue: str, amounts: Sequence[int]) -> QuotaCheck:
        """:meth:`check` of a usage given as :meth:`limited` amounts: the same verdict, read
        from the limits along the queue's path kept for the usage's version (a cycle checks
        many workloads of a queue while no usage changes)."""
        if not any(want > 0 for want in amounts):
            return _FITS
        borrows = False
        refusal: QuotaCheck | None = None
        for i, avail, used, nominal in self._path_limits(queue):
            for j, want in enumerate(amounts):
                if want > 0 and used[j] + want > avail[j]:
                    # Keep the deepest level that refuses: it explains the most.
                    refusal = QuotaCheck(
                        Verdict.EXCEEDS,
                        self.names[i],
                        self.keys[j],
                        used[j],
                        want,
                        max(avail[j], 0),
                    )
                    break
            if not borrows and any(
                want > 0 and used[j] + want > nominal[j] for j, want in enumerate(amounts)
            ):
                borrows = True
        if refusal is not None:
            return refusal
        return _BORROWS if borrows else _FITS

    def nominal_excess_amounts(
        self, queue: str, amounts: Sequence[int], base: IntArray | None = None
    ) -> QuotaCheck | None:
        """:meth:`nominal_excess` of a usage given as :meth:`limited` amounts."""
        found = None
        for i, _, used, nominal in self._path_limits(queue):
            current = used if base is None else base[i].tolist()
            for j, want in enumerate(amounts):
                if want > 0 and current[j] + want > nominal[j]:
                    found = QuotaCheck(
                        Verdict.EXCEEDS,
                        self.names[i],
                        self.keys[j],
                        current[j],
                        want,
                        nominal[j],
                    )
                    break
        return found

    def _path_limits(self, queue: str) -> list[tuple[int, list[int], list[int], list[int]]]:
        """For each queue on ``queue``'s path, top first: its index, what its subtree may use
        in all (as in :meth:`check`), its usage and its nominal quota; kept per usage version."""
        if self._limits_version != self.version:
            self._limits_version = self.version
            self._limits.clear()
            # What each queue's competitors keep, for all queues at once: the sum over its
            # group of siblings (the tops, or its parent's children) less its own.
            kept = np.maximum(self.usage, self.guarded)
            group = np.zeros((len(self.names) + 1, len(self.keys)), np.int64)
            np.add.at(group, self.parent, kept)  # the tops' group is the last row (-1)
            self._others_kept = (group[self.parent] - kept).tolist()
            self._usage_rows = self.usage.tolist()
        found = self._limits.get(queue)
        if found is None:
            fixed = self.scalars()
            avail = fixed.capacity
            found = []
            for i in self.paths[self.index[queue]]:
                taken, ceiling = self._others_kept[i], fixed.ceiling[i]
                avail = [min(c, a - t) for c, a, t in zip(ceiling, avail, taken, strict=True)]
                found.append((i, avail, self._usage_rows[i], fixed.nominal[i]))
            self._limits[queue] = found
        return found

    def scalars(self) -> TreeScalars:
        """The fixed limits as Python integers (made once)."""
        if self._scalars is None:
            self._scalars = TreeScalars(
                self.guarded.tolist(),
                self._ceiling.tolist(),
                self.nominal.tolist(),
                self.capacity.tolist(),
                [set(o.tolist()) for o in self._others],
                [o.tolist() for o in self._others],
            )
        return self._scalars

    def within_nominal(self, queue: str, usage: IntArray) -> bool:
        """Would ``queue`` (and its ancestors) stay within nominal quota with ``usage`` more?"""
        return self.nominal_excess(queue, usage) is None

    def nominal_excess(
        self, queue: str, usage: IntArray, base: IntArray | None = None
    ) -> QuotaCheck | None:
        """Where ``usage`` more would take ``queue`` or an ancestor beyond its nominal quota
        (the deepest such level), or None. ``base``: the usage to add to, per queue (default:
        all that the queues use)."""
        current = self.usage if base is None else base
        found = None
        for i in self.paths[self.index[queue]]:
            over = np.flatnonzero((current[i] + usage > self.nominal[i]) & (usage > 0))
            if over.size:
                j = int(over[0])
                found = QuotaCheck(
                    Verdict.EXCEEDS,
                    self.names[i],
                    self.keys[j],
                    int(current[i, j]),
                    int(usage[j]),
                    int(self.nominal[i, j]),
                )
        return found

    def usage_rows(self) -> list[list[int]]:
        """``usage`` as Python integers (read-only; kept per usage version)."""
        if self._rows_version != self.version:
            self._rows, self._rows_version = self.usage.tolist(), self.version
        return self._rows

    def fits_nominal(self, i: int, amounts: Sequence[int]) -> bool:
        """Would queue ``i``'s subtree stay within its nominal quota with ``amounts`` more
        (on the keys asked for)?"""
        used, nominal = self.usage_rows()[i], self.scalars().nominal[i]
        return all(a <= 0 or used[j] + a <= nominal[j] for j, a in enumerate(amounts))

    def over_nominal(self, i: int, asked: Sequence[int]) -> bool:
        """Does queue ``i``'s subtree use more than its nominal quota of a key asked for
        (``asked[j] > 0``)? Kueue: the queue borrows those resources."""
        used, nominal = self.usage_rows()[i], self.scalars().nominal[i]
        return any(a > 0 and used[j] > nominal[j] for j, a in enumerate(asked))

    def under_nominal(self, i: int, asked: Sequence[int]) -> bool:
        """Does queue ``i``'s subtree use strictly less than its nominal quota of every key
        asked for? (Kueue's test before reclaiming without borrowing.)"""
        used, nominal = self.usage_rows()[i], self.scalars().nominal[i]
        return all(a <= 0 or used[j] < nominal[j] for j, a in enumerate(asked))

    def borrow_level(self, queue: str, amounts: Sequence[int]) -> int:
        """How far ``amounts`` more would have ``queue`` borrow (see the module docstring): 0
        within its own nominal quota, else the height of the closest ancestor whose subtree's
        nominal quota holds it, else :attr:`root_height`."""
        path = self.paths[self.index[queue]]
        if self.fits_nominal(path[-1], amounts):
            return 0
        for i in reversed(path[:-1]):
            if self.fits_nominal(i, amounts):
                return self.height[i]
        return self.root_height

    def borrowing(self) -> npt.NDArray[np.bool_]:
        """Per queue: does it use more than its nominal quota of some key? (Read-only; kept
        per usage version.)"""
        if self._borrowing_version != self.version:
            flags = np.asarray((self.usage > self.nominal).any(axis=1), dtype=np.bool_)
            flags.flags.writeable = False
            self._borrowing, self._borrowing_version = flags, self.version
            self._any_borrowing = bool(flags.any())
        return self._borrowing

    def any_borrowing(self) -> bool:
        """Does some queue use more than its nominal quota?"""
        self.borrowing()
        return self._any_borrowing

    # ----------------------------------------------------------------------------- sharing
    def share(self, queue: str, extra: IntArray | None = None) -> tuple[float, ...]:
        """Weighted dominant-resource shares along the path, top first (lower goes first)."""
        shares = []
        pool = np.maximum(self.capacity, 1)
        for i in self.paths[self.index[queue]]:
            used = self.usage[i] + (extra if extra is not None else 0)
            borrowed = np.maximum(used - self.nominal[i], 0)
            ratio = borrowed / pool
            shares.append(float(ratio.max(initial=0.0)) / float(self.weight[i]))
            # Children borrow from what their parent holds: its nominal where it has one.
            pool = np.where(self.nominal[i] > 0, self.nominal[i], pool)
        return tuple(shares)

    def entitlement(self, demand: Mapping[str, IntArray]) -> dict[str, IntArray]:
        """What each queue is entitled to per key, given each leaf's demand (usage plus what it
        waits for): every parent's amount divided among its children by weighted water-filling,
        each child first up to min(demand, nominal), the rest by weight up to its demand and
        borrowing limit."""
        n, k = len(self.names), len(self.keys)
        wanted = np.zeros((n, k), np.int64)
        for name, vec in demand.items():
            for i in self.paths[self.index[name]]:
                wanted[i] += vec
        result = np.zeros((n, k), np.int64)
        self._divide(self.top, np.minimum(self.capacity, UNLIMITED), wanted, result)
        return {name: result[i] for i, name in enumerate(self.names)}

    def _divide(
        self, group: Sequence[int], amount: IntArray, wanted: IntArray, out: IntArray
    ) -> None:
        if not group:
            return
        members = np.asarray(group, np.int64)
        cap = np.minimum(wanted[members], self.nominal[members] + self.borrow[members])
        first = np.minimum(cap, self.nominal[members])
        given = np.minimum(first, amount)  # guarantee first (capped if oversubscribed)
        rest = np.maximum(amount - given.sum(axis=0), 0)
        weights = self.weight[members]
        for j in range(len(self.keys)):
            _water_fill(given[:, j], cap[:, j], weights, int(rest[j]))
        out[members] = given
        for m, i in enumerate(group):
            self._divide(self.children[i], given[m], wanted, out)


def _water_fill(given: IntArray, cap: IntArray, weights: FloatArray, amount: int) -> None:
    """Hand ``amount`` out by weight to members below their cap, in place, until it is gone."""
    while amount > 0:
        open_ = given < cap
        if not open_.any():
            return
        w = np.where(open_, weights, 0.0)
        shares = np.floor(amount * w / w.sum()).astype(np.int64)
        shares = np.minimum(shares, cap - given)
        if shares.sum() == 0:  # rounding: give the remainder one unit at a time by weight
            order = np.argsort(-w)
            for m in order[: int(min(amount, open_.sum()))]:
                if given[m] < cap[m]:
                    given[m] += 1
                    amount -= 1
            continue
        given += shares
        amount -= int(shares.sum())


def usage_of(requests: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Sum (key, amount) pairs into a usage mapping."""
    total: dict[str, int] = {}
    for key, amount in requests:
        total[key] = total.get(key, 0) + amount
    return total


class UsageView:
    """A usage of a :class:`QuotaTree` held as Python integers, on which to ask what
    :meth:`QuotaTree.check` and :meth:`QuotaTree.nominal_excess` would answer for one queue
    were some usage added to another queue first, without charging it: a handful of scalar
    reads along the two paths instead of array operations over the whole tree."""

    def __init__(self, tree: QuotaTree, usage: list[list[int]]) -> None:
        """``usage``: per queue, per key (as ``tree.usage.tolist()``); the view keeps it."""
        self.tree = tree
        self.usage = usage
        self._others_kept: dict[int, list[int]] = {}

    def others_kept(self, i: int) -> list[int]:
        """What the queues queue ``i`` competes with (as in check) keep, in all."""
        found = self._others_kept.get(i)
        if found is None:
            guarded = self.tree.scalars().guarded
            found = [0] * len(self.tree.keys)
            for other in self.tree.scalars().others_in_order[i]:
                for j, (used, floor) in enumerate(
                    zip(self.usage[other], guarded[other], strict=True)
                ):
                    found[j] += max(used, floor)
            self._others_kept[i] = found
        return found

    def admits(
        self, queue: str, amounts: Sequence[int], added_to: str, added: Sequence[int]
    ) -> bool:
        """Would ``QuotaTree.check(queue, amounts).admits`` hold with ``added`` charged to
        ``added_to`` (and its ancestors)?"""
        tree = self.tree
        fixed = tree.scalars()
        raised = tree.paths[tree.index[added_to]]
        on_raised = set(raised)
        usage, guarded = self.usage, fixed.guarded
        avail = list(fixed.capacity)
        for depth, i in enumerate(tree.paths[tree.index[queue]]):
            taken = self.others_kept(i)
            sibling = raised[depth] if depth < len(raised) else -1
            competes = sibling in fixed.others[i]
            ceiling = fixed.ceiling[i]
            for j, want in enumerate(amounts):
                kept = taken[j]
                if competes:  # the added usage is the sibling's to keep
                    base, floor = usage[sibling][j], guarded[sibling][j]
                    kept += max(base + added[j], floor) - max(base, floor)
                avail[j] = min(ceiling[j], avail[j] - kept)
                used = usage[i][j] + (added[j] if i in on_raised else 0)
                if want > 0 and used + want > avail[j]:
                    return False
        return True

    def within_nominal(
        self, queue: str, amounts: Sequence[int], added_to: str, added: Sequence[int]
    ) -> bool:
        """Would ``QuotaTree.nominal_excess(queue, amounts, base)`` be None, ``base`` this
        usage with ``added`` charged to ``added_to``?"""
        tree = self.tree
        nominal = tree.scalars().nominal
        on_raised = set(tree.paths[tree.index[added_to]])
        for i in tree.paths[tree.index[queue]]:
            row = self.usage[i]
            for j, want in enumerate(amounts):
                used = row[j] + (added[j] if i in on_raised else 0)
                if want > 0 and used + want > nominal[i][j]:
                    return False
        return True


@dataclass(frozen=True, slots=True)
class TreeScalars:
    """The fixed limits of a :class:`QuotaTree` as Python integers (for :class:`UsageView`)."""

    guarded: list[list[int]]
    ceiling: list[list[int]]
    nominal: list[list[int]]
    capacity: list[int]
    #: Per queue: the queues it competes with in :meth:`QuotaTree.check`.
    others: list[set[int]]
    others_in_order: list[list[int]]
