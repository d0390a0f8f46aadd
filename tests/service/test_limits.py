"""A tenant's write bucket: a burst, then refusals that say when to retry, refilled at the
rate; each tenant its own bucket; admins not held unless told."""

from __future__ import annotations

import pytest

from gpufleet.service.auth import Principal
from gpufleet.service.limits import RateLimitedError, TenantLimits, WriteBuckets
from gpufleet.testing.service import FakeWall

TEAM_A = Principal("team-a", "tenant")
TEAM_B = Principal("team-b", "tenant")
ADMIN = Principal("admin", "admin")


def allowed(buckets: WriteBuckets, principal: Principal, tries: int) -> int:
    """How many of ``tries`` writes at once went through."""
    taken = 0
    for _ in range(tries):
        try:
            buckets.take(principal)
        except RateLimitedError:
            continue
        taken += 1
    return taken


@pytest.mark.parametrize(
    ("limits", "principal", "expected"),
    [
        (TenantLimits(write_rate=2.0, write_burst=5), TEAM_A, 5),
        (TenantLimits(write_rate=None, write_burst=5), TEAM_A, 20),
        (TenantLimits(write_rate=2.0, write_burst=5), ADMIN, 20),
        (TenantLimits(write_rate=2.0, write_burst=5, limit_admins=True), ADMIN, 5),
    ],
    ids=["tenant", "no-rate", "admin-not-held", "admin-held-when-told"],
)
def test_a_burst_goes_through_and_no_more(
    limits: TenantLimits, principal: Principal, expected: int
) -> None:
    assert allowed(WriteBuckets(limits, FakeWall()), principal, 20) == expected


def test_over_the_rate_a_write_says_when_to_retry_and_then_goes_through() -> None:
    wall = FakeWall()
    buckets = WriteBuckets(TenantLimits(write_rate=2.0, write_burst=3), wall)
    assert allowed(buckets, TEAM_A, 3) == 3
    with pytest.raises(RateLimitedError, match="may write 2 times a second") as refused:
        buckets.take(TEAM_A)
    assert refused.value.retry_after == pytest.approx(0.5)
    wall.now += 0.25  # half way: still refused, sooner
    with pytest.raises(RateLimitedError) as refused:
        buckets.take(TEAM_A)
    assert refused.value.retry_after == pytest.approx(0.25)
    wall.now += 0.25
    buckets.take(TEAM_A)
    wall.now += 3600  # a long quiet time refills the bucket to its size, no more
    assert allowed(buckets, TEAM_A, 10) == 3


def test_each_tenant_has_its_own_bucket() -> None:
    buckets = WriteBuckets(TenantLimits(write_rate=1.0, write_burst=2), FakeWall())
    assert allowed(buckets, TEAM_A, 5) == 2
    assert allowed(buckets, TEAM_B, 5) == 2
    assert allowed(buckets, Principal("team-a", "tenant", ("shared",)), 1) == 0  # another token
