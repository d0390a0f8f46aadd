"""``gpufleet traces``: fetch public traces, locate them, derive variants and shape tables."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)

from gpufleet.backends.sim.variants import VariantKind, make_variant
from gpufleet.backends.sim.workloads import QUANTILES, shape_table
from gpufleet.cli.inputs import EXIT_FAILED, console, ensure_dir, fail, friendly_errors
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods, write_pods
from gpufleet.io.cluster_traces.datasets import (
    ALIBABA_2023,
    DATASETS,
    DEFAULT_FETCH_DIR,
    TRACE_DIR_ENV,
    fetch_dataset,
    find_alibaba_trace,
    trace_search_path,
)
from gpufleet.io.cluster_traces.shapes import BUNDLED_RUNTIMES, BUNDLED_SHAPES, write_shape_table

app = typer.Typer(help="Public GPU-cluster traces.", no_args_is_help=True)


@app.command("fetch")
def fetch(
    dataset: Annotated[str, typer.Argument(help="Dataset name: " + ", ".join(DATASETS))],
    directory: Annotated[
        Path,
        typer.Option(
            "--dir", help="Where to put the files (the default is where the trace is looked for)."
        ),
    ] = DEFAULT_FETCH_DIR,
    variants: Annotated[
        bool, typer.Option(help="Also fetch the trace's variant pod lists.")
    ] = False,
    base_url: Annotated[
        str | None, typer.Option(help="Mirror to download from instead of the public one.")
    ] = None,
) -> None:
    """Download a public trace (needs internet; files are verified where checksums are known)."""
    _fetch(dataset, directory, variants, base_url)


@friendly_errors
def _fetch(dataset: str, directory: Path, variants: bool, base_url: str | None) -> None:
    spec = DATASETS.get(dataset)
    if spec is None:
        raise fail(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
    ) as progress:
        bars: dict[str, TaskID] = {}

        def update(name: str, done: int, total: int | None) -> None:
            if name not in bars:
                bars[name] = progress.add_task(name, total=total)
            progress.update(bars[name], completed=done, total=total)

        files = fetch_dataset(spec, directory, base_url, variants, update)
    console.print(f"{len(files)} files in {directory}")
    if spec.name == ALIBABA_2023.name and find_alibaba_trace() != directory.resolve():
        console.print(
            f"gpufleet looks elsewhere first (`gpufleet traces locate`); to use these: "
            f"export {TRACE_DIR_ENV}={directory.resolve()}"
        )


@app.command("locate")
def locate() -> None:
    """Print where the Alibaba 2023 trace was found; else where it was looked for, in order.

    The order: $GPUFLEET_ALIBABA_TRACE_DIR (only there when set); ./traces/alibaba-gpu-2023
    (where `traces fetch` writes); shared/traces/alibaba-gpu-2023 here or in a parent; the
    user's data directory. `make demo`, `simulate`, the benchmarks and the tests look there too.
    """
    found = find_alibaba_trace()
    if found is None:
        places = "; ".join(str(p) for p in trace_search_path())
        raise fail(
            f"no local copy of the Alibaba 2023 trace (looked in: {places}); get it with "
            f"`gpufleet traces fetch alibaba-2023`",
            EXIT_FAILED,
        )
    console.print(str(found))


@app.command("variant")
def variant(
    pods: Annotated[Path, typer.Option(help="Pod list CSV to resample.")],
    kind: Annotated[VariantKind, typer.Option(help="Which kind of pod to make more common.")],
    percent: Annotated[float, typer.Option(help="Share of pods (see docs) of that kind.")],
    out: Annotated[Path, typer.Option(help="Output CSV.")],
    nodes: Annotated[
        Path | None, typer.Option(help="Node list CSV (gpuspec: GPU models to draw from).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Derive a pod-list variant (more sharing, multi-GPU, CPU-only or model-constrained pods)."""
    _variant(pods, kind, percent, out, nodes, seed)


@friendly_errors
def _variant(
    pods: Path, kind: VariantKind, percent: float, out: Path, nodes: Path | None, seed: int
) -> None:
    per_model: Counter[str] = Counter()
    if nodes is not None:
        for node in read_nodes(nodes):
            if node.gpu_model:
                per_model[node.gpu_model] += node.gpu_count
    elif kind is VariantKind.GPUSPEC:
        raise fail("--nodes is needed for a gpuspec variant (models are drawn from it)")
    try:
        result = make_variant(read_pods(pods), kind, percent, seed, per_model)
    except ValueError as error:
        raise fail(str(error)) from None
    write_pods(out, result)
    classes = Counter(str(t.pod.pod_class) for t in result)
    console.print(
        f"wrote {len(result)} pods to {out}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(classes.items()))
    )


@app.command("shapes")
def shapes(
    pods: Annotated[Path, typer.Option(help="Pod list CSV (with times, for run times).")],
    out_dir: Annotated[Path, typer.Option(help="Directory for the two CSV files.")] = Path("."),
) -> None:
    """Derive a shape table (pod shapes with counts, run-time quantiles) from a pod list."""
    _shapes(pods, out_dir)


@friendly_errors
def _shapes(pods: Path, out_dir: Path) -> None:
    table = shape_table(read_pods(pods))
    directory = ensure_dir(out_dir)
    write_shape_table(table, directory / BUNDLED_SHAPES, directory / BUNDLED_RUNTIMES, QUANTILES)
    console.print(
        f"{len(table.shapes)} shapes ({table.total} pods) -> {directory / BUNDLED_SHAPES}, "
        f"run-time quantiles -> {directory / BUNDLED_RUNTIMES}"
    )
