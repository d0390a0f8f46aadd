"""The agent's Node kept showing what the agent knows, whatever the API server went through.

Owns :class:`NodeSync`: what the agent publishes on its Node (GPU Feature Discovery's labels,
the inventory annotation the scheduler places by, the ``GpuDevicesHealthy`` condition) is a
desired state, :class:`DesiredNode`, computed afresh from the devices at every pass, and one
thread makes the Node show it: at once after every change (:meth:`NodeSync.request`), and every
``period_s`` besides (GPU Feature Discovery relabels every 60 s), comparing with the Node as it
is read at that moment. A pass the API refuses, or that finds no Node, is tried again with
exponential back-off (:class:`Backoff`) until one succeeds, so a GPU that failed while the API
server was down is published once it answers, and a Node deleted and re-created bare (a kubelet
registering again) gets its labels, inventory and condition back on the next pass.

What the desired state says is the agent runner's; how each piece is written is
:class:`~gpufleet.agent.kube.node_agent.NodeAgentApi`'s. This module only decides when.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpufleet.agent.kube.node_agent import GPU_HEALTH_CONDITION, NodeAgentApi

log = logging.getLogger(__name__)

#: How often the Node is compared with the desired state when nothing changed (GFD's default).
DEFAULT_PERIOD_S = 60.0
#: The first wait after a failed pass, doubled after each further failure up to the maximum.
DEFAULT_RETRY_S = 0.5
DEFAULT_RETRY_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class HealthCondition:
    """The ``GpuDevicesHealthy`` condition as the agent means it."""

    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class DesiredNode:
    """Everything the agent's Node must show."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    health: HealthCondition


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits between failed passes: ``initial_s`` doubled per further failure, at most
    ``max_s``, each shortened by up to ``jitter`` (a fraction) so that the agents of a whole
    cluster do not all call at once when its API server comes back."""

    initial_s: float = DEFAULT_RETRY_S
    max_s: float = DEFAULT_RETRY_MAX_S
    jitter: float = 0.2

    def delay(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        """The wait after the ``failures``-th failure in a row (1: the first)."""
        doublings = min(max(failures - 1, 0), 30)
        base = min(self.max_s, self.initial_s * 2.0**doublings)
        return base * (1.0 - self.jitter * draw())


class NodeSync:
    """See the module docstring. :meth:`sync` once (it raises), then :meth:`start`,
    :meth:`request` after each change, and :meth:`stop`."""

    def __init__(
        self,
        api: NodeAgentApi,
        node: str,
        desired: Callable[[], DesiredNode],
        period_s: float = DEFAULT_PERIOD_S,
        backoff: Backoff | None = None,
    ) -> None:
        if period_s <= 0:
            raise ValueError(f"the Node's resync period must be positive, got {period_s}")
        self.api = api
        self.node = node
        self.desired = desired
        self.period_s = period_s
        self.backoff = backoff or Backoff()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pass_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: Failed passes in a row (0: the Node showed the desired state after the last pass).
        self.failures = 0
        #: Passes that found the Node showing the desired state or made it so.
        self.passes = 0

    @property
    def in_sync(self) -> bool:
        """Whether the last pass succeeded."""
        return self.failures == 0

    def sync(self) -> bool:
        """One pass now: read the Node, write what differs from the desired state; whether it
        wrote. Raises what the API raised (the Node is left as far as it got)."""
        with self._pass_lock:
            want = self.desired()
            current = self.api.read_node(self.node)
            wrote = self.api.publish(self.node, want.labels, want.annotations, current=current)
            health = want.health
            wrote |= self.api.set_condition(
                self.node,
                GPU_HEALTH_CONDITION,
                health.status,
                health.reason,
                health.message,
                current=current,
            )
            self.passes += 1
            return wrote

    def request(self) -> None:
        """Make the Node show the desired state soon (it changed): wakes the thread."""
        self._wake.set()

    def start(self, pending: bool = False) -> NodeSync:
        """Start the thread; ``pending``: the first pass comes at once (one made before
        failed), otherwise after ``period_s``."""
        if pending:
            self.failures = max(self.failures, 1)
            self._wake.set()
        self._thread = threading.Thread(target=self._run, name="node-sync", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = self.period_s
        while not self._stop.is_set():
            self._wake.wait(delay)
            if self._stop.is_set():
                return
            # Cleared before the pass: a change arriving during it makes another.
            self._wake.clear()
            try:
                self.sync()
            except Exception as error:  # the API's, the client's, a refused label: try again
                self.failures += 1
                delay = self.backoff.delay(self.failures)
                log.warning(
                    "node %s does not show the GPUs' state yet (attempt %d failed: %s); "
                    "trying again in %.1f s",
                    self.node,
                    self.failures,
                    error,
                    delay,
                )
            else:
                if self.failures:
                    log.info("node %s shows the GPUs' state again", self.node)
                self.failures = 0
                delay = self.period_s
