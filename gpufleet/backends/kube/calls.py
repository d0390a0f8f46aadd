"""The binders' calls to the API, and the fence each write passes just before it is sent.

Owns :class:`ApiCalls`: the pool of binder threads, a call run on it and counted until it has its
answer (:meth:`ApiCalls.wait_calls_answered`), the fence (:meth:`ApiCalls.fence`: a write goes
out only while its term is the current one and this replica leads, asked after the rate limit's
wait, the last moment before the request is written) and :meth:`ApiCalls.abandon`, which ends the
term when leadership is lost: nothing queued is sent after it.

Lease-based leadership is not fencing: a write already on the wire when the lease is lost still
lands. The fence narrows the window to that request, as client-go's leader election does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gpufleet.backends.kube.state import BackendState, BindCall

# The name these lines have always been logged under (before the backend was split in parts).
log = logging.getLogger("gpufleet.backends.kube.backend")


class ApiCalls:
    """Calls on the binder threads, fenced (see the module docstring)."""

    def __init__(self, state: BackendState, binders: int = 64) -> None:
        """``binders``: how many threads send calls at once."""
        self.state = state
        self._binders = ThreadPoolExecutor(max_workers=binders, thread_name_prefix="binder")
        #: API calls (binds, evictions) sent to the binders and not answered yet.
        self._calls_open = 0
        self._calls_answered = threading.Condition()

    def fence(self, term: int, call: BindCall | None = None) -> bool:
        """Whether a write decided in ``term`` may be sent now; a bind ``call`` let through is
        marked sent (under the lock a resync takes: it replays exactly the binds sent)."""
        with self.state.lock:
            if term != self.state.term or not self.state.leading():
                return False
            if call is not None:
                call.sent = True
            return True

    def abandon(self, why: str) -> None:
        """End the term: leadership is lost (or this replica must not act for another reason).
        Nothing queued is sent after this (binds, evictions, their retries), and no outcome of
        this term is handed to a core as it is; a new core starts with :meth:`resync`."""
        with self.state.lock:
            self.state.term += 1
            dropped = len(self.state.evictions_due) + len(self.state.evict_after_bind)
            self.state.evictions_due.clear()
            self.state.evict_after_bind.clear()
            self.state.checks_due.clear()
        log.warning("term ended (%s): %d queued evictions dropped", why, dropped)
        self.state.wake.set()

    def submit(self, call: Callable[..., None], *args: object) -> None:
        """``call`` on a binder thread, counted until it has its answer."""
        with self._calls_answered:
            self._calls_open += 1
        self._binders.submit(self._counted, call, *args)

    def _counted(self, call: Callable[..., None], *args: object) -> None:
        try:
            call(*args)
        finally:
            with self._calls_answered:
                self._calls_open -= 1
                self._calls_answered.notify_all()

    def wait_calls_answered(self, timeout: float) -> bool:
        """Whether every bind and eviction sent so far has its answer within ``timeout``
        seconds (its outcome queued for the next poll): a turn's writes are done."""
        with self._calls_answered:
            return self._calls_answered.wait_for(lambda: self._calls_open == 0, timeout)

    def shutdown(self) -> None:
        """Wait for the calls sent to be answered and stop the binder threads."""
        self._binders.shutdown(wait=True, cancel_futures=False)
