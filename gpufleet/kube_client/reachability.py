"""Whether the API server answers, as all the calls of one client see it together.

Owns :class:`Reachability`: every call a client makes reports its outcome here (answered, or
failed with an HTTP code or with no answer at all: refused, reset, timed out), so that

* an outage is told in two log lines, not one per call and thread: ``API server unreachable
  since T`` at the first call that gets no answer, ``API server reachable again after N s`` at
  the first that does (client-go's reflectors and kube-scheduler stay as quiet);
* errors are counted by verb and code for ``gpufleet_api_errors_total`` (code ``<error>`` for
  no answer, as client-go's ``rest_client_requests_total`` labels it);
* whoever backs off after a failure (an informer) can wait on :meth:`Reachability.wait_recovered`
  and try again, its back-off reset, as soon as any call sees the server answer again, rather
  than sleep out a back-off grown during the outage.

It makes no calls and imports no client (the node agent's client reports here too).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from gpufleet.kube_client.api_types import ApiError, rfc3339

log = logging.getLogger(__name__)

#: The ``code`` label of a call that got no answer.
NO_ANSWER = "<error>"


class Reachability:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        name: str = "API server",
        quiet_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``quiet_s``: an outage that begins within this long of the last one told is
        counted but not told (a flapping connection is not two lines a flap)."""
        self.name = name
        self.quiet_s = quiet_s
        self.clock = clock
        self.wall_clock = wall_clock
        #: Errors by (verb, code); code :data:`NO_ANSWER` when nothing came back.
        self.errors: Counter[tuple[str, str]] = Counter()
        #: Incremented each time the server answers after an outage.
        self.recoveries = 0
        self._down_since: float | None = None
        self._failed_while_down = 0
        self._told_at: float | None = None  # when an outage was last told
        self._telling = False  # whether this outage is told
        self._untold = 0  # outages not told since the last one told
        self._changed = threading.Condition()

    @property
    def reachable(self) -> bool:
        return self._down_since is None

    def answered(self) -> None:
        """A call got an answer (any HTTP status)."""
        if self._down_since is None:  # the common case, without the lock
            return
        with self._changed:
            if self._down_since is None:
                return
            down_for = self.clock() - self._down_since
            failed = self._failed_while_down
            telling = self._telling
            self._down_since = None
            self._failed_while_down = 0
            self.recoveries += 1
            self._changed.notify_all()
        if telling:
            log.warning(
                "%s reachable again after %.1f s (%d calls failed meanwhile)",
                self.name,
                down_for,
                failed,
            )

    def failed(self, verb: str, error: ApiError) -> None:
        """A call failed: with ``error.status`` from the server, or (0) with no answer."""
        code = str(error.status) if error.status else NO_ANSWER
        with self._changed:
            self.errors[(verb, code)] += 1
            if not error.status and self._down_since is not None:
                self._failed_while_down += 1
                return
            if not error.status:
                now = self._down_since = self.clock()
                self._failed_while_down = 1
                self._telling = self._told_at is None or now - self._told_at >= self.quiet_s
                if not self._telling:
                    self._untold += 1
                    return
                self._told_at = now
                untold, self._untold = self._untold, 0
        if error.status:  # the server answered: it is reachable, whatever it said
            self.answered()
            return
        first_line = error.message.splitlines()[0] if error.message else ""
        log.warning(
            "%s unreachable since %s (%s: %s)%s; retrying quietly until it answers",
            self.name,
            rfc3339(self.wall_clock()),
            verb,
            first_line[:300],
            f" ({untold} shorter outages before it not told)" if untold else "",
        )

    def error_counts(self) -> dict[tuple[str, str], int]:
        """A copy of :attr:`errors` (for a scrape, while calls go on)."""
        with self._changed:
            return dict(self.errors)

    def wait_recovered(
        self, seen: int, timeout: float, until: Callable[[], bool] = lambda: False
    ) -> bool:
        """Wait up to ``timeout`` seconds until :attr:`recoveries` passes ``seen`` (the server
        answered again after an outage) or ``until`` holds (checked when :meth:`wake` is
        called); whether the server answered."""
        with self._changed:
            self._changed.wait_for(lambda: self.recoveries > seen or until(), timeout)
            return self.recoveries > seen

    def wake(self) -> None:
        """Wake every waiter now, to check its ``until`` (one shutting down)."""
        with self._changed:
            self._changed.notify_all()
