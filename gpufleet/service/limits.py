"""What one tenant may hold and how fast it may write, so that a shared server survives a
hostile or careless one: at most so many unfinished workloads and pods, and writes (POST, PUT,
DELETE) from a token bucket per tenant, kept in memory.

Over an object limit a submission is refused with 403 ``exceeded quota``, as the Kubernetes API
server refuses an object over a namespace's ResourceQuota: waiting a given time does not end it
(a workload finishing or being deleted does), so there is no honest Retry-After, and a client
that retries 429s by itself would only spin. Over the rate a request gets 429 with
Retry-After, the seconds until the bucket holds a token again. Admins are not limited unless
told (:attr:`TenantLimits.limit_admins`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufleet.service.auth import ForbiddenError, Principal
from gpufleet.service.records import WorkloadRecord

#: Defaults a normal team never reaches and a shared server survives: 1,000 unfinished
#: workloads of 10,000 pods, 10 writes a second with bursts of 50, per tenant.
DEFAULT_MAX_ACTIVE_WORKLOADS = 1000
DEFAULT_MAX_ACTIVE_PODS = 10_000
DEFAULT_WRITE_RATE = 10.0
DEFAULT_WRITE_BURST = 50


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """Per-tenant limits; None: that one is off."""

    max_active_workloads: int | None = DEFAULT_MAX_ACTIVE_WORKLOADS
    max_active_pods: int | None = DEFAULT_MAX_ACTIVE_PODS
    #: Writes a second a tenant's bucket refills with.
    write_rate: float | None = DEFAULT_WRITE_RATE
    #: Writes a tenant may make at once (the bucket's size).
    write_burst: int = DEFAULT_WRITE_BURST
    limit_admins: bool = False

    def applies_to(self, principal: Principal) -> bool:
        return self.limit_admins or not principal.is_admin


class QuotaExceededError(ForbiddenError):
    """A submission would take the tenant over an object limit (a 403)."""


class RateLimitedError(Exception):
    """Too many writes: a 429, to be retried after :attr:`retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def check_active(
    limits: TenantLimits,
    principal: Principal,
    records: Iterable[WorkloadRecord],
    new_workloads: int,
    new_pods: int,
) -> None:
    """QuotaExceededError if ``new_workloads`` workloads of ``new_pods`` pods would take the
    caller's tenant over its limits, counting its unfinished ``records``."""
    if not limits.applies_to(principal):
        return
    held = [r for r in records if r.active and r.tenant == principal.tenant]
    counts = (
        ("workloads", limits.max_active_workloads, len(held), new_workloads, "workloads"),
        ("pods", limits.max_active_pods, sum(len(r.pods) for r in held), new_pods, "pods"),
    )
    for what, limit, holding, adding, flag in counts:
        if limit is not None and holding + adding > limit:
            raise QuotaExceededError(
                f"exceeded quota: tenant {principal.tenant!r} has {holding} unfinished {what} "
                f"and this adds {adding}, over its limit of {limit} "
                f"(gpufleet serve --max-active-{flag}): wait for some to finish or delete some"
            )


class WriteBuckets:
    """A token bucket per tenant: ``rate`` tokens a second, holding at most ``burst``
    (thread-safe; times from ``clock``, in seconds)."""

    def __init__(self, limits: TenantLimits, clock: Callable[[], float]) -> None:
        self.limits = limits
        self._clock = clock
        self._lock = threading.Lock()
        #: tenant -> (tokens left, when counted)
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, principal: Principal) -> None:
        """Take one write from the caller's tenant's bucket, or RateLimitedError."""
        rate = self.limits.write_rate
        if rate is None or not self.limits.applies_to(principal):
            return
        burst = float(self.limits.write_burst)
        now = self._clock()
        with self._lock:
            left, counted = self._buckets.get(principal.tenant, (burst, now))
            left = min(burst, left + max(0.0, now - counted) * rate)
            if left >= 1.0:
                self._buckets[principal.tenant] = (left - 1.0, now)
                return
            self._buckets[principal.tenant] = (left, now)
        wait = (1.0 - left) / rate
        raise RateLimitedError(
            f"too many requests: tenant {principal.tenant!r} may write {rate:g} times a second "
            f"(bursts of {self.limits.write_burst}); retry in {math.ceil(wait)} s",
            wait,
        )
