"""``serve --local`` starts only where each tenant's processes can be hidden from the others',
or where the operator said they need not be (``--shared-proc``): the rule, with a probe given
in place of the machine's (the real probe: tests/backends/local/test_proc_hiding.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet.backends.local.cgroups import Hierarchy
from gpufleet.io.errors import InputError
from gpufleet.service.local_isolation import check_process_hiding, check_resource_limits
from gpufleet.service.local_users import TenantUsers

REFUSAL = "cannot hide other users' processes: unshare(CLONE_NEWNS): Operation not permitted"


@dataclass
class FakeProbe:
    """Answers ``answer``; remembers whom it was asked about."""

    answer: str | None
    asked: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, uid: int, gid: int) -> str | None:
        self.asked.append((uid, gid))
        return self.answer


@pytest.mark.parametrize(
    ("users", "shared_proc", "answer", "warning", "asked"),
    [
        pytest.param(TenantUsers({"ml": (1000, 1000)}, euid=1000), False, REFUSAL, None, [],
                     id="not-root-nothing-to-hide"),
        pytest.param(TenantUsers({}, euid=0, allow_root=True), False, REFUSAL, None, [],
                     id="root-with-no-user-switch"),
        pytest.param(TenantUsers({"ml": (1001, 1002)}, euid=0), False, None, None, [(1001, 1002)],
                     id="root-switching-users-where-the-kernel-hides"),
        pytest.param(TenantUsers({"ml": (1001, 1002)}, euid=0), True, REFUSAL, "--shared-proc",
                     [], id="shared-proc-warns-and-probes-nothing"),
    ],
)  # fmt: skip
def test_when_serve_starts(
    users: TenantUsers,
    shared_proc: bool,
    answer: str | None,
    warning: str | None,
    asked: list[tuple[int, int]],
) -> None:
    probe = FakeProbe(answer)
    said = check_process_hiding(users, shared_proc, probe)
    if warning is None:
        assert said is None
    else:
        assert said is not None
        assert warning in said
        assert "visible to the other tenants" in said
    assert probe.asked == asked


def test_a_machine_that_cannot_hide_refuses_to_start_and_says_how_to_fix_it() -> None:
    users = TenantUsers({"research": (1001, 1001), "ml": (1002, 1002)}, euid=0)
    with pytest.raises(InputError) as refused:
        check_process_hiding(users, False, FakeProbe(REFUSAL))
    message = str(refused.value)
    assert message.startswith("--run-as: ")
    assert "tenant ml's uid 1002" in message  # the first tenant, by name
    assert REFUSAL in message
    assert "CAP_SYS_ADMIN" in message
    assert "--shared-proc" in message


@pytest.mark.parametrize(
    ("found", "warned"),
    [
        (Hierarchy(1, {"cpu": "/c", "memory": "/m", "pids": "/p"}), None),
        ("cgroup v1: cannot make a cgroup in /sys/fs/cgroup/cpu/gpufleet: Read-only file system",
         "Read-only file system"),
    ],
    ids=["writable", "read-only"],
)  # fmt: skip
def test_serve_says_once_when_no_cgroup_can_be_written(
    found: Hierarchy | str, warned: str | None
) -> None:
    hierarchy, warning = check_resource_limits(lambda: found)
    if warned is None:
        assert hierarchy is found
        assert warning is None
    else:
        assert hierarchy is None
        assert warning is not None
        assert warned in warning
        assert "not held to their CPU and memory limits" in warning


@pytest.mark.parametrize(
    ("found", "warned"),
    [
        (Hierarchy(2, {"": "/g"}, device_program=True), None),
        (Hierarchy(2, {"": "/g"}, device_program_refused="cannot load: Operation not permitted"),
         "cannot load: Operation not permitted"),
        (Hierarchy(1, {"cpu": "/c", "memory": "/m", "pids": "/p"}), None),
    ],
    ids=["v2-with-program", "v2-program-refused", "v1-no-program-asked"],
)  # fmt: skip
def test_serve_says_once_when_v2_runs_get_no_device_program(
    found: Hierarchy, warned: str | None
) -> None:
    hierarchy, warning = check_resource_limits(lambda: found)
    assert hierarchy is found  # the limits hold either way
    if warned is None:
        assert warning is None
    else:
        assert warning is not None
        assert warned in warning
        assert "only the private /dev keeps a run from other GPUs' device nodes" in warning
