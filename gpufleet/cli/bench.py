"""``gpufleet bench fill``: the scriptable fill-up benchmark with a stable JSON contract.

Output: ``{"policy", "nodes", "pods", "runs": [{"seed", "seconds", "unallocated_gpu_pct":
{"0": .., ..., "130": ..}}], "median_unallocated_gpu_pct_at_100"}``. Runs also carry
``failure_rate_by_class_pct`` and ``fragmentation_pct_at_100``, and the top level carries
``node_count`` and ``pod_count`` (extra keys; the listed ones are the contract).
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Annotated

import typer

from gpufleet.backends.sim.batch import Scenario, Task
from gpufleet.backends.sim.cluster import Mode
from gpufleet.backends.sim.results import FillRun
from gpufleet.cli.inputs import check_policies, console, fail, friendly_errors, parse_seeds
from gpufleet.cli.simulate import DEFAULT_WORKERS, run_with_progress
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.model.workload import TimedPod
from gpufleet.report.summary import write_json

app = typer.Typer(help="Benchmarks with stable, scriptable output.", no_args_is_help=True)


@app.command("fill")
def fill(
    nodes: Annotated[Path, typer.Option(help="Alibaba node list CSV (GPU nodes are used).")],
    pods: Annotated[Path, typer.Option(help="Alibaba pod list CSV.")],
    policy: Annotated[str, typer.Option(help="Policy name.")],
    seeds: Annotated[str, typer.Option(help="Seeds, e.g. 42-51.")] = "42-51",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results here.")] = None,
    workers: Annotated[int, typer.Option(help="Processes.")] = DEFAULT_WORKERS,
    inflation: Annotated[float, typer.Option(help="Arrive until this x capacity.")] = 1.3,
) -> None:
    """Run the FGD protocol's fill-up experiment for one policy over seeds."""
    _fill(nodes, pods, policy, seeds, json_out, workers, inflation)


@friendly_errors
def _fill(
    nodes_path: Path,
    pods_path: Path,
    policy: str,
    seeds: str,
    json_out: Path | None,
    workers: int,
    inflation: float,
) -> None:
    check_policies([policy])
    seed_list = parse_seeds(seeds)
    all_nodes = read_nodes(nodes_path)
    gpu_nodes = [n for n in all_nodes if n.gpu_count]
    if not gpu_nodes:
        raise fail(f"{nodes_path}: no GPU nodes")
    if len(gpu_nodes) < len(all_nodes):
        console.print(f"using the {len(gpu_nodes)} GPU nodes of {len(all_nodes)} (the protocol's)")
    trace = read_pods(pods_path)
    scenario = Scenario(
        tuple(gpu_nodes), tuple(TimedPod(t.pod) for t in trace), Mode.FILL, None, inflation
    )
    results = run_with_progress(scenario, [Task(policy, s) for s in seed_list], workers)
    runs = [r for r in results if isinstance(r, FillRun)]
    payload = {
        "policy": policy,
        "nodes": str(nodes_path),
        "pods": str(pods_path),
        "node_count": len(gpu_nodes),
        "pod_count": len(trace),
        "runs": [
            {
                "seed": r.seed,
                "seconds": r.seconds,
                "unallocated_gpu_pct": {str(i): v for i, v in enumerate(r.unallocated_gpu_pct)},
                "fragmentation_pct_at_100": r.fragmentation_pct[100],
                "failure_rate_by_class_pct": {
                    cls: round(100.0 * s.failure_rate_by_100, 3) for cls, s in r.classes.items()
                },
            }
            for r in runs
        ],
        "median_unallocated_gpu_pct_at_100": round(median(r.unallocated_at_100 for r in runs), 4),
    }
    console.print(
        f"{policy}: median unallocated GPU % at 100% arrived = "
        f"{payload['median_unallocated_gpu_pct_at_100']} over seeds {seeds}; "
        f"median {median(r.seconds for r in runs):.2f} s/run"
    )
    if json_out is not None:
        write_json(json_out, payload)
        console.print(f"wrote {json_out}")
