"""The run records' value semantics, and the shim's promise to import only the standard library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.backends.local.run_state import ExitRecord, ProcessId
from gpufleet.backends.local.supervisor import shim_command

_OWN_MODULES = {
    "gpufleet",
    "gpufleet.backends",
    "gpufleet.backends.local",
    "gpufleet.backends.local.run_state",
    "gpufleet.backends.local.shim",
}


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        (ProcessId(1, 2), ProcessId(1, 2), True),
        (ProcessId(1, 2), ProcessId(1, 3), False),
        (ExitRecord(0, None, 1.0), ExitRecord(0, None, 1.0, ""), True),
        (ExitRecord(0, None, 1.0), ExitRecord(None, 0, 1.0), False),
        (ProcessId(1, 2), (1, 2), False),
    ],
    ids=["same-process", "pid-reused", "default-error", "code-vs-signal", "not-a-tuple"],
)
def test_records_compare_and_hash_by_their_fields(left: object, right: object, equal: bool) -> None:
    assert (left == right) is equal
    if equal:
        assert hash(left) == hash(right)


def test_records_are_immutable_and_show_their_fields() -> None:
    record = ExitRecord(3, None, 1.5)
    with pytest.raises(AttributeError):
        setattr(record, "exit_code", 4)  # noqa: B010
    assert repr(record) == "ExitRecord(exit_code=3, signal=None, ended_at=1.5, error='', reason='')"
    assert repr(ProcessId(7, 9)) == "ProcessId(pid=7, start_ticks=9)"


def test_the_shim_imports_only_light_standard_modules_and_its_own() -> None:
    command = shim_command(sys.executable, Path("run"), Path("fifo"))
    # Import the shim as the supervisor's command does, then list what is loaded (no run).
    code = command.index("-c") + 1
    assert "sys.exit(main(sys.argv))" in command[code]
    command[code] = command[code].replace("sys.exit(main(sys.argv))", "print(*sys.modules)")
    found = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    foreign = {
        name
        for name in found
        if name.split(".")[0] not in sys.stdlib_module_names and name != "__main__"
    }
    assert foreign == _OWN_MODULES
    # Standard modules that each cost milliseconds of every start and that the shim can do
    # without (issue 16: <= 100 ms from submit to start); subprocess does not load them.
    assert not {"dataclasses", "inspect", "pathlib", "typing"} & set(found)
