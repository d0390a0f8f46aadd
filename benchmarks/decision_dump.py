"""Every decision of the scheduling core, as text: the check that a refactor changes none.

    PYTHONHASHSEED=0 python benchmarks/decision_dump.py [--nodes 5000 --pending 2000] \
        [--out decisions.txt]

On the busy cluster of benchmarks/cycle_speed.py (deterministic for its seed), the core runs
cycle by cycle, its actions echoed back as the cluster's events (every bind succeeds at once,
every eviction ends its pod), through the cold cycle and every follow-up until it settles, a
minute later again, then after a running workload ends, after a new one arrives and once its
earliest timer is due. After every cycle the dump holds: each action (bind with node and
devices, evict with preemptor and reason, the message of a pod marked unschedulable), each
pending group's parked state, each pending workload's reason, attempts and not-before time,
the nominated preemptors and their victims, the backfill reservation, and the explanation of
every waiting workload (position, what it waits for, message, estimated start). The last
line is the SHA-256 of what came before, so two dumps compare by their last lines.

The core iterates some sets of names, so runs compare only under the same ``PYTHONHASHSEED``
(use 0). Writes ``--out`` (default: standard output); the dump is a few hundred thousand
lines at the default size, ``--nodes 500 --pending 300`` makes a quick one.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cycle_speed import Setup, build_setup, finish_workload
from gpufleet.model.actions import Action, Bind, Evict, MarkUnschedulable
from gpufleet.model.events import WorkloadAdded
from gpufleet.scheduling.core import SchedulerCore


def action_line(action: Action) -> str:
    if isinstance(action, Bind):
        placement = action.placement
        return (
            f"bind {action.pod.key} -> {placement.node} gpus={placement.gpu_indices} "
            f"milli={placement.gpu_milli_per_device} mig={placement.mig_slices}"
        )
    if isinstance(action, Evict):
        return f"evict {action.pod.key} for={action.preemptor} reason={action.reason}"
    if isinstance(action, MarkUnschedulable):
        return f"unschedulable {action.pod.key}: {action.message}"
    return f"{type(action).__name__} {action.pod.key}"


def state_lines(core: SchedulerCore) -> Iterator[str]:
    """What the core holds between cycles, in a stable order."""
    for group in sorted(core.pending.groups(), key=lambda g: g.head.workload.key):
        yield (
            f"group {group.head.workload.key} size={len(group.items)} parked={group.parked}"
            f" may_preempt={group.may_preempt}"
        )
    for pending in sorted(core.pending.workloads(), key=lambda p: p.workload.key):
        yield (
            f"pending {pending.workload.key} reason={pending.reason} attempts={pending.attempts}"
            f" not_before={pending.not_before:.3f} told={pending.told!r}"
        )
    for key, victims in sorted(core.nominated.items()):
        yield f"nominated {key} victims={sorted(victims)}"
    reservation = core.reservation
    if reservation is not None:
        rows = reservation.rows.nonzero()[0].tolist()
        yield f"reservation owner={reservation.owner} start={reservation.start:.3f} rows={rows}"
    for explanation in core.explain_pending():
        start = explanation.estimated_start
        yield (
            f"explain {explanation.workload} queue={explanation.queue} "
            f"position={explanation.position} waiting_for={explanation.waiting_for} "
            f"start={'-' if start is None else f'{start:.3f}'} message={explanation.message!r}"
        )


def settle(setup: Setup, now: float, label: str) -> Iterator[str]:
    """Cycle by cycle until the core has nothing more to do at ``now``."""
    core, cluster = setup.core, setup.cluster
    for round_number in range(10_000):
        actions = core.cycle(now)
        yield f"== {label} cycle {round_number} t={now:.3f} actions={len(actions)}"
        yield from (action_line(a) for a in actions)
        events = cluster.apply(actions)
        yield from state_lines(core)
        if not actions and not events:
            return
        core.handle_all(events)
    raise AssertionError(f"{label}: the core did not settle")


def dump(setup: Setup) -> Iterator[str]:
    yield from settle(setup, setup.now, "cold")
    setup.now += 60.0
    yield from settle(setup, setup.now, "a minute later")
    victim = sorted(setup.core.running)[0]
    finish_workload(setup, victim)
    yield f"== {victim} ends"
    yield from settle(setup, setup.now, "after an end")
    arrival = setup.spare[0]
    setup.core.handle(WorkloadAdded(arrival))
    yield f"== {arrival.key} arrives"
    yield from settle(setup, setup.now, "after an arrival")
    due = setup.core.next_timer()
    if due != float("inf"):
        setup.now = max(setup.now, due)
        yield from settle(setup, setup.now, "at the next timer")


def with_digest(lines: Iterable[str]) -> Iterator[str]:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode() + b"\n")
        yield line
    yield f"sha256 {digest.hexdigest()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pending", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policy", default="default")
    parser.add_argument("--out", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args()
    setup = build_setup(nodes=args.nodes, pending=args.pending, seed=args.seed, policy=args.policy)
    lines = with_digest(dump(setup))
    if args.out is None:
        for line in lines:
            print(line)
    else:
        with args.out.open("w") as out:
            for line in lines:
                out.write(line + "\n")
        print(f"{args.out}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
