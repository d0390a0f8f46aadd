"""A run of ``serve --local`` knows its user as a login shell does: ``USER`` and ``LOGNAME``
name the Unix user it runs as (a tenant's ``--run-as`` user, else the server's), and ``HOME``
is the tenant's directory; a uid with no name gets neither, and a manifest's own ``env`` still
wins, as in Kubernetes."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.model.inventory import NodeInventory
from gpufleet.service.local_users import TenantUsers, login_env
from gpufleet.testing.local_service import TENANT, LocalHarness
from tests.service.local.test_local_plane import pod, printed, report, seen, tenant_dir

NOBODY = 65534
SERVER = pwd.getpwuid(os.geteuid()).pw_name
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root runs tenants' processes as other users"
)


def unnamed_uid() -> int:
    names = {entry.pw_uid for entry in pwd.getpwall()}
    return next(uid for uid in range(4_000_000, 4_001_000) if uid not in names)


@pytest.mark.parametrize(
    ("uid", "expected"),
    [
        (None, {"USER": SERVER, "LOGNAME": SERVER}),
        (os.geteuid(), {"USER": SERVER, "LOGNAME": SERVER}),
        (unnamed_uid(), {}),
    ],
    ids=["the-servers-user", "a-named-uid", "a-uid-with-no-name"],
)
def test_login_env_names_the_runs_user(uid: int | None, expected: dict[str, str]) -> None:
    assert login_env(uid) == expected


@pytest.fixture
def as_nobody(eight_gpus: NodeInventory, state_root: Path) -> Iterator[LocalHarness]:
    users = TenantUsers({TENANT: (NOBODY, NOBODY)}, euid=0)
    made = LocalHarness.start(eight_gpus, state_root, users=users)
    yield made
    made.shut_down()


def test_a_run_as_the_servers_user_sees_its_name_and_home(harness: LocalHarness) -> None:
    assert harness.submit(pod("mine", report(harness, "0")))["status"] == 201
    harness.run_until(printed(harness, "mine"))
    found = seen(harness, "mine")
    assert (found["USER"], found["LOGNAME"]) == (SERVER, SERVER)
    assert found["HOME"] == str(tenant_dir(harness))


def test_the_manifests_own_env_wins(harness: LocalHarness) -> None:
    env = [{"name": "USER", "value": "someone-else"}]
    assert harness.submit(pod("mine", report(harness, "0"), env=env))["status"] == 201
    harness.run_until(printed(harness, "mine"))
    assert (seen(harness, "mine")["USER"], seen(harness, "mine")["LOGNAME"]) == (
        "someone-else",
        SERVER,
    )


@needs_root
def test_a_run_as_a_tenants_user_is_given_that_users_name(as_nobody: LocalHarness) -> None:
    name = pwd.getpwuid(NOBODY).pw_name
    assert as_nobody.submit(pod("theirs", ["/bin/true"]))["status"] == 201
    [specs] = as_nobody.store.processes().values()
    [spec] = specs.values()
    assert (spec.uid, spec.env["USER"], spec.env["LOGNAME"]) == (NOBODY, name, name)
    assert spec.env["HOME"] == str(as_nobody.machine.tenant_root(TENANT))
