"""Instructions one scheduling cycle runs, counted by callgrind: a load-independent check that
a change to the core made it no slower (the host is shared, so timings vary by a tenth).

    python benchmarks/cycle_instructions.py [--tree PATH]

The cycle benchmark's set-up (benchmarks/cycle_speed.py: 5,000 nodes, 50 queues, 2,000
pending) is built once and saved; then, under ``valgrind --tool=callgrind``, a child process
loads it and runs nothing, the cold cycle, or the cycle after one running workload ends. A
cycle's count is its run's minus the load-only run's. ``--tree`` runs the children on another
checkout's code (an older commit's worktree, say), so two versions are compared on the same
set-up code path: run it once per tree and compare. Needs valgrind; takes about 5 minutes.
Writes benchmarks/results/cycle_instructions.json.

``--in-cycle`` counts only inside the cycle's call instead: callgrind starts with
instrumentation off and a client request (valgrind's own macros in a tiny C library compiled
with gcc into a temporary folder at run time: Python cannot issue them) turns it on around
``core.cycle``. No load-only run is subtracted, so two runs of one tree agree where the
whole-run counts can differ by several million instructions. It writes nothing; its counts are
printed and are what ``--repeats`` compares.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CASES = ("load only", "cold", "pod finished")
#: Valgrind's client requests around the cycle (compiled at run time; nothing binary is kept).
TOGGLE_SOURCE = """#include <valgrind/callgrind.h>
void cycle_start(void) {
    CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT;
}
void cycle_stop(void) {
    CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION;
}
"""


def build(path: Path) -> None:
    """The set-up, the settled state with one running workload ended, saved to ``path``."""
    from benchmarks.cycle_speed import build_setup, finish_workload, settle_after

    base = build_setup(seed=0, policy="default")
    settled = settle_after(base)
    finish_workload(settled, sorted(settled.core.running)[7])
    with path.open("wb") as out:
        pickle.dump((base, settled), out, pickle.HIGHEST_PROTOCOL)


def child(path: Path, case: str, toggle: Path | None = None) -> None:
    """Load the saved states; run the cycle ``case`` names (none for the load only), between
    ``toggle``'s client requests where one is given."""
    import ctypes
    import gc

    import benchmarks.cycle_speed  # noqa: F401  (the same modules as the parent imported)

    with path.open("rb") as saved:
        base, settled = pickle.load(saved)
    start = stop = None
    if toggle is not None:
        library = ctypes.CDLL(str(toggle))
        start, stop = library.cycle_start, library.cycle_stop
    gc.disable()
    if start is not None:
        start()
    if case == "cold":
        base.core.cycle(base.now)
    elif case == "pod finished":
        settled.core.cycle(settled.now + 1.0)
    if stop is not None:
        stop()


def compile_toggle(work: Path) -> Path:
    """The client-request library, built with gcc in ``work``."""
    source, library = work / "toggle.c", work / "toggle.so"
    source.write_text(TOGGLE_SOURCE)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


def count(tree: Path, saved: Path, case: str, work: Path, toggle: Path | None = None) -> int:
    log = work / f"{case.replace(' ', '-')}.log"
    out_file = log.with_suffix(".out")
    command = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
        *(["--instr-atstart=no", "--collect-atstart=no"] if toggle else []),
        sys.executable, str(Path(__file__).resolve()), "--child", case, "--saved", str(saved),
        *(["--toggle", str(toggle)] if toggle else []),
    ]  # fmt: skip
    with log.open("w") as out:
        subprocess.run(command, cwd=tree, env=_env(tree), stdout=out, stderr=out, check=True)
    if toggle is not None:  # the dump the stop request made: the cycle's own count
        dumps = "".join(p.read_text() for p in work.glob(f"{out_file.name}*") if p != out_file)
        totals = re.findall(r"^totals: (\d+)", dumps, re.MULTILINE)
        if not totals:
            raise SystemExit(f"no instruction count dumped for {case} (see {log})")
        return sum(int(total) for total in totals)
    found = re.search(r"Collected : (\d+)", log.read_text())
    if found is None:
        raise SystemExit(f"no instruction count in {log}")
    return int(found.group(1))


def _env(tree: Path) -> dict[str, str]:
    # The children run this file by its path and import the tree's gpufleet and benchmarks;
    # a fixed hash seed, so that set and dict orders (and the work they lead to) repeat.
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose core is counted")
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--saved", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--toggle", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--in-cycle", action="store_true", help="count only inside the cycle (printed only)"
    )
    args = parser.parse_args()
    if args.build is not None:
        build(args.build)
        return 0
    if args.child is not None:
        child(args.saved, args.child, args.toggle)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed (Debian: apt-get install valgrind)")
    tree = args.tree.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        saved = work / "setup.pkl"
        # Built by the tree's own code: its pickled classes are the ones its children load.
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--build", str(saved)],
            cwd=tree,
            env=_env(tree),
            check=True,
        )
        if args.in_cycle:
            toggle = compile_toggle(work)
            print("set-up saved; counting inside each cycle under callgrind ...", flush=True)
            with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                inside = pool.map(lambda case: count(tree, saved, case, work, toggle), CASES[1:])
                for case, instructions in zip(CASES[1:], inside, strict=True):
                    print(f"{case}: {instructions / 1e6:,.1f} M instructions (inside the cycle)")
            return 0
        print(f"set-up saved; counting {len(CASES)} runs under callgrind ...", flush=True)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            found = pool.map(lambda case: count(tree, saved, case, work), CASES)
            counts = dict(zip(CASES, found, strict=True))
    load = counts["load only"]
    cycles = {case: counts[case] - load for case in CASES[1:]}
    for case, instructions in cycles.items():
        print(f"{case}: {instructions / 1e6:,.1f} M instructions")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "command": "python benchmarks/cycle_instructions.py"
        + ("" if tree == ROOT else f" --tree {tree}"),
        "tree": str(tree),
        "runs": counts,
        "cycle_instructions": cycles,
    }
    if tree == ROOT:
        (RESULTS / "cycle_instructions.json").write_text(json.dumps(report, indent=1) + "\n")
    else:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
