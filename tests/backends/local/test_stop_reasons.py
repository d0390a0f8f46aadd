"""Why a run was stopped is kept with it (``stop.json``) and found again by a new supervisor,
so that a restarted server ends a run that was being stopped as it was to end."""

from __future__ import annotations

from pathlib import Path

from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.testing.waiting import wait_until
from tests.backends.local.scripts import (
    STUBBORN,
    log_has,
    python_spec,
    wait_end,
    write_script,
)


def test_why_a_run_was_stopped_is_found_again_after_a_restart(state_root: Path) -> None:
    work = state_root / "work"
    work.mkdir()
    script = write_script(work, "stubborn.py", STUBBORN)
    first = Supervisor(state_root / "state", allow_root=True)
    first.start("stopping", python_spec(work, script), grace_s=0.2)
    first.start("stopped", python_spec(work, script))
    first.start("running", python_spec(work, script))
    for run in ("stopping", "stopped", "running"):
        wait_until(log_has(first, run, "ready"))
    first.stop("stopping", 0.2, {"end": "evicted", "reason": "made room"})
    wait_end(first, "stopping")
    first.stop("stopped", 0.0)  # no reason given
    wait_end(first, "stopped")
    first.close()

    second = Supervisor(state_root / "state", allow_root=True)
    try:
        found = {run.run_id: run.stop_why for run in second.adopt()}
        expected = {"stopping": {"end": "evicted", "reason": "made room"}, "stopped": {}}
        assert found == {**expected, "running": None}
        second.stop("running", 0.0)
        wait_end(second, "running")
    finally:
        second.close()
