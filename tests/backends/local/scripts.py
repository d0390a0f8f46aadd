"""Tiny programs the local machine's tests run, and helpers to wait for what they do.

Each script prints what it sees (its devices, its gang) and sleeps until a file appears, or
exits with a code: the tests never sleep a fixed time, they poll for a file or a log line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.backends.local.supervisor import RunEnd, Supervisor
from gpufleet.model.processes import ProcessSpec

#: Prints what it sees, then exits with argv[1] unless argv[2] names a file to wait for first.
REPORT = """
import json, os, sys, time
names = ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT",
         "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "HOME", "USER", "LOGNAME"]
with open(f"/proc/{os.getpid()}/stat") as f:
    start = int(f.read().rsplit(")", 1)[1].split()[19])
seen = {n: os.environ.get(n) for n in names}
print("SEEN " + json.dumps({"pid": os.getpid(), "start": start, "cwd": os.getcwd(), **seen}),
      flush=True)
if len(sys.argv) > 2:
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.005)
sys.exit(int(sys.argv[1]))
"""

#: Ignores SIGTERM, says so, and sleeps.
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(1)
"""

#: Starts a grandchild (its PID in argv[1]; in a session of its own, as ``setsid`` starts one,
#: if argv[3] is "setsid"); exits at once if argv[2] is "leave", else sleeps.
PARENT = """
import subprocess, sys, time
own = sys.argv[3:] == ["setsid"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=own)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(child.pid))
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
print("ready", flush=True)
if sys.argv[2] == "leave":
    sys.exit(0)
while True:
    time.sleep(1)
"""

#: Counts steps from its checkpoint (argv[1]); on SIGTERM saves the step and exits 0; ends
#: after argv[2] steps in all.
CHECKPOINTING = """
import os, signal, sys, time
path, last = sys.argv[1], int(sys.argv[2])
step = int(open(path).read()) if os.path.exists(path) else 0
print(f"resumed from {step}" if step else "fresh start", flush=True)
def save(*_):
    with open(path + ".tmp", "w") as f:
        f.write(str(step))
    os.replace(path + ".tmp", path)
    print(f"checkpoint at {step}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
while step < last:
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(0.01)
print("done", flush=True)
"""


def write_script(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def python_spec(
    directory: Path, script: Path, *args: str, env: dict[str, str] | None = None
) -> ProcessSpec:
    """``python script args...`` in ``directory``."""
    return ProcessSpec(
        (sys.executable, str(script), *args),
        sys.executable,
        env or {"PATH": "/usr/bin:/bin"},
        str(directory),
    )


def log_has(supervisor: Supervisor, run_id: str, text: str) -> Callable[[], bool]:
    def found() -> bool:
        path = supervisor.log_path(run_id)
        return path.exists() and text in path.read_text()

    found.__name__ = f"{text!r} in the log of {run_id}"
    return found


def wait_end(supervisor: Supervisor, run_id: str, timeout_s: float = 10.0) -> RunEnd:
    """Poll ``supervisor`` (waiting on its FIFO between polls) until ``run_id`` ends."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for end in supervisor.poll():
            if end.run_id == run_id:
                return end
        supervisor.wait(0.05)
    raise AssertionError(f"run {run_id} did not end within {timeout_s} s")
