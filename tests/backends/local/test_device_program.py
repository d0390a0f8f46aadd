"""The cgroup v2 device program: a run's cgroup allows exactly the character devices of its
allow list.

What the program answers is checked by running its encoded instructions in a small
interpreter of the opcodes it uses, against :func:`allows`, for any rules (hypothesis). What
the kernel does with it is checked by a child in a v2 cgroup with the program attached: those
tests need root and a kernel that loads BPF device programs, and skip, saying why, elsewhere;
the ``gpu``-marked one runs CUDA behind the program on a real GPU, and skips without one.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.backends.local import device_program as dp
from gpufleet.backends.local.cgroups import Hierarchy, Limits, RunCgroup, detect
from gpufleet.backends.local.device_program import (
    DeviceProgramError,
    DeviceRule,
    allows,
    attach,
    encode,
    instructions,
    parse_rule,
)
from gpufleet.backends.local.devices_env import placement_env
from gpufleet.backends.local.private_dev import gpu_nodes
from gpufleet.backends.local.private_dev import probe as private_dev_probe
from gpufleet.backends.local.supervisor import Supervisor
from gpufleet.devices.discovery import discover
from gpufleet.devices.nvml import NvmlUnavailableError, load_nvml
from gpufleet.model import Placement
from gpufleet.model.processes import ProcessSpec
from tests.backends.local.cgroup2 import cgroup2_parent, mounted_cgroup2
from tests.backends.local.scripts import wait_end, write_script
from tests.backends.local.test_cgroups import v2_tree
from tests.backends.local.test_real_gpu import CUDA_CHECK


# ----------------------------------------------------------------------------- rules
@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("c 195:1 rwm", DeviceRule("c", 195, 1, 7)),
        ("c 136:* rwm", DeviceRule("c", 136, None, 7)),
        ("b *:* r", DeviceRule("b", None, None, dp.ACC_READ)),
        ("c 1:3 mw", DeviceRule("c", 1, 3, dp.ACC_MKNOD | dp.ACC_WRITE)),
        ("a", DeviceRule("a", None, None, 7)),
    ],
    ids=["one-node", "any-minor", "any-block-read", "access-letters", "everything"],
)
def test_a_devices_allow_line_is_a_rule(text: str, rule: DeviceRule) -> None:
    assert parse_rule(text) == rule


@pytest.mark.parametrize(
    "text",
    ["c 195:1", "x 1:3 rwm", "c 1-3 rwm", "c 1:3 rwx", "c -1:3 rwm", "c 1:2147483648 r", ""],
    ids=["no-access", "bad-type", "no-colon", "bad-letter", "negative", "too-big", "empty"],
)
def test_a_line_that_is_no_rule_is_refused(text: str) -> None:
    with pytest.raises(DeviceProgramError, match="not a device rule"):
        parse_rule(text)


# ----------------------------------------------------------------------------- the program
def decode(code: bytes) -> list[tuple[int, int, int, int, int]]:
    """The (opcode, dst, src, off, imm) of each 8-byte instruction of ``code``."""
    out = []
    for at in range(0, len(code), 8):
        opcode, registers, off, imm = struct.unpack("=BBhi", code[at : at + 8])
        dst, src = (registers >> 4, registers & 15) if sys.byteorder == "big" else (
            registers & 15, registers >> 4)  # fmt: skip
        out.append((opcode, dst, src, off, imm))
    return out


def interpret(code: bytes, kind: int, major: int, minor: int, access: int) -> int:
    """What the kernel would return for an access: the program's r0 (the context in r1)."""
    context = {0: access << 16 | kind, 4: major, 8: minor}
    registers = [0] * 11
    program = decode(code)
    pc = 0
    for _ in range(len(program)):  # no loops: each instruction at most once
        opcode, dst, src, off, imm = program[pc]
        pc += 1
        if opcode == dp.LDX_MEM_W:
            assert src == 1, "loads only from the context"
            registers[dst] = context[off]
        elif opcode == dp.ALU32_AND_K:
            registers[dst] = registers[dst] & imm & 0xFFFFFFFF
        elif opcode == dp.ALU32_RSH_K:
            registers[dst] = (registers[dst] & 0xFFFFFFFF) >> imm
        elif opcode == dp.ALU32_MOV_K:
            registers[dst] = imm & 0xFFFFFFFF
        elif opcode == dp.ALU32_MOV_X:
            registers[dst] = registers[src] & 0xFFFFFFFF
        elif opcode == dp.JNE_K:
            pc += off if registers[dst] != imm else 0
        elif opcode == dp.JNE_X:
            pc += off if registers[dst] != registers[src] else 0
        elif opcode == dp.EXIT:
            return registers[0]
        else:
            raise AssertionError(f"unexpected opcode {opcode:#x}")
    raise AssertionError("ran off the end of the program")


