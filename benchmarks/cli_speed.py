"""How fast a command that talks to a server answers (issue 33 item 4: within 0.3 s wall).

    python benchmarks/cli_speed.py [--calls 20] [--compare /work/main] [--results DIR]

Starts ``gpufleet serve`` (the simulated cluster) from this tree in a temporary directory,
submits a workload to it, then times ``gpufleet get workloads`` as a user runs it (a fresh
Python process each call) and ``python -c pass`` (the floor: starting Python), in rounds that
take one call of each, so that a busy spell of the shared machine falls on all of them alike.
With ``--compare DIR`` another checkout's CLI (say main's) is timed in the same rounds against
the same server. Reported per CLI: the median and 90th percentile wall time, the median as a
ratio to ``python -c pass``, and the median CPU time to import the command's modules (``import
gpufleet.cli.main, gpufleet.cli.remote`` in a fresh process), and the median CPU time (user and
system) of a call, which depends less on what else the shared machine runs. The machine's load
is printed before and after. Results: benchmarks/results/cli_speed.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpufleet.testing.server_process import wait_until_ready

TREE = Path(__file__).resolve().parent.parent
RESULTS = TREE / "benchmarks" / "results"
#: What the ``gpufleet`` console script runs.
ENTRY = "import sys; from gpufleet.cli.main import app; sys.argv[0] = 'gpufleet'; sys.exit(app())"
#: The CPU time of importing the command's modules (its wall time is the neighbours' too).
IMPORT = (
    "import time; t = time.process_time(); import gpufleet.cli.main, gpufleet.cli.remote; "
    "print((time.process_time() - t) * 1000)"
)
TARGET_S = 0.3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(tree: Path) -> dict[str, str]:
    """The environment that makes ``tree``'s gpufleet the one Python imports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["PYTHONPATH"] = str(tree)
    env["XDG_CONFIG_HOME"] = tempfile.gettempdir()  # no user config file in the way
    return env


def gpufleet(tree: Path, args: list[str], cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env=environment(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def wall(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Seconds from starting ``command`` to its exit (it must succeed), and the CPU seconds
    (user and system) it used: on a shared machine the first depends on the neighbours, the
    second much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu


def import_ms(tree: Path, runs: int, cwd: Path) -> float:
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", IMPORT],
                cwd=cwd,  # not this tree's root, which ``python -c`` would put first on the path
                env=environment(tree),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for _ in range(runs)
    ]
    return statistics.median(times)


def summary(runs: list[tuple[float, float]], floor: float) -> dict[str, float]:
    ordered = sorted(took for took, _ in runs)
    median = statistics.median(ordered)
    return {
        "median_s": round(median, 4),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
        "ratio_to_python": round(median / floor, 2),
        "median_cpu_s": round(statistics.median(cpu for _, cpu in runs), 4),
    }


def measure(calls: int, trees: dict[str, Path]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cli-speed-") as name:
        where = Path(name)
        token = gpufleet(
            TREE, ["admin", "create-token", "--tenant", "admin", "--role", "admin"], where
        ).strip()
        port = free_port()
        server = f"http://127.0.0.1:{port}"
        log = where / "serve.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", ENTRY, "serve", "--port", str(port), "--log-level",
                 "warning"],
                cwd=where, env=environment(TREE), stdout=out, stderr=out,
            )  # fmt: skip
        try:
            wait_until_ready(server, process, log)
            remote = ["--server", server, "--token", token]
            example = str(TREE / "examples" / "pods" / "one-gpu.yaml")
            gpufleet(TREE, ["submit", "-f", example, *remote], where)
            commands = {
                label: [sys.executable, "-c", ENTRY, "get", "workloads", *remote] for label in trees
            }
            floor_command = [sys.executable, "-c", "pass"]
            for label, command in commands.items():  # warm the file cache once
                wall(command, environment(trees[label]), where)
            floor: list[tuple[float, float]] = []
            took: dict[str, list[tuple[float, float]]] = {label: [] for label in trees}
            for _ in range(calls):
                floor.append(wall(floor_command, environment(TREE), where))
                for label, command in commands.items():
                    took[label].append(wall(command, environment(trees[label]), where))
            imports = {label: import_ms(tree, 5, where) for label, tree in trees.items()}
        finally:
            process.terminate()
            process.wait(10)
    python_s = statistics.median(took for took, _ in floor)
    return {
        "python_c_pass_median_s": round(python_s, 4),
        "python_c_pass_median_cpu_s": round(statistics.median(cpu for _, cpu in floor), 4),
        "cli": {
            label: {**summary(took[label], python_s), "import_ms": round(imports[label], 1)}
            for label in trees
        },
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# CLI speed: `gpufleet get workloads` against a running server",
        "",
        f"`{result['command']}` on {result['machine']} (1-minute load {result['load_before']} "
        f"before the run, {result['load_after']} after; the machine is shared). Each of "
        f"{result['calls']} rounds runs `python -c pass` and each CLI once, each a fresh "
        "process against the same `gpufleet serve` (simulated cluster, one workload). Import: "
        "the median CPU time of 5 fresh processes importing `gpufleet.cli.main` and "
        "`gpufleet.cli.remote`.",
        "",
        "| CLI | median wall (s) | p90 wall (s) | median / `python -c pass` | median CPU (s) "
        "| import (CPU ms) |",
        "|---|---|---|---|---|---|",
    ]
    for label, row in result["cli"].items():
        lines.append(
            f"| {label} | {row['median_s']:.3f} | {row['p90_s']:.3f} | "
            f"{row['ratio_to_python']:.1f}x | {row['median_cpu_s']:.3f} | {row['import_ms']:.0f} |"
        )
    floor_s, floor_cpu = result["python_c_pass_median_s"], result["python_c_pass_median_cpu_s"]
    lines += [
        f"| `python -c pass` | {floor_s:.3f} | | 1.0x | {floor_cpu:.3f} | |",
        "",
        f"Target (issue 33 item 4): within {TARGET_S} s wall on this machine.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--compare", type=Path, help="another checkout's CLI, timed alongside")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    trees = {"this tree": TREE}
    if args.compare is not None:
        trees[f"{args.compare}"] = args.compare.resolve()
    load_before = round(os.getloadavg()[0], 2)
    result: dict[str, Any] = {
        "command": " ".join(["python benchmarks/cli_speed.py", *sys.argv[1:]]),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "calls": args.calls,
        "load_before": load_before,
        **measure(args.calls, trees),
    }
    result["load_after"] = round(os.getloadavg()[0], 2)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "cli_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (args.results / "cli_speed.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
