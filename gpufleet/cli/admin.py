"""``gpufleet admin``: the API tokens of a control plane, managed on its host against its
database (``create-token``, ``tokens list``, ``tokens revoke``), and ``backup``, a consistent
copy of the database (``service/backup``: SQLite's online backup API).

These write the database directly, also while ``gpufleet serve`` runs on it: the server reads
a token's row on every request, so a revoked token is refused from its next request on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.inputs import console, fail, friendly_errors, parse_duration
from gpufleet.cli.tables import show
from gpufleet.service.auth import ROLES
from gpufleet.service.backup import BackupError, backup_database
from gpufleet.service.store import Store, StoredToken, StoreError
from gpufleet.service.tokens import (
    DEFAULT_LIFETIME_S,
    UnknownTokenError,
    check_token_request,
    instant,
    make_token,
    revoke_token,
)

DEFAULT_DB = Path("gpufleet.db")

admin = typer.Typer(help="Administer a control plane's database (on its host).")
tokens = typer.Typer(help="List and revoke API tokens.")
admin.add_typer(tokens, name="tokens")

DbOption = Annotated[Path, typer.Option(help="the control plane's database")]


def _open(db: Path, create: bool = False) -> Store:
    if not create and not db.exists():
        raise fail(f"{db}: no such database (pass --db)")
    try:
        return Store(db)
    except StoreError as error:
        raise fail(str(error)) from None


@admin.command("create-token")
@friendly_errors
def create_token_command(
    tenant: Annotated[str, typer.Option(help="the team the token acts for")],
    role: Annotated[str, typer.Option(help=f"one of {', '.join(ROLES)}")] = "tenant",
    queue: Annotated[
        list[str] | None,
        typer.Option(help="a queue it may submit to, beyond its own (repeatable)"),
    ] = None,
    name: Annotated[
        str, typer.Option(help="what it is for, shown by `gpufleet admin tokens list`")
    ] = "",
    expires_in: Annotated[
        str | None,
        typer.Option(
            help=f"how long it lasts: 30d, 12h, 90m (default {DEFAULT_LIFETIME_S / 86400:g}d)"
        ),
    ] = None,
    no_expiry: Annotated[
        bool, typer.Option("--no-expiry", help="it never expires (revoke it when done)")
    ] = False,
    db: DbOption = DEFAULT_DB,
) -> None:
    """Make an API token and print it (only its hash is stored: keep it now)."""
    if no_expiry and expires_in is not None:
        raise fail("--expires-in and --no-expiry: give one")
    lifetime = (
        None
        if no_expiry
        else (DEFAULT_LIFETIME_S if expires_in is None else parse_duration(expires_in))
    )
    # Checked before the database is opened: a refused token creates no database file.
    check_token_request(tenant, role, queue or [], name=name, lifetime=lifetime)
    store = _open(db, create=True)
    try:
        token, _ = make_token(store, tenant, role, queue or [], name=name, lifetime=lifetime)
        store.set_meta("tokens", "1")
    finally:
        store.close()
    print(token)


@admin.command("backup")
@friendly_errors
def backup_command(
    out: Annotated[Path, typer.Argument(metavar="OUT", help="the copy: a new file")],
    db: DbOption = DEFAULT_DB,
) -> None:
    """Copy the database to OUT, consistently, also while `gpufleet serve` runs on it."""
    try:
        size = backup_database(db, out)
    except BackupError as error:
        raise fail(escape(str(error))) from None
    console.print(f"{escape(str(db))} copied to {escape(str(out))} ({size} bytes)")


@tokens.command("list")
@friendly_errors
def list_command(db: DbOption = DEFAULT_DB) -> None:
    """Every token: its id, tenant, role, name and times (never the token itself)."""
    store = _open(db)
    try:
        found = store.tokens()
    finally:
        store.close()
    if not found:
        console.print(f"no tokens in {escape(str(db))}")
        return
    show(tokens_table(found, time.time()))


@tokens.command("revoke")
@friendly_errors
def revoke_command(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="its id, from `tokens list`")],
    db: DbOption = DEFAULT_DB,
) -> None:
    """Revoke a token: a running server refuses it from its next request on."""
    store = _open(db)
    try:
        revoked = revoke_token(store, token_id)
    except UnknownTokenError as error:
        raise fail(str(error)) from None
    finally:
        store.close()
    assert revoked.revoked is not None
    console.print(
        f"token {revoked.id} of tenant {escape(revoked.tenant)} revoked "
        f"(at {instant(revoked.revoked)})"
    )


def tokens_table(found: list[StoredToken], now: float) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("ID", "TENANT", "ROLE", "NAME", "CREATED", "EXPIRES", "LAST USED", "STATE"):
        table.add_column(column, no_wrap=column != "NAME", overflow="fold")
    for token in found:
        table.add_row(
            token.id,
            escape(token.tenant),
            token.role,
            escape(token.name) or "-",
            instant(token.created),
            "never" if token.expires is None else instant(token.expires),
            "never" if token.last_used is None else instant(token.last_used),
            _state(token, now),
        )
    return table


def _state(token: StoredToken, now: float) -> str:
    if token.revoked is not None:
        return f"revoked {instant(token.revoked)}"
    if token.expires is not None and now >= token.expires:
        return "expired"
    return "active"
