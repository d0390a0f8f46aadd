"""A cgroup v2 device program: on the unified hierarchy, the only character devices a run's
processes may open, mknod, read or write, as the v1 devices controller's ``devices.allow``
says on v1.

Owns:

* :func:`parse_rule`: one ``devices.allow`` line (``c 195:1 rwm``, ``c 136:* rwm``) as a
  :class:`DeviceRule`; the same lines the supervisor writes in a run's spec for v1.
* :func:`instructions`: the program of an allow list, as runc's and crun's device filters
  build it: load the access type, the access bits, the major and the minor from the kernel's
  ``struct bpf_cgroup_dev_ctx`` into registers, then one block per rule that jumps to the next
  block on the first field that does not match and else returns 1 (allow); after the last
  block, 0 (deny: the kernel answers ``EPERM``). :func:`encode` turns it into the kernel's
  8-byte ``struct bpf_insn`` records.
* :func:`attach`: load it (``bpf(BPF_PROG_LOAD)``, ``BPF_PROG_TYPE_CGROUP_DEVICE``) and attach it
  to a cgroup directory (``BPF_PROG_ATTACH``, ``BPF_CGROUP_DEVICE``, no flags: a cgroup below it
  may not attach one that loosens it) before the run's process is born in it; the returned
  :class:`AttachedProgram` detaches it (``BPF_PROG_DETACH``) and closes both descriptors when
  the cgroup is removed. The kernel drops an attached program with its cgroup too, so a shim
  that dies leaves nothing behind once the cgroup goes.
* :func:`probe`: whether this kernel and this process may do that (``CAP_BPF`` and
  ``CAP_SYS_ADMIN``, or root; a kernel built with ``CONFIG_CGROUP_BPF``), tried on a cgroup,
  for serve to say once at start.

Why no library: it is one syscall with three commands and a program of a few dozen
instructions, and no well-kept Python library does it (``bcc`` compiles C with LLVM and is a
system package; ``pyroute2``'s BPF support is for network programs; the Go and C libraries
runc, crun and systemd use have no Python face), while the shim must start in tens of
milliseconds on the standard library: :mod:`ctypes` calls ``syscall(SYS_bpf, ...)``, imported
only when a run gets a device program. Only what the shim has loaded already at import.
"""

from __future__ import annotations

import contextlib
import os

#: ``bpf(2)``'s syscall number per machine (glibc has no wrapper).
SYS_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
#: ``struct bpf_cgroup_dev_ctx``'s ``access_type``: the device type in the low 16 bits, the
#: access bits above them.
DEV_BLOCK = 1
DEV_CHAR = 2
ACC_MKNOD = 1
ACC_READ = 2
ACC_WRITE = 4
ACCESS_BITS = {"m": ACC_MKNOD, "r": ACC_READ, "w": ACC_WRITE}
ALL_ACCESS = ACC_MKNOD | ACC_READ | ACC_WRITE
#: The opcodes the program uses (``linux/bpf_common.h``, ``linux/bpf.h``).
LDX_MEM_W = 0x61  # dst = *(u32 *)(src + off)
ALU32_AND_K = 0x54  # dst &= imm (32 bits)
ALU32_RSH_K = 0x74  # dst >>= imm (32 bits)
ALU32_MOV_K = 0xB4  # dst = imm (32 bits)
ALU32_MOV_X = 0xBC  # dst = src (32 bits)
JNE_K = 0x55  # if dst != imm: pc += off
JNE_X = 0x5D  # if dst != src: pc += off
EXIT = 0x95  # return r0
#: The license string the kernel is told (it gates GPL-only helpers; the program calls none).
LICENSE = b"Apache-2.0"
#: How much of the verifier's log a refusal quotes.
LOG_SIZE = 4096


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple

    class Instruction(NamedTuple):
        """One ``struct bpf_insn``: opcode, destination and source registers, offset,
        immediate."""

        code: int
        dst: int = 0
        src: int = 0
        off: int = 0
        imm: int = 0

    class DeviceRule(NamedTuple):
        """One allow rule: ``kind`` ``c`` (character), ``b`` (block) or ``a`` (either);
        ``major`` and ``minor`` None for any; ``access`` the bits of ``r``, ``w``, ``m``."""

        kind: str
        major: int | None
        minor: int | None
        access: int

else:  # the same, without importing typing (10 ms of the shim's start)
    from collections import namedtuple

    Instruction = namedtuple("Instruction", "code dst src off imm", defaults=(0, 0, 0, 0))
    DeviceRule = namedtuple("DeviceRule", "kind major minor access")


