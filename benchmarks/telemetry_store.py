"""The control plane's telemetry store at fleet scale, built as ``gpufleet serve`` builds it:
process memory for 1,000 GPUs x 5 device metrics and a workload series per pod over 30 days,
how long a save holds the observatory's lock, and the time of window queries.

    python benchmarks/telemetry_store.py [--gpus 1000 --pods-per-day 5000 --repeats 3]
        [--label after]

Each configuration (no pods, then ``--pods-per-day``) runs in a fresh subprocess, so its
resident memory is its own. The subprocess makes a ``LiveObserving`` over a fake plane
with a real SQLite ``Store`` (what ``serve`` makes: the default ``SeriesStore()``, grown as
series appear), and drives its observatory round by round with readings of ``--gpus`` GPUs (8
per node, dcgm-exporter's labels) and the pods that run then, each holding one GPU and tagged
with a queue, tenant, workload and kind, so the ``SeriesRecorder`` keeps a workload series per
pod and drops it a day after the pod ended, as in ``serve``. Pods start uniformly over the 30
days, ``--pods-per-day`` a day, and run 10 minutes to 6 hours. Rounds: one every 10 minutes
(every coarse bucket holds a point, and every fine chunk of the last day is made), then one
every 15 s for the last ``--fine-hours`` (a round every 15 s for a whole day would take an
hour of this shared machine; the arrays are allocated whole, so memory does not depend on how
many fine points are filled). No alert rules are evaluated (they add no memory).

Measured, per configuration: the process' resident memory (VmRSS) after the imports, after the
build and its peak (VmHWM); the store's arrays (``nbytes``) and series; then the saves: a first
save of the whole store and ``--repeats`` saves after 300 s more of rounds each (``serve``
saves every ``SAVE_EVERY_S`` = 300 s of the plane's clock), each timed as the observatory
lock's hold (the lock the plane's rounds and the API's queries wait for) and as a whole; and
the median time of one round's append and of window queries over every utilisation series.
Targets (issue 29 items 12-13): RSS at most 200 MB with 5,000 pods a day, a save's hold of
the observatory lock at most 50 ms. Results: benchmarks/results/telemetry_store[_<label>].md
and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from gpufleet.model.telemetry import DeviceSample, DeviceUser
from gpufleet.service.live_observing import LiveObserving
from gpufleet.service.records import WorkloadRecord
from gpufleet.service.store import Store
from gpufleet.telemetry.recording import PodKey, PodTags
from gpufleet.telemetry.source import NodeTelemetry, TelemetrySource

RESULTS = Path(__file__).resolve().parent / "results"
GPUS_PER_NODE = 8
DAY = 86_400
COARSE_S = 600
FINE_S = 15
SAVE_EVERY_S = 300
TARGET_MB = 200.0
TARGET_LOCK_MS = 50.0


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no {field} in /proc/self/status")


def median_s(action: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class TimedLock:
    """An RLock that records how long each outermost hold lasted (seconds)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._since = 0.0
        self.holds: list[float] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._depth += 1
            if self._depth == 1:
                self._since = time.perf_counter()
        return got

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.holds.append(time.perf_counter() - self._since)
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class FakePlane:
    """What ``LiveObserving`` needs of a plane: a lock, records, a store and a clock."""

    def __init__(self, store: Store) -> None:
        self.lock = threading.RLock()
        self.records: dict[str, WorkloadRecord] = {}
        self.telemetry: TelemetrySource | None = None
        self.store = store
        self.clock = 0.0

    def now(self) -> float:
        return self.clock


