"""The control plane's telemetry store at fleet scale: memory for 1,000 GPUs x 5 metrics over
30 days, the time of one snapshot append and of window queries over every series.

    python benchmarks/telemetry_store.py [--gpus 1000 --repeats 5]

Builds a ``SeriesStore`` of the five device metrics (utilisation, memory used, temperature,
power, XID) for ``--gpus`` GPUs (8 per node) at the default shape (fine: 15 s x 5,760; coarse:
10 min x 4,320) and fills it: one snapshot every coarse step for the 29 oldest days (every coarse
bucket holds a point) and one every 15 s for the last day (every fine point holds one), values
drawn at random within each metric's range. Measured: the arrays' bytes (``nbytes``) and the
process' resident memory before the store was made and after it was filled (VmRSS delta);
the median time of one vectorised append of a whole snapshot (``--gpus`` x 5 values) on the
full store; and the median time of window queries over all series of a metric: 1 h average
(fine ring), 1 h 95th percentile, 7 d average (coarse ring), and 1 h average per node (grouped).
Target (issue 14): memory at most 200 MB. Results: benchmarks/results/telemetry_store.md and
.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import DEVICE_METRICS, StoreShape

RESULTS = Path(__file__).resolve().parent / "results"
GPUS_PER_NODE = 8
DAY = 86_400
TARGET_MB = 200.0


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def median_s(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def build(gpus: int) -> tuple[SeriesStore, np.ndarray[Any, np.dtype[np.int64]], float]:
    """A full store, its ids in snapshot order, and the time of its newest snapshot."""
    shape = StoreShape()
    store = SeriesStore(DEVICE_METRICS, shape, capacity=gpus * len(DEVICE_METRICS))
    ids = np.concatenate(
        [
            store.add_many(
                spec.name,
                (
                    {"node": f"node-{g // GPUS_PER_NODE}", "gpu": str(g % GPUS_PER_NODE)}
                    for g in range(gpus)
                ),
            )
            for spec in DEVICE_METRICS
        ]
    )
    lo = np.repeat([spec.lo for spec in DEVICE_METRICS], gpus)
    hi = np.repeat([spec.hi for spec in DEVICE_METRICS], gpus)
    rng = np.random.default_rng(14)
    start = 1_700_000_000 - 1_700_000_000 % shape.coarse_step_s
    fine_from = start + shape.coarse_span_s - shape.fine_span_s
    t = float(start)
    while t < fine_from:
        store.append(t, ids, rng.uniform(lo, hi))
        t += shape.coarse_step_s
    while t < start + shape.coarse_span_s:
        store.append(t, ids, rng.uniform(lo, hi))
        t += shape.fine_step_s
    return store, ids, t - shape.fine_step_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    before = rss_bytes()
    fill_start = time.perf_counter()
    store, ids, now = build(args.gpus)
    fill_s = time.perf_counter() - fill_start
    rss_delta = rss_bytes() - before
    util = "DCGM_FI_DEV_GPU_UTIL"
    shape = store.shape
    rng = np.random.default_rng(15)
    snapshot = rng.uniform(0, 100, ids.size)
    clock = [now]

    def append() -> None:
        clock[0] += StoreShape().fine_step_s
        store.append(clock[0], ids, snapshot)

    timings = {
        "append_snapshot_ms": median_s(append, args.repeats) * 1e3,
        "avg_1h_all_util_ms": median_s(
            lambda: store.query(util, "avg", 3_600, clock[0]), args.repeats
        )
        * 1e3,
        "p95_1h_all_util_ms": median_s(
            lambda: store.query(util, "quantile", 3_600, clock[0], quantile=0.95), args.repeats
        )
        * 1e3,
        "avg_7d_all_util_ms": median_s(
            lambda: store.query(util, "avg", 7 * DAY, clock[0]), args.repeats
        )
        * 1e3,
        "avg_1h_by_node_ms": median_s(
            lambda: store.query(util, "avg", 3_600, clock[0], by=("node",), across="avg"),
            args.repeats,
        )
        * 1e3,
        "avg_1h_every_metric_ms": median_s(
            lambda: [store.query(spec.name, "avg", 3_600, clock[0]) for spec in DEVICE_METRICS],
            args.repeats,
        )
        * 1e3,
    }
    result = {
        "gpus": args.gpus,
        "series": len(store),
        "repeats": args.repeats,
        "shape": {
            "fine": f"{shape.fine_step_s} s x {shape.fine_points:,} (1 day)",
            "coarse": f"{shape.coarse_step_s // 60} min x {shape.coarse_points:,} (30 days)",
        },
        "coarse_snapshots": (shape.coarse_span_s - shape.fine_span_s) // shape.coarse_step_s,
        "fine_snapshots": shape.fine_points,
        "arrays_mb": store.nbytes / 1e6,
        "rss_delta_mb": rss_delta / 1e6,
        "target_mb": TARGET_MB,
        "fill_s": fill_s,
        **timings,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "telemetry_store.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "telemetry_store.md").write_text(report(result))
    print(report(result))
    return 0 if result["arrays_mb"] <= TARGET_MB and result["rss_delta_mb"] <= TARGET_MB else 1


def report(r: dict[str, Any]) -> str:
    return f"""# Telemetry store: memory and speed at fleet scale

`python benchmarks/telemetry_store.py --gpus {r["gpus"]} --repeats {r["repeats"]}` (Python
{r["python"]}, numpy {r["numpy"]}, {r["machine"]}; a shared machine, medians of
{r["repeats"]}). {r["gpus"]:,} GPUs x 5 device metrics = {r["series"]:,} series, fine ring
{r["shape"]["fine"]}, coarse ring {r["shape"]["coarse"]}, every point filled.

| | measured | target |
|---|---|---|
| arrays (`SeriesStore.nbytes`) | **{r["arrays_mb"]:.1f} MB** | ≤ {r["target_mb"]:.0f} MB |
| process RSS delta (made, filled) | {r["rss_delta_mb"]:.1f} MB | ≤ {r["target_mb"]:.0f} MB |
| one snapshot append ({r["series"]:,} values) | {r["append_snapshot_ms"]:.2f} ms | |
| `avg` 1 h, {r["gpus"]:,} utilisation series (fine) | {r["avg_1h_all_util_ms"]:.2f} ms | |
| `quantile` 0.95 over 1 h, same series | {r["p95_1h_all_util_ms"]:.2f} ms | |
| `avg` 7 d, same series (coarse) | {r["avg_7d_all_util_ms"]:.2f} ms | |
| `avg` over 1 h, then `avg by (node)` | {r["avg_1h_by_node_ms"]:.2f} ms | |
| `avg` 1 h, all 5 metrics ({r["series"]:,} series) | {r["avg_1h_every_metric_ms"]:.2f} ms | |

Filling the store ({r["coarse_snapshots"]:,} coarse snapshots, then {r["fine_snapshots"]:,} fine
ones) took {r["fill_s"]:.0f} s. Why these numbers: a fine point is a `uint16` code over the
metric's range and a coarse point three `uint8` codes (mean, max, min), 25 KB a series in all;
float32 points would take 75 KB a series, 375 MB for this fleet (see
gpufleet/telemetry/series_layout.py).
"""


if __name__ == "__main__":
    sys.exit(main())