class DeviceProgramError(OSError):
    """The program could not be built, loaded or attached; the message says which and why (an
    :class:`OSError`, as every other refusal to make a run's cgroup is)."""


def parse_rule(text: str) -> DeviceRule:
    """``c 195:1 rwm`` (the v1 ``devices.allow`` form; ``*`` for any number) as a rule."""
    parts = text.split()
    if len(parts) == 1 and parts[0] == "a":
        return DeviceRule("a", None, None, ALL_ACCESS)
    if len(parts) != 3 or parts[0] not in ("a", "b", "c") or ":" not in parts[1]:
        raise DeviceProgramError(f"not a device rule: {text!r} (expected e.g. 'c 195:1 rwm')")
    major_text, _, minor_text = parts[1].partition(":")
    access = 0
    for letter in parts[2]:
        if letter not in ACCESS_BITS:
            raise DeviceProgramError(f"not a device rule: {text!r}: access {letter!r}")
        access |= ACCESS_BITS[letter]

    def number(value: str) -> int | None:
        if value == "*":
            return None
        if not value.isdigit() or int(value) >= 1 << 31:
            raise DeviceProgramError(f"not a device rule: {text!r}: number {value!r}")
        return int(value)

    return DeviceRule(parts[0], number(major_text), number(minor_text), access)


def allows(rules: list[DeviceRule], kind: int, major: int, minor: int, access: int) -> bool:
    """What the program of ``rules`` answers for an access (``kind`` :data:`DEV_CHAR` or
    :data:`DEV_BLOCK`, ``access`` its bits): whether one rule covers it whole."""
    for rule in rules:
        if rule.kind != "a" and {"c": DEV_CHAR, "b": DEV_BLOCK}[rule.kind] != kind:
            continue
        if access & ~rule.access:
            continue
        if rule.major is not None and rule.major != major:
            continue
        if rule.minor is not None and rule.minor != minor:
            continue
        return True
    return False


def instructions(rules: list[DeviceRule]) -> list[Instruction]:
    """The program that allows exactly what :func:`allows` does (see the module docstring).
    Registers: r2 the device type, r3 the access bits, r4 the major, r5 the minor; r1 (the
    context pointer, no longer needed) is a scratch register."""
    program = [
        Instruction(LDX_MEM_W, dst=2, src=1, off=0),
        Instruction(ALU32_AND_K, dst=2, imm=0xFFFF),
        Instruction(LDX_MEM_W, dst=3, src=1, off=0),
        Instruction(ALU32_RSH_K, dst=3, imm=16),
        Instruction(LDX_MEM_W, dst=4, src=1, off=4),
        Instruction(LDX_MEM_W, dst=5, src=1, off=8),
    ]
    for rule in rules:
        # Each test jumps, on a mismatch, past the rest of its block (offsets set below).
        block: list[Instruction] = []
        if rule.kind != "a":
            block.append(Instruction(JNE_K, dst=2, imm=DEV_CHAR if rule.kind == "c" else DEV_BLOCK))
        if rule.access != ALL_ACCESS:  # r1 = r3 & access; if r1 != r3 (a bit not allowed)
            block += [Instruction(ALU32_MOV_X, dst=1, src=3),
                      Instruction(ALU32_AND_K, dst=1, imm=rule.access),
                      Instruction(JNE_X, dst=1, src=3)]  # fmt: skip
        if rule.major is not None:
            block.append(Instruction(JNE_K, dst=4, imm=rule.major))
        if rule.minor is not None:
            block.append(Instruction(JNE_K, dst=5, imm=rule.minor))
        block += [Instruction(ALU32_MOV_K, dst=0, imm=1), Instruction(EXIT)]
        for at, insn in enumerate(block):
            if insn.code in (JNE_K, JNE_X):
                block[at] = insn._replace(off=len(block) - at - 1)
        program += block
    return [*program, Instruction(ALU32_MOV_K, dst=0, imm=0), Instruction(EXIT)]


def encode(program: list[Instruction]) -> bytes:
    """The kernel's ``struct bpf_insn`` array (little- or big-endian as this machine is)."""
    import struct
    import sys

    big = sys.byteorder == "big"
    out = bytearray()
    for insn in program:
        registers = (insn.dst << 4 | insn.src) if big else (insn.src << 4 | insn.dst)
        out += struct.pack("=BBhi", insn.code, registers, insn.off, insn.imm)
    return bytes(out)


