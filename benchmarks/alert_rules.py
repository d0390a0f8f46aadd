"""Rule evaluation at fleet scale: the built-in alert rules over 10,000 GPUs and 5,000
workloads, one evaluation round after another, as ``gpufleet serve`` runs them.

    python benchmarks/alert_rules.py [--gpus 10000 --workloads 5000 --warmup 20 --rounds 40]

"Device series" means the GPUs' series: each of ``--gpus`` GPUs (8 per node) has the five
stored device metrics (utilisation, memory used, temperature, power, XID: 5 x ``--gpus``
stored series); the rules also see memory in percent, derived from the stored MiB (so each
device rule looks at ``--gpus`` series). ``--workloads`` pods hold two GPUs each (so
``--workloads`` <= ``--gpus`` / 2) and have a ``gpufleet_workload_gpu_util`` series and a start
time (half started more than an hour ago). The store (``SeriesStore``, default shape) is filled
with a day of 15 s snapshots (5,760), values drawn at random within each metric's range
(utilisation 0..100, memory 0..80 GiB of 80 GiB, temperature 30..90 C, XID 0 but on 1 GPU in
1,000), anew at every snapshot: about 1,900 GPUs cross the memory or temperature threshold each
round and most of them not the next, so alerts are made and dropped by the thousand every round,
far more than a real fleet's. Then ``--warmup`` rounds, then ``--rounds`` rounds: each appends
one snapshot 15 s later (timed apart) and runs ``RuleEngine.evaluate`` with the built-in rules
(gpufleet/data/alert_rules.yaml) over the embedded plane's query view (``ObservedSeries``,
holders' labels added as dcgm-exporter does). The warm-up rounds are reported apart: in them
the engine and the view make each GPU's alert labels the first time its value crosses a
threshold, which a server does once in its life. Measured: the median and 95th percentile of
one round's evaluation, and of one append.
Target (issue 14): at most 100 ms a round. Results: benchmarks/results/alert_rules.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.io.fleet.alert_rules import builtin_alert_rules
from gpufleet.model.alerts import AlertMetric, AlertState
from gpufleet.model.telemetry import DeviceUser
from gpufleet.telemetry.observed_series import ObservedSeries
from gpufleet.telemetry.recording import PodKey, SeriesRecorder
from gpufleet.telemetry.rules import RuleEngine
from gpufleet.telemetry.series import SeriesStore
from gpufleet.telemetry.series_layout import DEVICE_METRICS, RULE_METRICS, StoreShape, as_labels

RESULTS = Path(__file__).resolve().parent / "results"
GPUS_PER_NODE = 8
GPUS_PER_WORKLOAD = 2
MEMORY_MIB = 81_920.0
DAY = 86_400
TARGET_MS = 100.0


def build(
    gpus: int, workloads: int, rng: np.random.Generator, fill_hours: float = 24.0
) -> tuple[SeriesRecorder, ObservedSeries, np.ndarray[Any, np.dtype[np.int64]], float]:
    """A recorder whose store holds ``fill_hours`` of snapshots (a day: the fine ring full),
    the query view over it, the ids of one snapshot (device metrics, then workloads) and the
    time of the newest snapshot."""
    shape = StoreShape()
    store = SeriesStore(RULE_METRICS, shape, capacity=gpus * len(DEVICE_METRICS) + workloads)
    recorder = SeriesRecorder(store)
    devices = [
        as_labels(
            {
                "Hostname": f"node-{g // GPUS_PER_NODE}",
                "gpu": str(g % GPUS_PER_NODE),
                "UUID": f"GPU-{g:08d}",
                "modelName": "NVIDIA H100 80GB HBM3",
            }
        )
        for g in range(gpus)
    ]
    ids = [store.add_many(spec.name, devices) for spec in DEVICE_METRICS]
    pods = [(f"team-{w % 20}", f"pod-{w}") for w in range(workloads)]
    ids.append(
        store.add_many(
            AlertMetric.WORKLOAD_GPU_UTIL.value,
            ({"namespace": ns, "pod": pod, "queue": ns} for ns, pod in pods),
        )
    )
    for g, labels in enumerate(devices):
        uuid = dict(labels)["UUID"]
        recorder.devices[uuid] = labels
        recorder.memory_mib[uuid] = MEMORY_MIB
        if g < workloads * GPUS_PER_WORKLOAD:
            namespace, pod = pods[g // GPUS_PER_WORKLOAD]
            recorder.holders[uuid] = (DeviceUser(uuid, pod, namespace, "main"),)
    now = float(1_700_000_000 - 1_700_000_000 % shape.fine_step_s)
    starts: dict[PodKey, float] = {
        pod: now - (2 * 3_600 if i % 2 else 1_800) for i, pod in enumerate(pods)
    }
    series = ObservedSeries(recorder, lambda: starts)
    every = np.concatenate(ids)
    points = min(shape.fine_points, int(fill_hours * 3600 / shape.fine_step_s))
    first = now - (points - 1) * shape.fine_step_s
    for step in range(points):
        store.append(first + step * shape.fine_step_s, every, snapshot(gpus, workloads, rng))
    return recorder, series, every, now


def snapshot(gpus: int, workloads: int, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """One reading of every series, in the order of ``build``'s ids."""
    util = rng.uniform(0, 100, gpus)
    xid = np.where(rng.random(gpus) < 0.001, 79.0, 0.0)
    held = util[: workloads * GPUS_PER_WORKLOAD].reshape(workloads, GPUS_PER_WORKLOAD)
    return np.concatenate(
        [
            util,
            rng.uniform(0, MEMORY_MIB, gpus),
            rng.uniform(30, 90, gpus),
            rng.uniform(60, 700, gpus),
            xid,
            held.mean(axis=1),
        ]
    )


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--workloads", type=int, default=5_000)
    parser.add_argument("--warmup", type=int, default=20, help="rounds before the measured ones")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--fill-hours",
        type=float,
        default=24.0,
        help="hours of snapshots before the rounds (24: the fine ring full, as after a day; "
        "the rules look back at most 1 h, so 2 is a quick run)",
    )
    args = parser.parse_args()
    if args.workloads * GPUS_PER_WORKLOAD > args.gpus:
        parser.error(f"--workloads holds {GPUS_PER_WORKLOAD} GPUs each: at most --gpus / 2")
    load = os.getloadavg()[0]
    rng = np.random.default_rng(14)
    fill_start = time.perf_counter()
    recorder, series, ids, now = build(args.gpus, args.workloads, rng, args.fill_hours)
    fill_s = time.perf_counter() - fill_start
    rules = builtin_alert_rules()
    engine = RuleEngine(rules)
    step = float(recorder.store.shape.fine_step_s)
    engine.evaluate(series, now)  # the first round makes every alert: not a steady round
    evaluate_ms: list[float] = []
    append_ms: list[float] = []
    warmup_ms: list[float] = []
    for round_ in range(args.warmup + args.rounds):
        now += step
        values = snapshot(args.gpus, args.workloads, rng)
        start = time.perf_counter()
        recorder.store.append(now, ids, values)
        appended = (time.perf_counter() - start) * 1e3
        start = time.perf_counter()
        engine.evaluate(series, now)
        evaluated = (time.perf_counter() - start) * 1e3
        if round_ < args.warmup:
            warmup_ms.append(evaluated)
        else:
            evaluate_ms.append(evaluated)
            append_ms.append(appended)
    alerts = engine.alerts()
    result = {
        "gpus": args.gpus,
        "workloads": args.workloads,
        "stored_series": len(recorder.store),
        "rules": [rule.name for rule in rules],
        "rounds": args.rounds,
        "warmup": args.warmup,
        "warmup_median_ms": statistics.median(warmup_ms) if warmup_ms else None,
        "warmup_p95_ms": percentile(warmup_ms, 95) if warmup_ms else None,
        "fill_hours": args.fill_hours,
        "load_before": load,
        "fill_s": fill_s,
        "evaluate_median_ms": statistics.median(evaluate_ms),
        "evaluate_p95_ms": percentile(evaluate_ms, 95),
        "append_median_ms": statistics.median(append_ms),
        "append_p95_ms": percentile(append_ms, 95),
        "target_ms": TARGET_MS,
        "alerts_pending": sum(a.state is AlertState.PENDING for a in alerts),
        "alerts_firing": sum(a.state is AlertState.FIRING for a in alerts),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "alert_rules.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "alert_rules.md").write_text(report(result))
    print(report(result))
    return 0 if result["evaluate_p95_ms"] <= TARGET_MS else 1


def report(r: dict[str, Any]) -> str:
    evaluate = f"**{r['evaluate_median_ms']:.1f} ms** | {r['evaluate_p95_ms']:.1f} ms"
    append = f"{r['append_median_ms']:.1f} ms | {r['append_p95_ms']:.1f} ms"
    warm = (
        f"{r['warmup_median_ms']:.1f} ms | {r['warmup_p95_ms']:.1f} ms"
        if r["warmup_median_ms"] is not None
        else "- | -"
    )
    return f"""# Alert rules: one evaluation round at fleet scale

`python benchmarks/alert_rules.py --gpus {r["gpus"]} --workloads {r["workloads"]} --warmup
{r["warmup"]} --rounds {r["rounds"]} --fill-hours {r["fill_hours"]:g}` (Python {r["python"]},
numpy {r["numpy"]}, {r["machine"]}; a shared 2-core machine, load {r["load_before"]:.2f} before).
{r["gpus"]:,} GPUs x 5 stored device metrics and {r["workloads"]:,} workload series
({r["stored_series"]:,} stored series; memory in percent derived from the MiB), a day of 15 s
snapshots each, values drawn anew at every snapshot (see the script); the
{len(r["rules"])} built-in rules ({", ".join(r["rules"])}) evaluated by `RuleEngine` over the
embedded plane's query view, {r["warmup"]} warm-up rounds then {r["rounds"]} measured rounds,
15 s apart, each after one snapshot appended.

| | median | p95 | target |
|---|---|---|---|
| one evaluation round | {evaluate} | ≤ {r["target_ms"]:.0f} ms |
| one round while warming up (each GPU's alert labels made once) | {warm} | |
| one snapshot append | {append} | |

After the last round: {r["alerts_pending"]:,} alerts pending, {r["alerts_firing"]:,} firing
(random values: the memory and temperature rules hold on some GPUs at every round). Filling the
store took {r["fill_s"]:.0f} s.
"""


if __name__ == "__main__":
    sys.exit(main())
