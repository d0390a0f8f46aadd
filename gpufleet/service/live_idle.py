"""What the idle policies' steps do on a live plane (the simulated cluster, this machine).

Owns :class:`LiveIdleActions`, the live planes' :class:`~gpufleet.service.capabilities.
IdleActions`, given their :class:`~gpufleet.service.live_state.LiveState`: Stop cancels the
workload as a cancel through the API does (its Cancelled event names the policy; a local run
gets SIGTERM, the grace, SIGKILL); Preemptible lowers it in the core (the world tells the
core, which may let waiting work preempt it); ScaleToZero stops it (no replica controllers
here, said in its event); Checkpoint is its event alone (a world with no annotation to set:
``checkpoint_note`` says what happens instead, where there is something to say).
"""

from __future__ import annotations

from gpufleet.model.priorities import LOWEST_PRIORITY
from gpufleet.service.live_state import LiveState
from gpufleet.service.plane_book import IdleOutcome
from gpufleet.service.records import POD_RUNNING


class LiveIdleActions:
    """See the module docstring."""

    def __init__(self, state: LiveState, checkpoint_note: str = "") -> None:
        self.state = state
        self.checkpoint_note = checkpoint_note

    def stop_idle(self, key: str, by: str) -> IdleOutcome:
        """Cancel the running workload ``key`` for the idle policy ``by``, as a cancel through
        the API does (its Cancelled event names the policy)."""
        with self.state.book.lock:
            record = self.state.book.records.get(key)
        if record is None or not self.state.cancel_active(
            record, f"by IdlePolicy {by} (idle GPUs)"
        ):
            return IdleOutcome(note="it had ended already")
        return IdleOutcome()

    def scale_to_zero(self, key: str, by: str) -> IdleOutcome:
        """No replica controllers here: the workload is stopped instead, and said so."""
        done = self.stop_idle(key, by)
        note = "no replica controller here: stopped instead"
        return IdleOutcome(done.done, f"{note}; {done.note}" if done.note else note)

    def request_checkpoint(self, key: str, at: float) -> IdleOutcome:
        """The step's event is the request (no annotation to set here)."""
        return IdleOutcome(note=self.checkpoint_note)

    def demote(self, key: str) -> IdleOutcome:
        """Lower the running workload ``key`` to preemptible at the lowest priority: the
        world tells the core, which may let waiting work preempt it."""
        with self.state.book.lock:
            record = self.state.book.records.get(key)
            running = (
                []
                if record is None
                else [pod_key for pod_key, pod in record.pods.items() if pod.state == POD_RUNNING]
            )
            if not running or not self.state.world.demote(running, "idle policy: Preemptible"):
                return IdleOutcome(False, "it has no running pods")
        return IdleOutcome(note=f"lowered to preemptible at priority {LOWEST_PRIORITY}")