class AttachedProgram:
    """A device program attached to one cgroup (see :func:`attach`)."""

    def __init__(self, program_fd: int, cgroup_fd: int) -> None:
        self.program_fd = program_fd
        self.cgroup_fd = cgroup_fd

    def detach(self) -> None:
        """Detach it and close its descriptors (once; later calls do nothing)."""
        if self.program_fd < 0:
            return
        import struct

        attr = struct.pack("=IIIII", self.cgroup_fd, self.program_fd, BPF_CGROUP_DEVICE, 0, 0)
        _bpf(BPF_PROG_DETACH, attr)  # a cgroup already gone has dropped it: nothing to undo
        os.close(self.program_fd)
        os.close(self.cgroup_fd)
        self.program_fd = self.cgroup_fd = -1


def _bpf(command: int, attr: bytes) -> tuple[int, int]:
    """``bpf(command, attr)``: (its result, errno)."""
    import ctypes

    number = SYS_BPF.get(os.uname().machine)
    if number is None:
        return -1, 38  # ENOSYS: a machine whose syscall number is not known here
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    buffer = ctypes.create_string_buffer(attr, len(attr))
    result = int(libc.syscall(ctypes.c_long(number), ctypes.c_int(command), buffer,
                              ctypes.c_uint(len(attr))))  # fmt: skip
    return result, ctypes.get_errno() if result < 0 else 0


def load(rules: list[DeviceRule]) -> int:
    """Load the program of ``rules``; its descriptor (close-on-exec, as every BPF one is).
    Raises :class:`DeviceProgramError` with the kernel's reason (and the verifier's)."""
    import ctypes
    import struct

    code = encode(instructions(rules))
    insns = ctypes.create_string_buffer(code, len(code))
    license_text = ctypes.create_string_buffer(LICENSE)
    log = ctypes.create_string_buffer(LOG_SIZE)
    for log_level in (0, 1):  # the verifier's log only when it refused
        attr = struct.pack(
            "=IIQQIIQII16sII",
            BPF_PROG_TYPE_CGROUP_DEVICE,
            len(code) // 8,
            ctypes.addressof(insns),
            ctypes.addressof(license_text),
            log_level,
            LOG_SIZE if log_level else 0,
            ctypes.addressof(log) if log_level else 0,
            0,  # kern_version
            0,  # prog_flags
            b"gpufleet_dev",
            0,  # prog_ifindex
            BPF_CGROUP_DEVICE,  # expected_attach_type
        )
        fd, refusal = _bpf(BPF_PROG_LOAD, attr)
        if fd >= 0:
            return fd
        if refusal not in (22, 13):  # not EINVAL or EACCES: the verifier has nothing to add
            break
    said = [line for line in log.value.decode(errors="replace").strip().splitlines()
            if line and not line.startswith("processed ")]  # fmt: skip
    detail = f" (verifier: {said[-1]})" if said else ""
    raise DeviceProgramError(f"cannot load a device program: {os.strerror(refusal)}{detail}")


def attach(cgroup_dir: str, rules: list[str]) -> AttachedProgram:
    """Load the program of the ``devices.allow`` lines ``rules`` and attach it to the cgroup
    ``cgroup_dir`` (a directory of a cgroup v2 hierarchy). Raises :class:`DeviceProgramError`."""
    import struct

    program_fd = load([parse_rule(r) for r in rules])
    try:
        cgroup_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        os.close(program_fd)
        raise DeviceProgramError(f"cannot open the cgroup {cgroup_dir}: {error.strerror}") from None
    attr = struct.pack("=IIIII", cgroup_fd, program_fd, BPF_CGROUP_DEVICE, 0, 0)
    result, refusal = _bpf(BPF_PROG_ATTACH, attr)
    if result != 0:
        os.close(program_fd)
        os.close(cgroup_fd)
        raise DeviceProgramError(
            f"cannot attach a device program to {cgroup_dir}: {os.strerror(refusal)}"
        )
    return AttachedProgram(program_fd, cgroup_fd)


def probe(parent: str) -> str | None:
    """Whether a device program can be attached to a cgroup made under ``parent`` (made and
    removed here): None when it can, else why not."""
    path = os.path.join(parent, f".device-probe-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as error:
        return f"cannot make a cgroup in {parent}: {error.strerror}"
    try:
        attach(path, ["c 1:3 rwm"]).detach()
    except DeviceProgramError as error:
        return str(error)
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(path)
    return None


__all__ = [
    "AttachedProgram",
    "DeviceProgramError",
    "DeviceRule",
    "Instruction",
    "allows",
    "attach",
    "encode",
    "instructions",
    "load",
    "parse_rule",
    "probe",
]
