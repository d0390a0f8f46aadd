"""Tokens through the API: an expired or revoked token gets a 401 that says so, from the next
request on even when it was revoked by another process (``gpufleet admin tokens revoke``);
admins make tokens with an expiry and a name, list them (never the token) and revoke them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpufleet.service.store import Store
from gpufleet.service.tokens import DEFAULT_LIFETIME_S, make_token, revoke_token
from gpufleet.testing.service import ServiceHarness, make_harness

DAY = 86400.0


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(tmp_path)


def use(harness: ServiceHarness, token: str) -> tuple[int, str]:
    response = harness.client("nobody").get(
        "/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}
    )
    return response.status_code, response.json().get("message", "")


@pytest.mark.parametrize(
    ("made_ago", "lifetime", "revoked", "status", "message"),
    [
        (DAY, 2 * DAY, False, 200, ""),
        (2 * DAY, DAY, False, 401, "expired at"),
        (DAY, None, True, 401, "was revoked at"),
    ],
    ids=["valid", "expired", "revoked"],
)
def test_an_expired_or_revoked_token_is_refused_saying_why(
    harness: ServiceHarness,
    made_ago: float,
    lifetime: float | None,
    revoked: bool,
    status: int,
    message: str,
) -> None:
    token, made = make_token(
        harness.store, "team-a", "tenant", lifetime=lifetime, now=time.time() - made_ago
    )
    if revoked:
        revoke_token(harness.store, made.id)
    code, said = use(harness, token)
    assert code == status, said
    assert message in said
    if status == 401:
        assert made.id in said


def test_a_token_revoked_by_the_admin_command_is_refused_while_the_server_runs(
    harness: ServiceHarness,
) -> None:
    token = harness.tokens["team-a"]
    assert use(harness, token)[0] == 200  # used: a server that remembers it would go on
    (made,) = [t for t in harness.store.tokens() if t.tenant == "team-a"]
    other = Store(harness.db)  # the admin command's own connection, as another process has
    revoke_token(other, made.id)
    other.close()
    code, said = use(harness, token)
    assert code == 401
    assert f"token {made.id} was revoked" in said


def test_a_use_is_recorded_as_the_last_use(harness: ServiceHarness) -> None:
    before = time.time()
    assert use(harness, harness.tokens["team-b"])[0] == 200
    (made,) = [t for t in harness.store.tokens() if t.tenant == "team-b"]
    assert made.last_used is not None
    assert made.last_used >= before


def test_admin_makes_lists_and_revokes_tokens(harness: ServiceHarness) -> None:
    admin = harness.client("admin")
    made = admin.post("/api/v1/tokens?tenant=team-c&name=ci&expires_in=30d").json()
    assert made["expires"] == pytest.approx(time.time() + 30 * DAY, abs=60)
    assert made["name"] == "ci"
    forever = admin.post("/api/v1/tokens?tenant=team-d&expires_in=never").json()
    assert forever["expires"] is None
    default = admin.post("/api/v1/tokens?tenant=team-e").json()
    assert default["expires"] == pytest.approx(time.time() + DEFAULT_LIFETIME_S, abs=60)
    listed = admin.get("/api/v1/tokens").json()
    # "prometheus": the harness's scrape token (role metrics)
    assert {t["tenant"] for t in listed} == {"admin", "team-a", "team-b", "team-c", "team-d",
                                             "team-e", "prometheus"}  # fmt: skip
    assert all("token" not in t and not any("gf_" in str(v) for v in t.values()) for t in listed)
    revoked = admin.delete(f"/api/v1/tokens/{made['id']}")
    assert revoked.status_code == 200
    assert revoked.json()["revoked"] is not None
    assert use(harness, made["token"])[0] == 401
    assert use(harness, forever["token"])[0] == 200


@pytest.mark.parametrize(
    ("method", "path", "who", "status"),
    [
        ("GET", "/api/v1/tokens", "team-a", 403),
        ("DELETE", "/api/v1/tokens/000000", "team-a", 403),
        ("DELETE", "/api/v1/tokens/000000", "admin", 404),
        ("DELETE", "/api/v1/tokens/xyz", "admin", 422),
        ("POST", "/api/v1/tokens?tenant=c&expires_in=soon", "admin", 422),
        ("POST", "/api/v1/tokens?tenant=c&expires_in=0s", "admin", 422),
    ],
    ids=["tenant-lists", "tenant-revokes", "unknown-id", "bad-id", "bad-expiry", "zero-expiry"],
)
def test_token_routes_refuse(
    harness: ServiceHarness, method: str, path: str, who: str, status: int
) -> None:
    assert harness.client(who).request(method, path).status_code == status
