"""``gpufleet admin create-token`` with an expiry and a name, ``admin tokens list`` (never the
token) and ``admin tokens revoke ID``, against the database a server uses."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.service.store import Store
from gpufleet.service.tokens import DEFAULT_LIFETIME_S, TokenRefusedError, check_token

runner = CliRunner()
DAY = 86400.0


def admin(db: Path, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["admin", *args, "--db", str(db)])
    return result.exit_code, " ".join(result.output.split())


def stored(db: Path, token: str) -> tuple[str, float | None, str]:
    store = Store(db)
    try:
        found = check_token(store, token)
    finally:
        store.close()
    return found.id, found.expires, found.name


@pytest.mark.parametrize(
    ("args", "lifetime"),
    [([], DEFAULT_LIFETIME_S), (["--expires-in", "30d"], 30 * DAY),
     (["--expires-in", "1h30m"], 5400.0), (["--no-expiry"], None)],
    ids=["default", "days", "hours-minutes", "never"],
)  # fmt: skip
def test_create_token_sets_the_expiry(
    tmp_path: Path, args: list[str], lifetime: float | None
) -> None:
    db = tmp_path / "g.db"
    code, token = admin(db, "create-token", "--tenant", "team-a", "--name", "ci bot", *args)
    assert code == 0, token
    _, expires, name = stored(db, token)
    assert name == "ci bot"
    if lifetime is None:
        assert expires is None
    else:
        assert expires == pytest.approx(time.time() + lifetime, abs=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--expires-in", "1d", "--no-expiry"], "--expires-in and --no-expiry: give one"),
        (["--expires-in", "soon"], "expected a duration"),
        (["--expires-in", "0"], "expected a lifetime above 0"),
    ],
    ids=["both", "not-a-duration", "zero"],
)
def test_create_token_refuses_a_bad_expiry(tmp_path: Path, args: list[str], message: str) -> None:
    code, output = admin(tmp_path / "g.db", "create-token", "--tenant", "team-a", *args)
    assert code == 2
    assert message in output


def test_list_shows_every_token_but_never_the_token(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    tokens = [admin(db, "create-token", "--tenant", t, "--no-expiry")[1] for t in ("a", "b")]
    code, listed = admin(db, "tokens", "list")
    assert code == 0, listed
    assert "ID TENANT ROLE NAME CREATED EXPIRES LAST USED STATE" in listed
    for token in tokens:
        token_id = stored(db, token)[0]  # now used: its last use is listed
        assert token not in listed
        assert token_id in admin(db, "tokens", "list")[1]
    assert listed.count("never") == 4  # neither expires nor was used when listed
    assert listed.count("active") == 2


def test_revoke_refuses_the_token_from_then_on(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    _, token = admin(db, "create-token", "--tenant", "team-a")
    token_id = stored(db, token)[0]
    code, output = admin(db, "tokens", "revoke", token_id[:8])
    assert code == 0, output
    assert f"token {token_id} of tenant team-a revoked" in output
    with pytest.raises(TokenRefusedError, match="was revoked"):
        stored(db, token)
    assert f"{token_id} team-a tenant - " in admin(db, "tokens", "list")[1]
    assert "revoked 20" in admin(db, "tokens", "list")[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tokens", "revoke", "abcdef"], "no token has the id abcdef"),
        (["tokens", "revoke", "xyz"], "expected a token id"),
    ],
    ids=["unknown", "not-an-id"],
)
def test_revoke_refuses_what_names_no_token(tmp_path: Path, args: list[str], message: str) -> None:
    db = tmp_path / "g.db"
    admin(db, "create-token", "--tenant", "team-a")
    code, output = admin(db, *args)
    assert code == 2
    assert message in output


@pytest.mark.parametrize("command", [["tokens", "list"], ["tokens", "revoke", "abcdef"]])
def test_list_and_revoke_make_no_database(tmp_path: Path, command: list[str]) -> None:
    code, output = admin(tmp_path / "g.db", *command)
    assert code == 2
    assert "no such database (pass --db)" in output
    assert not (tmp_path / "g.db").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "team-a", "--role", "bogus"], "role: expected one of admin, tenant, metrics"),
        (["--tenant", "Team A"], "tenant:"),
        (["--tenant", "team-a", "--queue", "Not_A_Queue"], "queue:"),
        (["--tenant", "team-a", "--expires-in", "0"], "expected a lifetime above 0"),
        (["--tenant", "team-a", "--expires-in", "soon"], "expected a duration"),
    ],
    ids=["role", "tenant", "queue", "zero-lifetime", "not-a-duration"],
)
def test_a_refused_token_creates_no_database(tmp_path: Path, args: list[str], message: str) -> None:
    code, output = admin(tmp_path / "g.db", "create-token", *args)
    assert code == 2
    assert message in output
    assert list(tmp_path.iterdir()) == []