numbers = st.one_of(st.none(), st.integers(0, 3))
rules_strategy = st.lists(
    st.builds(DeviceRule, st.sampled_from("abc"), numbers, numbers, st.integers(1, 7)),
    max_size=6,
)


@given(
    rules=rules_strategy,
    kind=st.sampled_from([dp.DEV_CHAR, dp.DEV_BLOCK]),
    major=st.integers(0, 3),
    minor=st.integers(0, 3),
    access=st.integers(1, 7),
)
def test_the_program_allows_exactly_what_the_rules_allow(
    rules: list[DeviceRule], kind: int, major: int, minor: int, access: int
) -> None:
    code = encode(instructions(rules))
    expected = allows(rules, kind, major, minor, access)
    assert interpret(code, kind, major, minor, access) == int(expected)


@pytest.mark.parametrize(
    ("rules", "request_", "allowed"),
    [
        ([], (dp.DEV_CHAR, 1, 3, dp.ACC_READ), False),
        (["c 1:3 rwm"], (dp.DEV_CHAR, 1, 3, dp.ACC_READ | dp.ACC_WRITE), True),
        (["c 1:3 rwm"], (dp.DEV_BLOCK, 1, 3, dp.ACC_READ), False),
        (["c 1:3 r"], (dp.DEV_CHAR, 1, 3, dp.ACC_WRITE), False),
        (["c 136:* rwm"], (dp.DEV_CHAR, 136, 42, dp.ACC_READ), True),
        (["c 195:1 rwm"], (dp.DEV_CHAR, 195, 0, dp.ACC_READ), False),
    ],
    ids=["nothing-allowed", "listed", "block-not-char", "read-only", "any-minor", "other-gpu"],
)
def test_the_program_answers(rules: list[str], request_: tuple[int, int, int, int],
                             allowed: bool) -> None:  # fmt: skip
    code = encode(instructions([parse_rule(r) for r in rules]))
    assert interpret(code, *request_) == int(allowed)


def test_the_mountinfo_names_the_cgroup2_mount() -> None:
    text = (
        "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n"
        "38 25 0:34 / /sys/fs/cgroup/unified rw,relatime shared:17 - cgroup2 cgroup2 rw\n"
    )
    assert mounted_cgroup2(text) == "/sys/fs/cgroup/unified"
    assert mounted_cgroup2(text.splitlines()[0]) is None


# ----------------------------------------------------------------------------- detect
def test_a_v2_hierarchy_says_whether_runs_get_a_device_program(tmp_path: Path) -> None:
    proc = v2_tree(tmp_path)
    probed: list[str] = []

    def allowed(parent: str) -> str | None:
        probed.append(parent)
        return None

    found = detect(str(tmp_path), str(proc), parent="gf", probe_program=allowed)
    assert isinstance(found, Hierarchy)
    assert (found.device_program, found.devices, probed) == (True, True, [str(tmp_path / "gf")])
    assert Hierarchy.from_json(found.to_json()).device_program
    refused = detect(str(tmp_path), str(proc), parent="gf", probe_program=lambda _: "EPERM")
    assert isinstance(refused, Hierarchy)
    assert (refused.device_program, refused.device_program_refused) == (False, "EPERM")
    assert not Hierarchy.from_json(refused.to_json()).devices


def test_a_directory_that_is_no_cgroup_takes_no_device_program(tmp_path: Path) -> None:
    refused = dp.probe(str(tmp_path))
    assert refused is not None
    assert not list(tmp_path.iterdir())  # the probe's directory is gone


# ----------------------------------------------------------------------------- the kernel
#: A character major reserved for local or experimental use (Linux's devices.txt): no driver.
LOCAL_MAJOR = 61
#: Joins the cgroup of argv[1], then opens each path of argv[2:] (path=flags) and prints
#: what happened, one line per path.
OPEN_IN_CGROUP = """
import errno, os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write("0")
for item in sys.argv[2:]:
    path, _, mode = item.partition("=")
    try:
        os.close(os.open(path, os.O_WRONLY if mode == "w" else os.O_RDONLY))
        print(item, "ok")
    except OSError as error:
        print(item, errno.errorcode[error.errno])
"""


