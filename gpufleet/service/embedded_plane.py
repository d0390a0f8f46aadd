"""The control plane of ``gpufleet serve`` in embedded mode: the simulated cluster, observed.

:class:`EmbeddedControlPlane` is a :class:`~gpufleet.service.live_plane.LivePlane` (the loop,
the store, the API's requests: read that module's docstring) over a :class:`LiveSimCluster`
(the simulated cluster on a scaled wall clock, its clock kept in the store across restarts):
the parts every live plane has, its start putting the running pods back one by one
(:class:`~gpufleet.service.live_restore.PodsTakenBack`), and what only a simulated cluster
has: telemetry of its simulated GPUs (from usage profiles), its series and alerts
(:mod:`gpufleet.service.live_observing`), saved at stop, and the wall time of each instant of
its clock (:mod:`gpufleet.service.wall_time`) for what it sends out. It keeps no logs and has
no terminals (its ``logs`` and ``terminals`` are None).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from gpufleet.backends.sim.live import LiveSimCluster
from gpufleet.backends.sim.telemetry import LockedTelemetry, SimTelemetry
from gpufleet.control.factory import target_of
from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.model import Node
from gpufleet.model.times import time_format
from gpufleet.service.live_observing import LiveObserving
from gpufleet.service.live_plane import LivePlane
from gpufleet.service.live_restore import PodsTakenBack
from gpufleet.service.observatory import ObservatoryThread
from gpufleet.service.plane_book import ServeOptions
from gpufleet.service.sim_records import telemetry_seed
from gpufleet.service.store import Store
from gpufleet.service.wall_time import PlaneWallTime


class EmbeddedControlPlane(LivePlane):
    """See the module docstring."""

    backend_name = "simulated"
    #: Whether the world's clock is a simulated cluster's (seconds since it started: instants
    #: read ``t=39m09s``) or the wall clock (Unix seconds: instants read as UTC dates); the
    #: CLI reads the same from the backend's name.
    simulated_clock: ClassVar[bool] = True
    world: LiveSimCluster

    def __init__(
        self,
        store: Store,
        nodes: Sequence[Node],
        options: ServeOptions | None = None,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        options = options or ServeOptions()
        self.nodes = list(nodes)
        start = float(store.meta("clock") or 0.0)
        sim = LiveSimCluster(
            self.nodes,
            target_of(()),
            options.speed,
            start,
            wall,
            options.faults,
            options.node_faults,
            options.seed,
        )
        super().__init__(
            store,
            sim,
            sim.recorder.metrics,
            options,
            time_format(self.simulated_clock),
            wall,
            default_runtime=options.default_runtime,
            take_back=lambda restorer: PodsTakenBack(restorer, sim),
        )
        #: Every simulated GPU's samples, from the usage profiles of the pods on it.
        self.telemetry = LockedTelemetry(
            SimTelemetry(self.world, telemetry_seed(self.options), self.options.usage_profile),
            self.lock,
        )
        rules = self.options.alert_rules
        self.observing = LiveObserving(
            self, builtin_alert_rules() if rules is None else rules, options.observe_step_s
        )
        # The simulated GPUs' series and the alerts on them (see ``live_observing``).
        self.watch(self.observing.observatory)
        # What is sent out carries wall-clock times (the cluster's clock counts from 0).
        self.observing.observatory.wall_time = PlaneWallTime.anchored(
            store, self.world.clock.now(), self.options.speed
        )
        self._observe = ObservatoryThread(
            self.observing.round, options.observe_step_s, self.options.speed
        )

    def start(self) -> None:
        """Run the scheduling loop and the observatory in threads (until :meth:`stop`)."""
        running = self.running
        super().start()
        if not running:
            self._observe.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._observe.stop(timeout)
        super().stop(timeout)
        self.observing.save()
        with self.lock:
            self.store.set_meta("clock", repr(self.world.clock.now()))
