"""Tokens over their life: a token is accepted until it expires or is revoked (by this process
or another one on the same database, also after it was used), its last use is recorded at most
once a minute, and a database of schema 1 is migrated with its tokens kept, never expiring."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.io.errors import InputError
from gpufleet.service.auth import hash_token
from gpufleet.service.store import SCHEMA_VERSION, Store
from gpufleet.service.tokens import (
    DEFAULT_LIFETIME_S,
    LAST_USED_EVERY_S,
    TokenRefusedError,
    UnknownTokenError,
    check_token,
    find_token,
    make_token,
    revoke_token,
)

MADE = 1_700_000_000.0
DAY = 86400.0


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "g.db")


@dataclass(frozen=True)
class Case:
    lifetime: float | None
    #: Seconds after it was made that it is used.
    used_after: float
    #: Revoked this many seconds after it was made (None: not revoked).
    revoked_after: float | None
    #: What the refusal says (None: accepted).
    refused: str | None


CASES = {
    "fresh": Case(DEFAULT_LIFETIME_S, 1.0, None, None),
    "last-second": Case(30 * DAY, 30 * DAY - 1, None, None),
    "expired": Case(30 * DAY, 30 * DAY, None, "expired at 2023-12-14T22:13:20Z"),
    "never-expires": Case(None, 10_000 * DAY, None, None),
    "revoked": Case(None, 2.0, 1.0, "was revoked at 2023-11-14T22:13:21Z"),
    "revoked-and-expired": Case(1.0, 5.0, 2.0, "was revoked"),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_token_is_accepted_until_it_expires_or_is_revoked(store: Store, case: Case) -> None:
    token, made = make_token(store, "team-a", "tenant", lifetime=case.lifetime, now=MADE)
    if case.revoked_after is not None:
        revoke_token(store, made.id, now=MADE + case.revoked_after)
    if case.refused is None:
        assert check_token(store, token, now=MADE + case.used_after).tenant == "team-a"
    else:
        with pytest.raises(TokenRefusedError, match=case.refused) as refused:
            check_token(store, token, now=MADE + case.used_after)
        assert made.id in str(refused.value)


def test_an_unknown_token_is_invalid(store: Store) -> None:
    with pytest.raises(TokenRefusedError) as refused:
        check_token(store, "gf_never-made")
    assert str(refused.value).startswith("invalid token: ")


def test_a_token_of_another_database_is_told_where_tokens_live(
    tmp_path: Path, store: Store
) -> None:
    other = Store(tmp_path / "other.db")
    token, _ = make_token(other, "team-a", "tenant", now=MADE)
    other.close()
    with pytest.raises(TokenRefusedError) as refused:
        check_token(store, token, now=MADE + 1)
    assert "this server's database holds no such token" in str(refused.value)
    assert "tokens live in the database of the server that checks them" in str(refused.value)


@pytest.mark.parametrize("how", ["revoked", "row-deleted"])
def test_a_token_used_then_revoked_by_another_process_is_refused_at_once(
    tmp_path: Path, store: Store, how: str
) -> None:
    token, made = make_token(store, "team-a", "tenant", now=MADE)
    assert check_token(store, token, now=MADE + 1).tenant == "team-a"
    if how == "revoked":  # as `gpufleet admin tokens revoke` does, on its own connection
        other = Store(tmp_path / "g.db")
        revoke_token(other, made.id, now=MADE + 2)
        other.close()
    else:
        with sqlite3.connect(tmp_path / "g.db") as raw:
            raw.execute("DELETE FROM tokens")
    with pytest.raises(TokenRefusedError):
        check_token(store, token, now=MADE + 3)


def test_last_use_is_recorded_at_most_once_a_minute(store: Store) -> None:
    token, made = make_token(store, "team-a", "tenant", now=MADE)
    assert store.token(made.hash).last_used is None  # type: ignore[union-attr]
    uses = [
        (10.0, MADE + 10),  # the first use is recorded
        (30.0, MADE + 10),  # within the minute: not written again
        (10.0 + LAST_USED_EVERY_S, MADE + 10 + LAST_USED_EVERY_S),
    ]
    for after, recorded in uses:
        check_token(store, token, now=MADE + after)
        assert store.token(made.hash).last_used == recorded  # type: ignore[union-attr]


def test_a_refused_token_records_no_use(store: Store) -> None:
    token, made = make_token(store, "team-a", "tenant", lifetime=1.0, now=MADE)
    with pytest.raises(TokenRefusedError):
        check_token(store, token, now=MADE + 5)
    assert store.token(made.hash).last_used is None  # type: ignore[union-attr]


def test_revoking_keeps_the_first_time(store: Store) -> None:
    _, made = make_token(store, "team-a", "tenant", now=MADE)
    assert revoke_token(store, made.id, now=MADE + 1).revoked == MADE + 1
    assert revoke_token(store, made.id, now=MADE + 9).revoked == MADE + 1


@pytest.mark.parametrize(
    ("given", "error", "message"),
    [
        ("abc", InputError, "at least 6 of the 12 hex digits"),
        ("not-hex!", InputError, "expected a token id"),
        ("000000", UnknownTokenError, "no token has the id 000000"),
    ],
    ids=["too-short", "not-hex", "unknown"],
)
def test_a_token_is_named_by_its_id(
    store: Store, given: str, error: type[Exception], message: str
) -> None:
    _, made = make_token(store, "team-a", "tenant", now=MADE)
    assert find_token(store, made.id.upper()) == find_token(store, made.hash)
    with pytest.raises(error, match=message):
        find_token(store, given)


@pytest.mark.parametrize(
    ("tenant", "role", "name", "lifetime", "field"),
    [
        ("team a", "tenant", "", DAY, "tenant"),
        ("team-a", "boss", "", DAY, None),
        ("team-a", "tenant", "x" * 201, DAY, "name"),
        ("team-a", "tenant", "bell\a", DAY, "name"),
        ("team-a", "tenant", "", 0.0, "expires_in"),
        ("team-a", "tenant", "", float("inf"), "expires_in"),
    ],
    ids=["tenant", "role", "long-name", "control-character", "zero-lifetime", "infinite"],
)
def test_a_bad_token_is_not_made(
    store: Store, tenant: str, role: str, name: str, lifetime: float, field: str | None
) -> None:
    with pytest.raises(InputError) as refused:
        make_token(store, tenant, role, name=name, lifetime=lifetime)
    assert refused.value.field == field
    assert store.tokens() == []


V1_TOKENS = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tokens (
    hash TEXT PRIMARY KEY, tenant TEXT NOT NULL, role TEXT NOT NULL, queues TEXT NOT NULL,
    created REAL NOT NULL
);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def test_a_schema_1_database_keeps_its_tokens_which_never_expire(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as raw:
        raw.executescript(V1_TOKENS)
        raw.execute(
            "INSERT INTO tokens VALUES (?, 'team-a', 'tenant', ?, ?)",
            (hash_token("gf_old"), json.dumps(["shared"]), MADE),
        )
    store = Store(db)
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    (old,) = store.tokens()
    assert (old.tenant, old.queues, old.created, old.expires) == ("team-a", ("shared",), MADE, None)
    assert check_token(store, "gf_old", now=MADE + 10_000 * DAY).tenant == "team-a"
    assert "1 token(s) made before tokens had an expiry never expire" in caplog.text
    store.close()
    Store(db).close()  # migrated once: opening it again changes nothing
    assert caplog.text.count("never expire") == 1
