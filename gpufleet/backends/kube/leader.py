"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection.

Owns one replica's side of the protocol: every ``retry_period_s`` it tries to take the Lease
(when it is free, expired, or already its own) or to renew it, with optimistic concurrency (a
write from a stale resourceVersion fails with 409 and changes nothing); it leads while its last
renewal is younger than ``renew_deadline_s``, and another replica takes over once a lease is
``lease_duration_s`` old. Times are judged by this replica's own clock from when it last saw the
lease change (as client-go does), never by comparing clocks across machines. Each round's calls
have a deadline (as client-go's renewal runs under a context of ``renew_deadline_s``): while it
leads, what is left of its renew deadline, so that a frozen server or a half-open connection
cannot hold the round past the moment leadership lapses; else the renew deadline. A renewal is
dated when its call returned (a call that hung 8 s of a 10 s deadline renews for 10 s from
its answer, not for the 2 s left), but never later than its start plus ``lease_duration_s -
renew_deadline_s``: the other replicas count the lease's duration from when they saw the
write, which is no earlier than when it was sent. It does not stop anything itself: the
scheduler loop asks :meth:`LeaderElector.is_leader` before it acts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpufleet.kube_client.api import ApiError, KubeApi, micro_time

log = logging.getLogger(__name__)


class LeaderElector:
    """See the module docstring."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{retry_period_s}, {renew_deadline_s} and {lease_duration_s}"
            )
        self.api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.transitions = 0
        self._renewed_at: float | None = None
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------- state
    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.renew_deadline_s

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; a leader gives the lease up so another takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if release and self.is_leader():
            self._release()
        self._renewed_at = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except ApiError as error:
                log.info("lease %s/%s: %s", self.namespace, self.name, error)
            self._stop.wait(self.retry_period_s)

    # ----------------------------------------------------------------------------- protocol
    def _round_deadline(self, now: float) -> float:
        """When this round's calls must have been answered: the renew deadline of the last
        renewal while leading, else ``renew_deadline_s`` from now."""
        renewed = self._renewed_at
        if renewed is not None and now - renewed < self.renew_deadline_s:
            return renewed + self.renew_deadline_s
        return now + self.renew_deadline_s

    def _left(self, deadline: float) -> float:
        """Seconds left for a call before ``deadline``; an ApiError when none are."""
        left = deadline - self.clock()
        if left <= 0:
            raise ApiError(0, "Timeout", "the renew deadline passed before the call")
        return left

    def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; True when this replica holds the lease after it."""
        now = self.clock()
        deadline = self._round_deadline(now)
        lease = self.api.get_lease(self.namespace, self.name, self._left(deadline))
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(acquired=True, transitions=0),
            }
            return self._write(
                lambda: self.api.create_lease(self.namespace, body, self._left(deadline))
            )
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        observed = (holder, str(spec.get("renewTime") or ""))
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        mine = holder == self.identity
        if holder and not mine and now - self._observed_at < duration:
            self._renewed_at = None
            return False  # someone else leads and is renewing
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        lease["spec"] = {
            **spec,
            **self._spec(acquired=not mine, transitions=transitions),
        }
        if mine:
            lease["spec"]["acquireTime"] = spec.get("acquireTime") or micro_time()
        taken = self._write(
            lambda: self.api.replace_lease(self.namespace, self.name, lease, self._left(deadline))
        )
        if taken and not mine:
            self.transitions += 1
            log.info("%s now leads (lease %s/%s)", self.identity, self.namespace, self.name)
        return taken

    def _spec(self, acquired: bool, transitions: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.lease_duration_s),
            "renewTime": micro_time(),
            "leaseTransitions": transitions,
        }
        if acquired:
            spec["acquireTime"] = micro_time()
        return spec

    def _write(self, call: Callable[[], object]) -> bool:
        sent = self.clock()
        try:
            call()
        except ApiError as error:
            if error.status in (409, 422):  # someone else wrote first
                self._renewed_at = None
                return False
            raise
        latest_safe = sent + self.lease_duration_s - self.renew_deadline_s
        self._renewed_at = min(self.clock(), latest_safe)
        return True

    def _release(self) -> None:
        try:
            lease = self.api.get_lease(self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1}
            self.api.replace_lease(self.namespace, self.name, lease)
        except ApiError as error:
            log.info("could not release lease: %s", error)
