"""The cluster as columns: one row per node, numpy arrays for everything the hot path reads.

The table owns free capacity (CPU, memory, milli-GPU per device, MIG slices per profile, units
of the GPU resource the kubelet counts, and one column per extended resource name seen, such as
``rdma/hca``), the static facts filters need (GPU model ids, label value ids, hard taints, which
GPU resource a node advertises and what one unit of it holds), which pods hold each row as the
inter-pod rules count them (:class:`~gpufleet.scheduling.pod_index.PodIndex`, ``pod_index``),
and a version stamp per row so that callers can cache per-row quantities and recompute only rows
that changed. (What a unit holds: :mod:`gpufleet.model.sharing`.)

Changes happen one row at a time through :meth:`NodeTable.allocate` (of a :class:`Claim`) and
:meth:`NodeTable.release`.

A node may stop taking new pods, and take them again, while pods run there
(:meth:`NodeTable.set_scheduling`: cordoned, tainted, being removed by an autoscaler, not
ready): its ``schedulable`` flag (with the reason ``explain`` gives) and hard taints change in
place, and static masks are rebuilt (``topology_version``), as when nodes join or leave.

A device its node's agent marked unhealthy (:meth:`NodeTable.set_unhealthy`) takes nothing new:
its free milli-GPU, its free MIG slices and the units of the node's GPU resource it advertises
are withheld (``gpu_free`` reads 0 there, so every filter, score and device choice skips it with
no work on a healthy cluster), while what pods hold on it stays counted and is given back into
the withheld part; when the device is healthy again the withheld part is free at once.

Inside a trial (:meth:`begin_trial`) every change is logged so that
:meth:`rollback` restores the rows exactly; this is how a gang is placed all or nothing.

Its storage (the numpy columns and their growth) is :mod:`.table_columns`'s; the records it
takes and gives (:class:`Claim`, :class:`Allocation`) are :mod:`.table_records`'; a pod that
already runs is put back through :mod:`.put_back`.

What it does not do: decide anything. Filters, scores and device choice live in plugins.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from gpufleet.model import GPU_RESOURCE, MILLI_PER_GPU, Node, TaintEffect
from gpufleet.model.node import UNSCHEDULABLE_REASON, Taint, unschedulable_reason
from gpufleet.scheduling.table_columns import TableColumns
from gpufleet.scheduling.table_records import (
    Allocation,
    BoolArray,
    Claim,
    IntArray,
    RowImage,
    Sickness,
)

#: The records live in table_records; they stay importable from here.
__all__ = ["Allocation", "BoolArray", "Claim", "IntArray", "NodeTable"]

_HARD_EFFECTS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


class NodeTable(TableColumns):
    """Columns over nodes. Rows are never reordered; removed nodes are marked dead.

    ``alive`` says a node is in the cluster; ``schedulable`` says new pods may go there
    (a cordoned node is alive but not schedulable).
    """

    def __init__(self, nodes: Sequence[Node] = (), max_gpus: int = 8) -> None:
        max_gpus = max(max_gpus, max((n.gpu_count for n in nodes), default=0), 1)
        super().__init__(max_gpus, max(len(nodes), 16))
        self.nodes: list[Node] = []
        #: Each row's ``node.gpu_model`` (the property counts the node's GPUs each time it is
        #: read; rows are never reused, so this is read once per node).
        self.row_models: list[str | None] = []
        self.row_of: dict[str, int] = {}
        self.model_names: list[str] = []
        self.model_id_of: dict[str, int] = {}
        self.label_values: dict[str, dict[str, int]] = {}
        #: GPU resource names the nodes advertise (``resource_id`` indexes it).
        self.gpu_resources: list[str] = [GPU_RESOURCE]
        #: Whether some node advertises more than one unit per device (then units can run out
        #: before devices do; with one unit per device they never do: each holder of a unit
        #: holds its whole device), or some device was ever unhealthy (its units are withheld
        #: while the pods on it still hold theirs, as the kubelet counts them).
        self.replicated = False
        #: Whether some node time-slices (a whole-GPU request holds less than a device there).
        self.time_sliced = False
        #: Bumped on every change of any row; row versions take its value.
        self.clock = 0
        #: Bumped when what the nodes offer at all changes: nodes added or removed (static
        #: masks must be rebuilt), cordoned or tainted, devices failed or recovered.
        self.topology_version = 0
        #: Names what is free on the rows: a new number on every change, and back to the
        #: number it had when a trial began once the trial is rolled back (row versions move
        #: on either way), so that callers may memoise what they derive from it across trials
        #: that leave it as it was. (Nodes joining or leaving: see ``topology_version``.)
        self.state = 0
        self._states = 0
        self._trial_states: list[int] = []
        #: The most recent changed rows, in order (the last one changed at ``clock``), so that
        #: caches find what changed since they last looked in O(changes).
        self._change_log: list[int] = []
        self._undo: list[RowImage] | None = None
        self._trial_marks: list[int] = []
        #: Per row: GPU index (as the device plugin numbers it) -> column position.
        self._positions: list[dict[int, int]] = []
        #: Rows with unhealthy devices (empty on a healthy cluster: the hot path tests that).
        self._sick: dict[int, Sickness] = {}
        #: Why each unschedulable live row takes no new pods (explain's reason).
        self.unschedulable_reasons: dict[int, str] = {}
        for node in nodes:
            self.add_node(node)

    # ----------------------------------------------------------------------------- nodes
    def add_node(self, node: Node) -> int:
        """Append a node (empty: nothing allocated on it) and return its row."""
        if node.name in self.row_of and self.alive[self.row_of[node.name]]:
            raise ValueError(f"node {node.name!r} is already in the table")
        self._grow(self.size + 1, node.gpu_count)
        row = self.size
        self.size += 1
        self.nodes.append(node)
        self.row_models.append(None)
        self._free_slices.append([])
        self._positions.append({})
        self.row_of[node.name] = row
        self._fill_row(row, node)
        return row

    def renew_node(self, row: int, node: Node) -> None:
        """Take ``node`` (a node of the row's name, come back or changed) into ``row`` in
        place, alive, as :meth:`add_node` would make it: the caller has released what pods
        hold there and takes it again on the new shape (kube-scheduler keeps a node's entry,
        with its pods, across its deletion and re-creation and across allocatable changes).
        Not inside a trial."""
        if self._undo is not None:
            raise RuntimeError("a node cannot change inside a trial")
        if self.nodes[row].name != node.name:
            raise ValueError(f"row {row} is node {self.nodes[row].name!r}, not {node.name!r}")
        self._grow(self.size, node.gpu_count)
        self._sick.pop(row, None)
        self.unschedulable_reasons.pop(row, None)
        self.gpu_free[row] = 0
        self.mig_cap[row] = self.mig_free[row] = 0
        self.ext_cap[row] = self.ext_free[row] = 0
        self.hard_taints[row] = False
        self.model_id[row] = -1
        self.resource_id[row] = -1
        for column in self.label_ids.values():
            column[row] = -1
        self.nodes[row] = node
        self._fill_row(row, node)

    def _fill_row(self, row: int, node: Node) -> None:
        """Write ``node`` into the columns of ``row`` (clear, or new), empty and alive."""
        self.cpu_cap[row] = self.cpu_free[row] = node.cpu_milli
        self.mem_cap[row] = self.mem_free[row] = node.memory_mib
        usable = [gpu.index for gpu in node.gpus if not gpu.partitioned]
        for position, gpu in enumerate(node.gpus):
            if not gpu.partitioned:
                self.gpu_free[row, position] = MILLI_PER_GPU
        self.gpu_count[row] = len(usable)
        self.gpu_mem[row] = node.gpu_memory_mib
        sharing = node.gpu_sharing
        self.units_cap[row] = self.units_free[row] = node.gpu_units
        self.replica_milli[row] = sharing.replica_milli
        self.whole_milli[row] = sharing.whole_milli
        self.one_unit[row] = sharing.one_unit_per_pod
        if node.gpus:
            if sharing.resource not in self.gpu_resources:
                self.gpu_resources.append(sharing.resource)
            self.resource_id[row] = self.gpu_resources.index(sharing.resource)
        self.replicated |= sharing.replicas > 1
        self.time_sliced |= sharing.whole_milli < MILLI_PER_GPU
        model = node.gpu_model
        self.row_models[row] = model
        if model is not None:
            if model not in self.model_id_of:
                self.model_id_of[model] = len(self.model_names)
                self.model_names.append(model)
            self.model_id[row] = self.model_id_of[model]
        free_slices: list[list[tuple[int, int]]] = [[] for _ in self.mig_profiles]
        self._free_slices[row] = free_slices
        self._positions[row] = {gpu.index: p for p, gpu in enumerate(node.gpus)}
        for position, gpu in enumerate(node.gpus):
            for mig in gpu.mig_slices:
                pid = self.mig_profile_id.get(mig.profile)
                if pid is None:
                    pid = self._add_mig_profile(mig.profile)
                free_slices[pid].append((position, mig.slot))
                self.mig_cap[row, pid] += 1
        self.mig_free[row] = self.mig_cap[row]
        for name, amount in node.extended:
            rid = self.ext_id.get(name)
            if rid is None:
                rid = self._add_extended(name)
            self.ext_cap[row, rid] = self.ext_free[row, rid] = amount
        self._set_taints(row, node.taints)
        for key, value in node.labels.items():
            values = self.label_values.setdefault(key, {})
            vid = values.setdefault(value, len(values))
            column = self.label_ids.get(key)
            if column is None:
                column = self.label_ids[key] = np.full(self.capacity, -1, np.int64)
            column[row] = vid
        self.alive[row] = True
        self.schedulable[row] = not node.unschedulable
        if node.unschedulable:
            self.unschedulable_reasons[row] = unschedulable_reason(node)
        unhealthy = [p for p, gpu in enumerate(node.gpus) if not gpu.healthy]
        if unhealthy:
            self._withhold(row, frozenset(unhealthy))
        self._refresh_gpu_summary(row)
        self._touch(row)
        self._forget_trial_states()
        self.topology_version += 1

    def remove_node(self, name: str) -> int:
        """Mark a node dead; its row stays (allocations on it are the caller's to drop)."""
        row = self.row_of[name]
        self._sick.pop(row, None)
        self.unschedulable_reasons.pop(row, None)
        self.alive[row] = False
        self.schedulable[row] = False
        self._touch(row)
        self._forget_trial_states()
        self.topology_version += 1
        return row

    def set_scheduling(
        self, row: int, schedulable: bool, reason: str = "", taints: Sequence[Taint] | None = None
    ) -> bool:
        """Whether new pods may go to the live ``row`` from now on (``reason``: why not, else
        kube-scheduler's "node(s) were unschedulable"), and the node's ``taints`` now (None:
        as they were); whether anything changed. What runs there stays. Not inside a trial:
        like health, a fact between cycles."""
        if self._undo is not None:
            raise RuntimeError("a node's scheduling cannot change inside a trial")
        node = self.nodes[row]
        if not self.alive[row]:
            raise ValueError(f"node {node.name!r} is not in the cluster")
        why = "" if schedulable else reason or UNSCHEDULABLE_REASON
        taints = node.taints if taints is None else tuple(taints)
        if (
            bool(self.schedulable[row]) == schedulable
            and self.unschedulable_reasons.get(row, "") == why
            and taints == node.taints
        ):
            return False
        self.nodes[row] = replace(
            node, taints=taints, unschedulable=not schedulable, unschedulable_reason=why and reason
        )
        self.schedulable[row] = schedulable
        if schedulable:
            self.unschedulable_reasons.pop(row, None)
        else:
            self.unschedulable_reasons[row] = why
        self.hard_taints[row] = False
        self._set_taints(row, taints)
        self._touch(row)
        self._forget_trial_states()
        self.topology_version += 1  # static masks start from these columns
        return True

    def _set_taints(self, row: int, taints: Sequence[Taint]) -> None:
        for taint in taints:
            if taint.effect in _HARD_EFFECTS:
                tid = self.taint_id.get(taint)
                if tid is None:
                    tid = self._add_taint(taint)
                self.hard_taints[row, tid] = True

    def position_of(self, row: int) -> Mapping[int, int]:
        """GPU index -> column position on ``row`` (read-only)."""
        return self._positions[row]

    def device_index(self, row: int, position: int) -> int:
        """The GPU index (as the device plugin numbers it) of a column position."""
        return self.nodes[row].gpus[position].index

    def free_mig_slices(self, row: int, profile_id: int) -> list[tuple[int, int]]:
        return list(self._free_slices[row][profile_id])

    # ----------------------------------------------------------------------------- health
    @property
    def any_unhealthy(self) -> bool:
        """Whether some live node has an unhealthy device."""
        return bool(self._sick)

    def unhealthy_rows(self) -> list[int]:
        """Rows with unhealthy devices."""
        return sorted(self._sick)

    def unhealthy_indices(self, row: int) -> tuple[int, ...]:
        """GPU indices (as the device plugin numbers them) of ``row``'s unhealthy devices."""
        sick = self._sick.get(row)
        if sick is None:
            return ()
        return tuple(sorted(self.device_index(row, p) for p in sick.positions))

    def withheld(self, row: int) -> tuple[IntArray, IntArray, int]:
        """What ``row`` would offer more if its devices were all healthy: milli-GPU per
        position, free MIG slices per profile id, units of its GPU resource."""
        gpus = np.zeros(self.max_gpus, np.int64)
        slices = np.zeros(len(self.mig_profiles), np.int64)
        sick = self._sick.get(row)
        if sick is None:
            return gpus, slices, 0
        for position, milli in sick.withheld.items():
            gpus[position] = milli
        for pid, free in sick.slices.items():
            slices[pid] = len(free)
        return gpus, slices, sick.units

    def healthy_capacity(self, row: int) -> tuple[IntArray, IntArray, int]:
        """What ``row``'s healthy devices offer with nothing running (its allocatable, as the
        kubelet advertises it once a device plugin withdrew the unhealthy ones): milli-GPU per
        position, MIG slices per profile id, units of its GPU resource."""
        gpus = np.zeros(self.max_gpus, np.int64)
        slices = self.mig_cap[row].copy()
        sick = self._sick.get(row)
        out = sick.positions if sick is not None else frozenset()
        for position, gpu in enumerate(self.nodes[row].gpus):
            if position in out:
                for mig in gpu.mig_slices:
                    slices[self.mig_profile_id[mig.profile]] -= 1
            elif not gpu.partitioned:
                gpus[position] = MILLI_PER_GPU
        return gpus, slices, int(self.units_cap[row]) - (sick.units if sick is not None else 0)

    def set_unhealthy(self, row: int, indices: Sequence[int]) -> bool:
        """Exactly the devices ``indices`` (GPU indices) of ``row`` are unhealthy from now on;
        whether anything changed. Not inside a trial: health is a fact between cycles."""
        if self._undo is not None:
            raise RuntimeError("device health cannot change inside a trial")
        node = self.nodes[row]
        position_of = self._positions[row]
        unknown = sorted(set(indices) - set(position_of))
        if unknown:
            raise ValueError(
                f"node {node.name!r} has no GPU {', '.join(map(str, unknown))} "
                f"(its GPUs: {', '.join(map(str, sorted(position_of))) or 'none'})"
            )
        wanted = frozenset(position_of[i] for i in indices)
        sick = self._sick.get(row)
        if wanted == (sick.positions if sick is not None else frozenset()):
            return False
        self._restore_withheld(row)
        if wanted:
            self._withhold(row, wanted)
        self._refresh_gpu_summary(row)
        self._touch(row)
        # What the nodes offer at all changed, as when one is cordoned: memos of the cluster
        # as a whole (would this gang ever fit?) read topology_version, not the free state.
        self.topology_version += 1
        return True

    def _withhold(self, row: int, positions: frozenset[int]) -> None:
        """Hide what is free on the devices at ``positions`` of a row with none hidden."""
        gpus = self.nodes[row].gpus
        withheld = {}
        for position in positions:
            withheld[position] = int(self.gpu_free[row, position])
            self.gpu_free[row, position] = 0
        slices: dict[int, list[tuple[int, int]]] = {}
        for pid, free in enumerate(self._free_slices[row]):
            hidden = [s for s in free if s[0] in positions]
            if hidden:
                slices[pid] = hidden
                free[:] = [s for s in free if s[0] not in positions]
                self.mig_free[row, pid] -= len(hidden)
        whole = sum(not gpus[p].partitioned for p in positions)
        units = whole * self.nodes[row].gpu_sharing.replicas
        self.units_free[row] -= units
        self.replicated |= units > 0
        self._sick[row] = Sickness(positions, withheld, slices, units)

    def _restore_withheld(self, row: int) -> None:
        """Offer again everything withheld on ``row``."""
        sick = self._sick.pop(row, None)
        if sick is None:
            return
        for position, milli in sick.withheld.items():
            self.gpu_free[row, position] += milli
        for pid, hidden in sick.slices.items():
            self._free_slices[row][pid].extend(hidden)
            self.mig_free[row, pid] += len(hidden)
        self.units_free[row] += sick.units

    # ----------------------------------------------------------------------------- changes
    def _touch(self, row: int) -> None:
        self.clock += 1
        self.state = self._new_state()
        self.version[row] = self.clock
        log = self._change_log
        log.append(row)
        if len(log) > 2 * self.capacity + 4096:
            del log[: len(log) // 2]

    def _new_state(self) -> int:
        self._states += 1
        return self._states

    def _forget_trial_states(self) -> None:
        """A node joined or left: a rollback does not undo that, so it must not name the
        content as it was before the trial."""
        self._trial_states = [self._new_state() for _ in self._trial_states]

    @property
    def change_mark(self) -> int:
        """Where the table is now; pass it to :meth:`changed_since` later."""
        return self.clock

    def changed_since(self, mark: int) -> IntArray:
        """Rows changed since ``mark`` (a :attr:`change_mark`), without duplicates."""
        count = self.clock - mark
        if count <= 0:
            return np.empty(0, np.int64)
        if count <= min(len(self._change_log), self.size // 8):
            recent = self._change_log[-count:]
            if count <= 64:  # the usual case: a few rows; a set beats numpy's call overhead
                return np.fromiter(sorted(set(recent)), np.int64)
            return np.unique(np.asarray(recent, np.int64))
        return np.flatnonzero(self.version[: self.size] > mark)

    def _refresh_gpu_summary(self, row: int) -> None:
        free = self.gpu_free[row]
        self.full_free[row] = int(np.count_nonzero(free == MILLI_PER_GPU))
        self.max_free[row] = int(free.max()) if free.size else 0

    def _save(self, row: int) -> None:
        if self._undo is not None:
            self._undo.append(
                RowImage(
                    row,
                    int(self.cpu_free[row]),
                    int(self.mem_free[row]),
                    self.gpu_free[row].copy(),
                    self.mig_free[row].copy(),
                    self.tag_count[row].copy(),
                    [list(s) for s in self._free_slices[row]],
                    self.ext_free[row].copy() if self.ext_names else None,
                    int(self.units_free[row]),
                    self._sick[row].copy() if self._sick and row in self._sick else None,
                )
            )

    def allocate(self, claim: Claim) -> Allocation:
        """Take what ``claim`` asks on its row (see :class:`Claim` for ``existing``,
        ``missing`` and ``beyond``). Raises if it is not free (callers filter first)."""
        row, units, beyond, missing = claim.row, claim.units, claim.beyond, claim.missing
        if missing or (beyond and units > self.units_free[row]):
            self.replicated = True  # units run out before devices do there
        sick = self._sick.get(row) if self._sick else None
        if sick is not None:
            return self._allocate_on_sick_row(sick, claim)
        if not self.alive[row]:
            raise ValueError(f"node {self.nodes[row].name!r} has left the cluster")
        cpu_milli, memory_mib = claim.cpu_milli, claim.memory_mib
        positions, milli_per_device = claim.positions, claim.milli_per_device
        mig_profile, mig_slices, extended = claim.mig_profile, claim.mig_slices, claim.extended
        if beyond:
            pass
        elif cpu_milli > self.cpu_free[row] or memory_mib > self.mem_free[row]:
            raise ValueError(f"not enough CPU or memory on {self.nodes[row].name!r}")
        for rid, amount in extended:
            if rid < 0 or (amount > self.ext_free[row, rid] and not beyond):
                name = self.ext_names[rid] if rid >= 0 else "an unknown resource"
                raise ValueError(f"not enough {name} on {self.nodes[row].name!r}")
        if units > self.units_free[row] and not (missing or beyond):
            node = self.nodes[row]
            raise ValueError(
                f"{node.name!r} has {self.units_free[row]} {node.gpu_resource} free, {units} asked"
            )
        for position in positions:
            if self.gpu_free[row, position] < milli_per_device:
                raise ValueError(
                    f"GPU position {position} of {self.nodes[row].name!r} has "
                    f"{self.gpu_free[row, position]} milli free, {milli_per_device} asked"
                )
        if len(set(positions)) != len(positions):
            raise ValueError("a pod cannot hold the same GPU twice")
        free = self._free_slices[row][mig_profile] if mig_slices else []
        if any(s not in free for s in mig_slices):
            raise ValueError(f"MIG slice already taken on {self.nodes[row].name!r}")
        self._save(row)
        self.cpu_free[row] -= cpu_milli
        self.mem_free[row] -= memory_mib
        self.units_free[row] -= units
        for position in positions:
            self.gpu_free[row, position] -= milli_per_device
        if mig_slices:
            for s in mig_slices:
                free.remove(s)
            self.mig_free[row, mig_profile] -= len(mig_slices)
        if claim.tag >= 0:
            self.tag_count[row, claim.tag] += 1
        for rid, amount in extended:
            self.ext_free[row, rid] -= amount
        if claim.identity >= 0:
            self.pod_index.add(row, claim.identity, 1)
        self._refresh_gpu_summary(row)
        self._touch(row)
        devices = tuple(self.device_index(row, p) for p in positions) + missing
        return Allocation(
            row,
            cpu_milli,
            memory_mib,
            devices,
            milli_per_device,
            mig_profile,
            mig_slices,
            claim.tag,
            extended,
            claim.identity,
            units,
        )

    def _allocate_on_sick_row(self, sick: Sickness, claim: Claim) -> Allocation:
        """:meth:`allocate` on a row with unhealthy devices: what lies on them comes out of
        the withheld part, and only for an ``existing`` holder; the rest as usual."""
        row, units = claim.row, claim.units
        name = self.nodes[row].name
        hidden = [p for p in claim.positions if p in sick.positions]
        hidden_slices = [s for s in claim.mig_slices if s[0] in sick.positions]
        if (hidden or hidden_slices) and not claim.existing:
            index = self.device_index(row, (hidden or [hidden_slices[0][0]])[0])
            raise ValueError(f"GPU {index} of {name!r} is unhealthy")
        if (
            units
            and units > self.units_free[row]
            and not (claim.existing or claim.missing or claim.beyond)
        ):
            node = self.nodes[row]
            raise ValueError(
                f"{name!r} has {self.units_free[row]} {node.gpu_resource} free, {units} asked"
            )
        # Checked against the row as if all were healthy (an existing holder counts even where
        # the kubelet advertises fewer units now), then withheld again.
        with self._unwithheld(row, sick):
            return self.allocate(replace(claim, existing=False))

    @contextmanager
    def _unwithheld(self, row: int, sick: Sickness) -> Iterator[None]:
        """Inside: ``row`` offers what its unhealthy devices withhold (saved once for a
        rollback first); after: withheld again, what changed on those devices included."""
        self._save(row)
        undo, self._undo = self._undo, None
        self._restore_withheld(row)
        try:
            yield
        finally:
            self._withhold(row, sick.positions)
            self._refresh_gpu_summary(row)
            self._undo = undo

    def reallocate(self, allocation: Allocation) -> Allocation:
        """Take again exactly what ``allocation`` took (after its release, e.g. a victim put
        back by a preemption search)."""
        a = allocation
        position = self._positions[a.row]
        claim = Claim(
            a.row,
            a.cpu_milli,
            a.memory_mib,
            tuple(position[i] for i in a.gpu_indices if i in position),
            a.gpu_milli_per_device,
            a.mig_profile,
            a.mig_slices,
            a.tag,
            a.extended,
            a.identity,
            a.units,
            existing=True,
            missing=tuple(i for i in a.gpu_indices if i not in position),
            beyond=True,  # what it held, even where the node advertises less now
        )
        return self.allocate(claim)

    def release(self, allocation: Allocation) -> None:
        """Give back exactly what :meth:`allocate` took."""
        row = allocation.row
        sick = self._sick.get(row) if self._sick else None
        if sick is not None:
            with self._unwithheld(row, sick):
                self.release(allocation)
            return
        node = self.nodes[row]
        position_of = self._positions[row]
        self._save(row)
        self.cpu_free[row] += allocation.cpu_milli
        self.mem_free[row] += allocation.memory_mib
        self.units_free[row] += allocation.units
        for index in allocation.gpu_indices:
            position = position_of.get(index)
            if position is not None:  # else a device the node no longer lists
                self.gpu_free[row, position] += allocation.gpu_milli_per_device
        if allocation.mig_slices:
            self._free_slices[row][allocation.mig_profile].extend(allocation.mig_slices)
            self.mig_free[row, allocation.mig_profile] += len(allocation.mig_slices)
        if allocation.tag >= 0:
            self.tag_count[row, allocation.tag] -= 1
        for rid, amount in allocation.extended:
            self.ext_free[row, rid] += amount
        if allocation.identity >= 0:
            self.pod_index.add(row, allocation.identity, -1)
        if (
            self.cpu_free[row] > self.cpu_cap[row]
            or self.mem_free[row] > self.mem_cap[row]
            or self.units_free[row] > self.units_cap[row]
            or bool((self.gpu_free[row] > MILLI_PER_GPU).any())
            or (allocation.extended and bool((self.ext_free[row] > self.ext_cap[row]).any()))
        ):
            raise AssertionError(f"release of {allocation} overflows node {node.name!r}")
        self._refresh_gpu_summary(row)
        self._touch(row)

    # ----------------------------------------------------------------------------- trials
    @property
    def in_trial(self) -> bool:
        return self._undo is not None

    def begin_trial(self) -> int:
        """Start (or nest) a trial; returns a mark for :meth:`rollback` / :meth:`commit`."""
        if self._undo is None:
            self._undo = []
        mark = len(self._undo)
        self._trial_marks.append(mark)
        self._trial_states.append(self.state)
        self.pod_index.begin_trial()
        return mark

    def rollback(self, mark: int) -> None:
        """Undo every change since ``mark``, newest first."""
        assert self._undo is not None
        assert self._trial_marks
        assert self._trial_marks[-1] == mark
        while len(self._undo) > mark:
            image = self._undo.pop()
            row = image.row
            self.cpu_free[row] = image.cpu_free
            self.mem_free[row] = image.mem_free
            self.gpu_free[row] = image.gpu_free
            self.mig_free[row] = image.mig_free
            self.tag_count[row] = image.tag_count
            self._free_slices[row] = image.free_slices
            if image.ext_free is not None:
                self.ext_free[row, : image.ext_free.size] = image.ext_free
            self.units_free[row] = image.units_free
            if image.sickness is not None:
                self._sick[row] = image.sickness
            self._refresh_gpu_summary(row)
            self._touch(row)
        self.pod_index.rollback()
        self.state = self._trial_states[-1]
        self._end_trial()

    def commit(self, mark: int) -> None:
        """Keep the changes since ``mark`` (an outer trial can still roll them back)."""
        assert self._trial_marks
        assert self._trial_marks[-1] == mark
        self.pod_index.commit()
        self._end_trial()

    def _end_trial(self) -> None:
        self._trial_marks.pop()
        self._trial_states.pop()
        if not self._trial_marks:
            self._undo = None

    # ----------------------------------------------------------------------------- totals
    def total_gpu_milli(self) -> int:
        """Milli-GPU of all usable (not MIG-partitioned) devices on live nodes."""
        n = self.size
        return int(self.gpu_count[:n][self.alive[:n]].sum()) * MILLI_PER_GPU

    def allocated_gpu_milli(self) -> int:
        n = self.size
        alive = self.alive[:n]
        withheld = sum(sum(s.withheld.values()) for s in self._sick.values())
        return (
            int(self.gpu_count[:n][alive].sum()) * MILLI_PER_GPU
            - int(self.gpu_free[:n][alive].sum())
            - withheld
        )