def v2_parent() -> Path:
    if os.geteuid() != 0:
        pytest.skip("only root attaches a device program")
    found = cgroup2_parent()
    if isinstance(found, str):
        pytest.skip(f"no cgroup v2 device program here: {found}")
    return found


def open_in(cgroup: Path, *items: str) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", OPEN_IN_CGROUP, str(cgroup), *items],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())


def test_a_process_in_the_cgroup_opens_only_the_devices_allowed() -> None:
    cgroup = v2_parent() / f"run-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    program = attach(str(cgroup), ["c 1:5 rwm", "c 1:9 r"])  # /dev/zero; /dev/urandom, read
    try:
        seen = open_in(cgroup, "/dev/null", "/dev/zero", "/dev/urandom", "/dev/urandom=w")
    finally:
        program.detach()
        cgroup.rmdir()
    assert seen == {
        "/dev/null": errno.errorcode[errno.EPERM],
        "/dev/zero": "ok",
        "/dev/urandom": "ok",
        "/dev/urandom=w": errno.errorcode[errno.EPERM],
    }


def test_a_detached_program_no_longer_filters() -> None:
    cgroup = v2_parent() / f"run-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    try:
        attach(str(cgroup), []).detach()
        seen = open_in(cgroup, "/dev/null")
    finally:
        cgroup.rmdir()
    assert seen == {"/dev/null": "ok"}


def test_a_run_cgroup_on_v2_gets_the_program_and_drops_it_when_removed(tmp_path: Path) -> None:
    parent = v2_parent()
    # Character nodes of a major reserved for local use: no driver answers them (ENXIO).
    for minor in (0, 1):
        os.mknod(tmp_path / f"node{minor}", 0o600 | stat.S_IFCHR, os.makedev(LOCAL_MAJOR, minor))
    hierarchy = Hierarchy(2, {"": str(parent)}, device_program=True)
    cgroup = RunCgroup(hierarchy, f"run-{uuid.uuid4().hex[:8]}")
    cgroup.create(Limits(None, None, None), [f"c {LOCAL_MAJOR}:1 rwm"])  # and the base list
    path = Path(cgroup.paths[""])
    try:
        seen = open_in(path, "/dev/null", "/dev/urandom", *(str(tmp_path / f"node{m}")
                                                            for m in (0, 1)))  # fmt: skip
    finally:
        cgroup.remove()
    assert seen == {
        "/dev/null": "ok",
        "/dev/urandom": "ok",
        str(tmp_path / "node0"): "EPERM",
        str(tmp_path / "node1"): "ENXIO",
    }
    assert not path.exists()
    without = RunCgroup(Hierarchy(2, {"": str(parent)}), f"run-{uuid.uuid4().hex[:8]}")
    without.create(Limits(None, None, None), [])  # a hierarchy without the program: none
    try:
        assert open_in(Path(without.paths[""]), str(tmp_path / "node0")) == {
            str(tmp_path / "node0"): "ENXIO"
        }
    finally:
        without.remove()


@pytest.mark.gpu
def test_a_run_on_a_real_gpu_runs_cuda_behind_the_device_program(state_root: Path) -> None:
    """The allow list is enough for CUDA: a run given one real GPU, in a private /dev and a v2
    cgroup whose device program allows only its nodes, sees exactly that GPU."""
    try:
        inventory = discover(load_nvml())
    except NvmlUnavailableError as error:
        pytest.skip(str(error))
    gpu = next((d for d in inventory.devices if not d.mig_enabled), None)
    if gpu is None:
        pytest.skip("no GPU outside MIG mode")
    refused = private_dev_probe() if os.geteuid() == 0 else "only root mounts a private /dev"
    if refused is not None:
        pytest.skip(refused)
    hierarchy = Hierarchy(2, {"": str(v2_parent())}, device_program=True)
    work = state_root / "work"
    work.mkdir()
    script = write_script(work, "cuda_check.py", CUDA_CHECK)
    env = placement_env(Placement("here", (gpu.index,)), inventory)
    spec = ProcessSpec((sys.executable, str(script)), sys.executable, env, str(work))
    supervisor = Supervisor(state_root / "state", allow_root=True, private_dev=True,
                            cgroups=hierarchy, pids_limit=None)  # fmt: skip
    try:
        supervisor.start("cuda", spec, devices=gpu_nodes([gpu.index]))
        end = wait_end(supervisor, "cuda", timeout_s=60)
        log = supervisor.log_path("cuda").read_text()
        assert end.succeeded, log
        assert f"devices=1 uuid={gpu.uuid}" in log, log
    finally:
        supervisor.close()
