"""``gpufleet demo`` (what ``make demo`` runs): the fill-up comparison on the embedded cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.backends.sim.cluster import Mode
from gpufleet.cli.inputs import console
from gpufleet.cli.simulate import DEFAULT_WORKERS, run_simulation
from gpufleet.io.cluster_traces.datasets import DEFAULT_FETCH_DIR, find_alibaba_trace


def demo(
    out: Annotated[Path, typer.Option(help="Directory for the report.")] = Path(
        "gpufleet-results/demo"
    ),
    seeds: Annotated[str, typer.Option(help="Seeds.")] = "42-44",
) -> None:
    """Compare bestfit, FGD and gpufleet's default policy on the bundled Alibaba-like cluster."""
    if find_alibaba_trace() is None:
        console.print(
            "The Alibaba 2023 trace is not on this machine, so the demo uses a synthetic "
            "workload drawn from the bundled shape table (derived from that trace). "
            f"Fetch the real one with `gpufleet traces fetch alibaba-2023` (into "
            f"{DEFAULT_FETCH_DIR}, where the demo looks; `gpufleet traces locate` lists where)."
        )
    run_simulation(
        cluster=None,
        workload=None,
        policy=["bestfit", "fgd", "default"],
        seeds=seeds,
        mode=Mode.FILL,
        out=out,
        workers=DEFAULT_WORKERS,
        inflation=1.3,
        load=None,
        max_runtime=None,
        synthetic=0,
        title="gpufleet demo: fill-up of the Alibaba-like cluster",
    )
