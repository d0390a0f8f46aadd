"""API tokens over their life: made with an expiry, checked on every request, listed, revoked,
and when each was last used.

A token is a random 256-bit string shown once; the store keeps its SHA-256 only, with its
tenant, role, extra queues, a name, when it was made, when it expires (None: never), when it
was last used and when it was revoked. People name a token by its id, the first
:data:`~gpufleet.service.store.TOKEN_ID_LENGTH` hex digits of its hash (which tell nothing of
the token).

Every request reads the token's row (a primary-key lookup on the store's token connection),
so a token revoked or deleted by anyone, ``gpufleet admin tokens revoke`` in another process
included, is refused from the next request on; nothing is cached. The last-used time is
written at most once per :data:`LAST_USED_EVERY_S` per token, not on every request.
"""

from __future__ import annotations

import datetime
import logging
import math
import re
import sqlite3
import time
from collections.abc import Sequence

from gpufleet.io.errors import InputError, quoted
from gpufleet.io.names import label_value_problem, name_problem, rule_of
from gpufleet.model.queues import TENANT_LABEL
from gpufleet.service.auth import ROLES, hash_token, new_token
from gpufleet.service.store import TOKEN_ID_LENGTH, Store, StoredToken

log = logging.getLogger(__name__)

#: How long a new token lasts unless told otherwise.
DEFAULT_LIFETIME_S = 90 * 86400.0
#: A token's last-used time is written at most this often.
LAST_USED_EVERY_S = 60.0
#: The shortest id prefix a token may be named by.
MIN_ID_LENGTH = 6
MAX_NAME_LENGTH = 200
_HEX = re.compile(r"[0-9a-f]+")
#: Why a token is unknown, where it is most often so: it was made against another database.
#: (The database's file is not named: the caller is not authenticated.)
UNKNOWN_TOKEN = (
    "invalid token: this server's database holds no such token (tokens live in the database "
    "of the server that checks them: one made with `gpufleet admin create-token --db` against "
    "another database, or another server's, is unknown here)"
)


class TokenRefusedError(Exception):
    """The token is unknown, expired or revoked (a 401); the message says which."""


class UnknownTokenError(LookupError):
    """No token, or more than one, has the id given."""

    def __init__(self, message: str, ambiguous: bool = False) -> None:
        super().__init__(message)
        self.ambiguous = ambiguous


def instant(seconds: float) -> str:
    """A time as people read it in lists and messages: ``2026-03-01T12:00:00Z``."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_token(
    store: Store,
    tenant: str,
    role: str,
    queues: Sequence[str] = (),
    *,
    name: str = "",
    lifetime: float | None = DEFAULT_LIFETIME_S,
    now: float | None = None,
) -> tuple[str, StoredToken]:
    """Make a token for ``tenant`` with ``role`` that expires ``lifetime`` seconds from now
    (None: never); returns it (shown once, only its hash is stored) and what is stored. The
    tenant's name is a label value (``gpufleet.dev/tenant`` on its pods), each queue's a Queue
    name (checked first: :func:`check_token_request`)."""
    check_token_request(tenant, role, queues, name=name, lifetime=lifetime)
    made = time.time() if now is None else now
    expires = None if lifetime is None else made + lifetime
    token = new_token()
    stored = StoredToken(hash_token(token), tenant, role, tuple(queues), made, name, expires)
    store.add_token(stored.hash, tenant, role, list(queues), made, name, expires)
    return token, stored


def check_token_request(
    tenant: str,
    role: str,
    queues: Sequence[str] = (),
    *,
    name: str = "",
    lifetime: float | None = DEFAULT_LIFETIME_S,
) -> None:
    """InputError if :func:`make_token` would refuse these (before any database is opened)."""
    if role not in ROLES:
        raise InputError("token", f"role: expected one of {', '.join(ROLES)}, got {quoted(role)}")
    problem = label_value_problem(tenant) if tenant else "must not be empty"
    if problem is not None:
        raise InputError(
            "token", f"{problem} (it becomes the label {TENANT_LABEL}); got {quoted(tenant)}",
            field="tenant",
        )  # fmt: skip
    for queue in queues:
        problem = name_problem(queue, rule_of("Queue"), "Queue")
        if problem is not None:
            raise InputError("token", f"{problem}; got {quoted(queue)}", field="queue")
    if len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise InputError(
            "token", f"expected at most {MAX_NAME_LENGTH} printable characters", field="name"
        )
    if lifetime is not None and not (math.isfinite(lifetime) and lifetime > 0):
        raise InputError(
            "token", f"expected a lifetime above 0, got {lifetime:g} seconds", field="expires_in"
        )


def create_token(
    store: Store,
    tenant: str,
    role: str,
    queues: Sequence[str] = (),
    *,
    name: str = "",
    lifetime: float | None = DEFAULT_LIFETIME_S,
) -> str:
    """:func:`make_token`, the token only."""
    return make_token(store, tenant, role, queues, name=name, lifetime=lifetime)[0]


def check_token(store: Store, token: str, now: float | None = None) -> StoredToken:
    """The stored token ``token`` is, if it may be used at ``now`` (default: the time now),
    with its last-used time recorded; else :class:`TokenRefusedError` saying why."""
    at = time.time() if now is None else now
    found = store.token(hash_token(token))
    if found is None:
        raise TokenRefusedError(UNKNOWN_TOKEN)
    if found.revoked is not None:
        raise TokenRefusedError(
            f"token {found.id} was revoked at {instant(found.revoked)}: ask an admin for a new one"
        )
    if found.expires is not None and at >= found.expires:
        raise TokenRefusedError(
            f"token {found.id} expired at {instant(found.expires)}: ask an admin for a new one"
        )
    if found.last_used is None or at - found.last_used >= LAST_USED_EVERY_S:
        try:
            store.touch_token(found.hash, at)
        except sqlite3.OperationalError as error:  # busy: the next request tries again
            log.debug("last use of token %s not recorded: %s", found.id, error)
    return found


def find_token(store: Store, token_id: str) -> StoredToken:
    """The one token whose id starts with ``token_id`` (at least :data:`MIN_ID_LENGTH` hex
    digits), else InputError or :class:`UnknownTokenError`."""
    wanted = token_id.strip().lower()
    if not _HEX.fullmatch(wanted) or not MIN_ID_LENGTH <= len(wanted) <= 64:
        raise InputError(
            "token",
            f"expected a token id: at least {MIN_ID_LENGTH} of the {TOKEN_ID_LENGTH} hex digits "
            f"`gpufleet admin tokens list` shows, got {quoted(token_id)}",
            field="id",
        )
    found = store.tokens_with_id(wanted)
    if not found:
        raise UnknownTokenError(f"no token has the id {wanted}")
    if len(found) > 1:
        ids = ", ".join(t.id for t in found)
        raise UnknownTokenError(f"the id {wanted} names several tokens ({ids}): give more of it",
                                ambiguous=True)  # fmt: skip
    return found[0]


def revoke_token(store: Store, token_id: str, now: float | None = None) -> StoredToken:
    """Revoke the token named by ``token_id`` (see :func:`find_token`); it is refused from
    the next request on, in every server on the database. Returns it as stored now (a token
    revoked already keeps its first revocation time)."""
    found = find_token(store, token_id)
    store.revoke_token(found.hash, time.time() if now is None else now)
    revoked = store.token(found.hash)
    if revoked is None:  # deleted meanwhile
        raise UnknownTokenError(f"no token has the id {found.id}")
    return revoked
