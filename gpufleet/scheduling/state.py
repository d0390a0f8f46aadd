"""What every part of the cycle shares, and what a plugin of the cycle is given.

:class:`CoreState` holds the node table and its placement engine, the quotas, the admission
knobs, the waiting workloads (and those held: gated or suspended), the running set, the
requests kept while workloads wait, the placement shortcuts, the room held for preemptors and
the backfill reservation, the queues' decayed usage (when fair sharing over time is on), and
the core's ``now`` (set by the core from the time each cycle is
given: nothing here reads a clock). It is kube-scheduler's framework handle: plugins read it,
and change it only through the parts' methods.

What it does not do: decide anything; each part documents its own concern.
"""

from __future__ import annotations

from gpufleet.model.times import TimeFormat
from gpufleet.scheduling.admission import Quotas
from gpufleet.scheduling.config import AdmissionConfig
from gpufleet.scheduling.engine import PlacementEngine
from gpufleet.scheduling.fit_checks import PlacementChecks
from gpufleet.scheduling.gates import HeldWorkloads
from gpufleet.scheduling.holds import Holds
from gpufleet.scheduling.node_table import NodeTable
from gpufleet.scheduling.ordering import Arrivals, aged_priority
from gpufleet.scheduling.pending import PendingWorkload, PendingWorkloads
from gpufleet.scheduling.requests import Requests
from gpufleet.scheduling.running import RunningSet
from gpufleet.scheduling.usage_history import UsageHistory


class CoreState:
    """See the module docstring."""

    def __init__(
        self,
        table: NodeTable,
        engine: PlacementEngine,
        quotas: Quotas,
        config: AdmissionConfig,
        time_format: TimeFormat,
        explain_failures: bool,
    ) -> None:
        self.table = table
        self.engine = engine
        self.quotas = quotas
        self.config = config
        #: How the instants in messages read (``now`` is the world's clock: simulated seconds,
        #: or Unix seconds on Kubernetes, whose backend gives a wall-clock format).
        self.time_format = time_format
        #: Whether messages say per reason why nodes refused a pod (else "no node fits").
        self.explain_failures = explain_failures
        self.now = 0.0
        #: The number of the cycle under way: the version that memos whose answers may rest
        #: on what no other version names (plugins' filters, the running set, the clock) are
        #: keyed by, so that they hold for one cycle.
        self.cycle = 0
        self.pending = PendingWorkloads(self.priority)
        #: Gated pods' and suspended Jobs' workloads, never tried until released.
        self.held = HeldWorkloads()
        self.running = RunningSet()
        self.arrivals = Arrivals()
        # Bound methods, not lambdas: a core is copied by pickling (benchmarks, sweeps).
        self.requests = Requests(table, quotas, self.pending.__len__)
        self.fits = PlacementChecks(table, engine, self.cycle_under_way)
        self.holds = Holds(self)
        #: Queues' GPU usage decayed over time, when the profile turns fair sharing on.
        self.usage_history: UsageHistory | None = None

    def cycle_under_way(self) -> int:
        """:attr:`cycle` (for the memos that key by it)."""
        return self.cycle

    def priority(self, pending: PendingWorkload) -> int:
        """A waiting workload's effective priority now (:func:`~.ordering.aged_priority`)."""
        return aged_priority(pending, self.now, self.config)