class Fleet:
    """The readings of ``gpus`` GPUs and the pods of ``pods_per_day`` over ``days``."""

    def __init__(self, gpus: int, pods_per_day: int, days: int, start: float) -> None:
        rng = np.random.default_rng(29)
        self.gpus = gpus
        self.nodes = [f"node-{n:04d}" for n in range((gpus + GPUS_PER_NODE - 1) // GPUS_PER_NODE)]
        total = pods_per_day * days
        self.pod_start = np.sort(rng.uniform(start - 6 * 3_600, start + days * DAY, total))
        self.pod_end = self.pod_start + rng.uniform(600, 6 * 3_600, total)
        self.pod_gpu = rng.integers(0, gpus, total)
        # A few readings of every GPU, cycled (their values matter little to memory).
        self.samples = [
            [
                DeviceSample(
                    gpu=g % GPUS_PER_NODE,
                    uuid=f"GPU-{g:08d}",
                    model="NVIDIA H100 80GB HBM3",
                    gpu_util=float(rng.uniform(0, 100)),
                    fb_used_mib=int(rng.integers(0, 81_559)),
                    fb_free_mib=81_559,
                    temperature_c=float(rng.uniform(30, 85)),
                    power_w=float(rng.uniform(60, 700)),
                    xid=0,
                )
                for g in range(gpus)
            ]
            for _ in range(4)
        ]

    def at(self, now: float, round_: int) -> tuple[list[NodeTelemetry], dict[PodKey, PodTags]]:
        first = int(np.searchsorted(self.pod_start, now - 6 * 3_600))
        last = int(np.searchsorted(self.pod_start, now, side="right"))
        live = [i for i in range(first, last) if self.pod_end[i] > now]
        samples = self.samples[round_ % len(self.samples)]
        users: dict[int, list[DeviceUser]] = {}
        tags: dict[PodKey, PodTags] = {}
        for i in live:
            gpu = int(self.pod_gpu[i])
            pod = f"job-{i}-worker-0"
            users.setdefault(gpu // GPUS_PER_NODE, []).append(
                DeviceUser(samples[gpu].uuid, pod, "team-" + str(i % 4), "main")
            )
            tags[("team-" + str(i % 4), pod)] = PodTags(
                queue=f"queue-{i % 8}", tenant=f"tenant-{i % 4}", workload=f"job-{i}", kind="job"
            )
        readings = [
            NodeTelemetry(
                hostname,
                samples[n * GPUS_PER_NODE : (n + 1) * GPUS_PER_NODE],
                users.get(n, ()),
            )
            for n, hostname in enumerate(self.nodes)
        ]
        return readings, tags


def child(
    gpus: int, pods_per_day: int, days: int, repeats: int, fine_hours: float
) -> dict[str, Any]:
    """One configuration, in this process: see the module docstring."""
    rss_start = status_mb("VmRSS")
    start = 1_700_000_000.0 - 1_700_000_000 % COARSE_S
    fleet = Fleet(gpus, pods_per_day, days, start)
    with tempfile.TemporaryDirectory() as folder:
        plane = FakePlane(Store(Path(folder) / "plane.db"))
        observing = LiveObserving(plane, [])
        observatory = observing.observatory
        lock = TimedLock()
        observatory.lock = lock  # type: ignore[assignment]
        rounds = [0]

        def observe(now: float) -> None:
            plane.clock = now
            readings, tags = fleet.at(now, rounds[0])
            observatory.observe(now, readings, tags)
            rounds[0] += 1

        rss_base = status_mb("VmRSS")
        build_start = time.perf_counter()
        t = start
        fine_from = start + days * DAY - fine_hours * 3_600
        while t < fine_from:
            observe(t)
            t += COARSE_S
        round_times = []
        while t < start + days * DAY:
            began = time.perf_counter()
            observe(t)
            round_times.append(time.perf_counter() - began)
            t += FINE_S
        build_s = time.perf_counter() - build_start
        rss_built = status_mb("VmRSS")
        store = observing.recorder.store

        def save() -> tuple[float, float]:
            lock.holds.clear()
            began = time.perf_counter()
            observing.save(t)
            return max(lock.holds), time.perf_counter() - began

        first_hold, first_total = save()
        holds, totals = [], []
        for _ in range(repeats):
            for _ in range(SAVE_EVERY_S // FINE_S):
                observe(t)
                t += FINE_S
            hold, total = save()
            holds.append(hold)
            totals.append(total)
        db_mb = (Path(folder) / "plane.db").stat().st_size / 1e6
        now = t - FINE_S
        util = "DCGM_FI_DEV_GPU_UTIL"
        workload = "gpufleet_workload_gpu_util"
        queries = {
            "avg_1h_all_util_ms": 1e3
            * median_s(lambda: store.query(util, "avg", 3_600, now), repeats),
            "avg_7d_all_util_ms": 1e3
            * median_s(lambda: store.query(util, "avg", 7 * DAY, now), repeats),
            "avg_1h_by_queue_ms": 1e3
            * median_s(lambda: store.query(workload, "avg", 3_600, now, by=("queue",)), repeats),
        }
        restore_began = time.perf_counter()
        again, _ = LiveObserving._restored_store(plane.store, store.shape)
        restore_s = time.perf_counter() - restore_began
        restored_same = len(again) == len(store) and again.query(
            util, "avg", 7 * DAY, now
        ) == store.query(util, "avg", 7 * DAY, now)
        del again
        plane.store.close()
    return {
        "gpus": gpus,
        "pods_per_day": pods_per_day,
        "days": days,
        "fine_hours": fine_hours,
        "series": len(store),
        "workload_series": len(store.series("gpufleet_workload_gpu_util")),
        "arrays_mb": store.nbytes / 1e6,
        "rss_start_mb": rss_start,
        "rss_base_mb": rss_base,
        "rss_built_mb": rss_built,
        "rss_peak_mb": status_mb("VmHWM"),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6,
        "build_s": build_s,
        "round_ms": statistics.median(round_times) * 1e3,
        "first_save_lock_ms": first_hold * 1e3,
        "first_save_ms": first_total * 1e3,
        "save_lock_ms": statistics.median(holds) * 1e3,
        "save_lock_max_ms": max(holds) * 1e3,
        "save_ms": statistics.median(totals) * 1e3,
        "db_mb": db_mb,
        "restore_s": restore_s,
        "restored_same": restored_same,
        **queries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1_000)
    parser.add_argument("--pods-per-day", type=int, default=5_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fine-hours", type=float, default=2.0)
    parser.add_argument("--label", default="", help="suffix of the results' file names")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.gpus, args.child, args.days, args.repeats, args.fine_hours)))
        return 0
    configs = []
    for pods in (0, args.pods_per_day):
        command = [sys.executable, __file__, "--gpus", str(args.gpus), "--days", str(args.days)]
        command += ["--repeats", str(args.repeats), "--fine-hours", str(args.fine_hours)]
        command += ["--child", str(pods)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        configs.append(json.loads(out.strip().splitlines()[-1]))
        print(json.dumps(configs[-1]), flush=True)
    result = {
        "configs": configs,
        "repeats": args.repeats,
        "target_mb": TARGET_MB,
        "target_lock_ms": TARGET_LOCK_MS,
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    name = "telemetry_store" + (f"_{args.label}" if args.label else "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(report(result))
    print(report(result))
    full = configs[-1]
    ok = full["rss_peak_mb"] <= TARGET_MB and full["save_lock_max_ms"] <= TARGET_LOCK_MS
    return 0 if ok else 1


HEAD = (
    "| pods a day | series (workload) | arrays MB | RSS base | RSS built | RSS peak "
    "| first save | save every 300 s | db MB | restore s | round ms "
    "| query ms: avg 1 h / 7 d / by queue |\n" + "|---" * 12 + "|"
)


def report(r: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {c['pods_per_day']:,} | {c['series']:,} ({c['workload_series']:,}) "
        f"| {c['arrays_mb']:.1f} | {c['rss_base_mb']:.0f} | **{c['rss_built_mb']:.0f}** "
        f"| {c['rss_peak_mb']:.0f} | {c['first_save_lock_ms']:.0f} / {c['first_save_ms']:.0f} "
        f"| **{c['save_lock_ms']:.1f}** (max {c['save_lock_max_ms']:.1f}) / {c['save_ms']:.0f} "
        f"| {c['db_mb']:.0f} | {c['restore_s']:.1f} | {c['round_ms']:.1f} "
        f"| {c['avg_1h_all_util_ms']:.1f} / {c['avg_7d_all_util_ms']:.1f} "
        f"/ {c['avg_1h_by_queue_ms']:.1f} |"
        for c in r["configs"]
    )
    first = r["configs"][0]
    load = ", ".join(f"{x:.2f}" for x in r["load_average"])
    return f"""# Telemetry store: memory and saves at fleet scale, built as `serve` builds it

`python benchmarks/telemetry_store.py --gpus {first["gpus"]} --repeats {r["repeats"]}` (Python
{r["python"]}, numpy {r["numpy"]}, {r["machine"]}; a shared machine, load average {load} at the
end; medians of {r["repeats"]}). {first["gpus"]:,} GPUs x 5 device metrics over
{first["days"]} days (rounds every 10 min, the last {first["fine_hours"]:g} h every 15 s), with
pods a day as below, each its own workload series; one
subprocess per row. RSS: the process' VmRSS after the imports (base), after the
{first["days"]} days (built) and its peak (VmHWM), in MB. Saves: the observatory lock's
hold / the whole save, in ms (first: everything; then after 300 s of rounds, as `serve`).

{HEAD}
{rows}

Targets: RSS ≤ {r["target_mb"]:.0f} MB with 5,000 pods a day; a save holds the observatory
lock ≤ {r["target_lock_ms"]:.0f} ms.
"""


if __name__ == "__main__":
    sys.exit(main())
