"""Who a tenant's processes run as on the local machine (``gpufleet serve --local --run-as``).

Owns :class:`TenantUsers`: a map from the API's tenants (a token's tenant) to local users, given
as ``TENANT=USER`` (a user name or a numeric uid), read once at start with the user database
(``pwd``). The rule:

* the server runs as root: a tenant's processes run as its user, with that user's primary
  group, in a root owned by that user; a tenant with no user is refused (403), and so is a
  user that is root itself (the supervisor never runs a tenant's process as root); whether
  they can be hidden from the other users' is :mod:`.local_isolation`'s;
* the server runs as anyone else: it can only run processes as itself, so every tenant's
  processes run as the server's user (tenants are kept apart by the API, which shows and
  signals each tenant's workloads only, not by the operating system); ``--run-as`` may only
  name that user;
* ``allow_root`` (``--allow-root``, for a box whose only user is root, a container): a tenant
  with no user runs as the server, root included.

It starts nothing and checks no files: the supervisor enforces the same rule when it starts a
process (:meth:`gpufleet.backends.local.supervisor.Supervisor.check`). :func:`login_env` is
what a process learns of its user from its environment (``USER``, ``LOGNAME``), as ``login``
and ``sshd`` set them.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence

from gpufleet.io.errors import InputError, quoted
from gpufleet.service.auth import ForbiddenError

#: Where errors about ``--run-as`` point.
RUN_AS = "--run-as"


def login_env(uid: int | None) -> dict[str, str]:
    """``USER`` and ``LOGNAME``: the name of the user ``uid`` (None: the server's own) that a
    run starts as; none for a uid with no name in the user database (a container's arbitrary
    uid), as ``login`` sets none."""
    try:
        name = pwd.getpwuid(os.geteuid() if uid is None else uid).pw_name
    except KeyError:
        return {}
    return {"USER": name, "LOGNAME": name}


class TenantUsers:
    """See the module docstring."""

    def __init__(
        self,
        users: dict[str, tuple[int, int]] | None = None,
        euid: int | None = None,
        allow_root: bool = False,
    ) -> None:
        self.euid = os.geteuid() if euid is None else euid
        self.users = dict(users or {})
        self.allow_root = allow_root
        for tenant, (uid, _gid) in self.users.items():
            if self.euid == 0 and uid == 0:
                raise InputError(
                    RUN_AS, f"tenant {tenant}: refusing to run a tenant's processes as root"
                )
            if self.euid != 0 and uid != self.euid:
                raise InputError(
                    RUN_AS,
                    f"tenant {tenant}: the server runs as uid {self.euid} and can run "
                    f"processes only as itself, not as uid {uid} (run it as root for that)",
                )

    @classmethod
    def parse(
        cls, items: Sequence[str], euid: int | None = None, allow_root: bool = False
    ) -> TenantUsers:
        """``TENANT=USER`` items (USER: a name or a uid) into a map; InputError naming the
        item at fault."""
        users: dict[str, tuple[int, int]] = {}
        for item in items:
            tenant, sep, user = item.partition("=")
            if not sep or not tenant or not user:
                raise InputError(RUN_AS, f"expected TENANT=USER, got {quoted(item)}")
            try:
                entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
            except KeyError:
                raise InputError(
                    RUN_AS, f"no local user {quoted(user)} (in {quoted(item)})"
                ) from None
            users[tenant] = (entry.pw_uid, entry.pw_gid)
        return cls(users, euid, allow_root)

    def identity(self, tenant: str) -> tuple[int | None, int | None]:
        """(uid, gid) the tenant's processes run as; (None, None): the server's own."""
        if tenant in self.users:
            uid, gid = self.users[tenant]
            if self.euid != 0:
                return None, None  # itself (checked at start)
            return uid, gid
        if self.euid == 0 and not self.allow_root:
            raise ForbiddenError(
                f"tenant {tenant!r} has no local user to run as: the server runs as root and "
                f"runs no tenant's process as root (start it with --run-as {tenant}=USER)"
            )
        return None, None
