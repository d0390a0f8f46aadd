"""The control plane's telemetry store at fleet scale, built as ``gpufleet serve`` builds it:
process memory for 1,000 GPUs x 5 device metrics and a workload series per pod over 30 days,
how long a save holds the observatory's lock, and the time of window queries.

    python benchmarks/telemetry_store.py [--gpus 1000 --pods-per-day 0 1000 3200 5000]
        [--repeats 3 --jobs 1 --trace --label after]

Each run is a fresh subprocess, so its resident memory is its own; each configuration (pods a
day) runs ``--repeats`` times and its row holds the medians (``--jobs`` runs at once: memory
does not depend on it, times do). The subprocess makes a ``LiveObserving`` over a fake
plane with a real SQLite ``Store`` (what ``serve`` makes: the default ``SeriesStore()``, grown
as series appear, the heap settings of ``native_heap``), and drives its observatory round by
round with readings of ``--gpus`` GPUs (8 per node, dcgm-exporter's labels) and the pods that
ran since the last round, each holding one GPU and tagged with a queue, tenant, workload and
kind, so the ``SeriesRecorder`` keeps a workload series per pod, drops it a day after the pod
ended and keeps its usage summary 30 days, as in ``serve``; it saves as ``serve`` does (every
``SAVE_EVERY_S`` = 300 s of the plane's clock in the last ``--fine-hours``, every
``--save-every-s`` before). Pods start uniformly over the 30 days, ``--pods-per-day`` a day,
and run 10 minutes to 6 hours.

Time is compressed, but every point the store keeps is filled: a round every ``--round-s``
(10 minutes: a reading in every coarse bucket) until the last ``--fine-hours`` (24: the fine
ring's day), every 15 s in them. Memory depends on what was written: sealed chunks are kept
packed, so their size follows the readings' noise, and each round's readings are fresh
(``Fleet.readings``: a busy GPU's utilisation and temperature whole numbers with noise around
its level, power in milliwatts with 35 W of noise, memory steady, XIDs 0). A bucket before the
last day rolls up one reading (its mean, max and min are that reading, as noisy as a raw one:
no better for the packing than the 40 readings of ``serve``'s buckets). Every pod is seen (a
round sees the pods that ran since the one before), so each has its series, its columns in the
chunks of the hours and days it ran, and its summary. No alert rules are evaluated (they add
no memory).

Measured, per run: the process' resident memory (VmRSS) after the imports (base), after the
build (built), after the saves below, and its peak (VmHWM) before the benchmark's own check
that the saved store restores (a second store in the same process: reported apart); glibc's
heap in use and free (fragmentation) and its own mappings (``mallinfo2``); the store's arrays
(``nbytes``) and series; then the saves: a first save and ``SAVES`` saves after 300 s more
of rounds each, each timed as the observatory lock's hold (the lock the plane's rounds and
the API's queries wait for), as the CPU time of the thread holding it (``time.thread_time``:
what load does not stretch) and as a whole, with the bytes each wrote and the peak RSS of
those saves alone (VmHWM reset after the build); and the median time of one round and of
window queries. ``--trace``: tracemalloc's bytes by file after the build (slows the build down).
Targets (issue 29 items 12-13): RSS at most 200 MB with 5,000 pods a day, a save's hold of
the observatory lock at most 50 ms. Results: benchmarks/results/telemetry_store[_<label>].md
and .json.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
#: Saves measured after the build, each after 300 s more of rounds.
SAVES = 5
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
        self._since_cpu = 0.0
        self.holds: list[float] = []
        #: The CPU time the holding thread spent in each hold (what load does not stretch).
        self.cpu: list[float] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._depth += 1
            if self._depth == 1:
                self._since = time.perf_counter()
                self._since_cpu = time.thread_time()
        return got

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.holds.append(time.perf_counter() - self._since)
            self.cpu.append(time.thread_time() - self._since_cpu)
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
        self.rng = rng
        self.uuids = [f"GPU-{g:08d}" for g in range(gpus)]
        # Each GPU's levels while busy (a job's utilisation, memory, temperature and power).
        self.busy_util = rng.uniform(60, 98, gpus)
        self.busy_fb = rng.integers(20_000, 78_000, gpus)
        self.busy_temp = rng.uniform(55, 75, gpus)
        self.busy_power = rng.uniform(350, 650, gpus)

    def readings(self, busy: np.ndarray) -> list[DeviceSample]:
        """One reading of every GPU, fresh noise each time (what the packing of the sealed
        chunks sees): utilisation, temperature in whole numbers as dcgm-exporter gives them,
        power in milliwatts, memory steady while busy; independent noise from step to step,
        no worse for the packing than a real GPU's (whose readings follow each other)."""
        rng, n = self.rng, self.gpus
        util = np.where(busy, np.clip(np.rint(rng.normal(self.busy_util, 8, n)), 0, 100), 0)
        fb = np.where(busy, self.busy_fb, 0)
        temp = np.rint(np.where(busy, self.busy_temp, 34) + rng.normal(0, 1.5, n))
        power = np.round(
            np.where(busy, rng.normal(self.busy_power, 35, n), rng.normal(72, 3, n)), 3
        )
        return [
            DeviceSample(
                gpu=g % GPUS_PER_NODE,
                uuid=self.uuids[g],
                model="NVIDIA H100 80GB HBM3",
                gpu_util=u,
                fb_used_mib=f,
                fb_free_mib=81_559 - f,
                temperature_c=c,
                power_w=w,
                xid=0,
            )
            for g, (u, f, c, w) in enumerate(
                zip(util.tolist(), fb.tolist(), temp.tolist(), power.tolist(), strict=True)
            )
        ]

    def at(self, now: float, since: float) -> tuple[list[NodeTelemetry], dict[PodKey, PodTags]]:
        """The readings at ``now`` of the pods that ran at any time after ``since`` (a round
        standing for the rounds of ``serve`` between the two: every pod is seen)."""
        first = int(np.searchsorted(self.pod_start, since - 6 * 3_600))
        last = int(np.searchsorted(self.pod_start, now, side="right"))
        live = [i for i in range(first, last) if self.pod_end[i] > since]
        busy = np.zeros(self.gpus, np.bool_)
        busy[self.pod_gpu[live]] = True
        samples = self.readings(busy)
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


def heap_mb() -> dict[str, float]:
    """glibc's own count (mallinfo2): bytes in use in its heaps, bytes free in them (what the
    process holds but does not use: fragmentation), and bytes in its own mmaps; {} elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return {}

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost",
            )
        ]  # fmt: skip

    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return {
        "heap_used_mb": info.uordblks / 1e6,
        "heap_free_mb": info.fordblks / 1e6,
        "mmapped_mb": info.hblkhd / 1e6,
    }


def reset_peak() -> bool:
    """Reset this process' VmHWM to its VmRSS (Linux: ``clear_refs`` 5), so the peak read
    later is that of what ran since; False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def child(
    gpus: int,
    pods_per_day: int,
    days: int,
    repeats: int,
    fine_hours: float,
    round_s: int,
    save_every_s: int,
    save_hours: float,
    trace: bool,
) -> dict[str, Any]:
    """One configuration, in this process: see the module docstring."""
    if trace:
        tracemalloc.start()
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
        last = [start - round_s]
        saved = [start]

        def observe(now: float, save_every: float) -> None:
            plane.clock = now
            readings, tags = fleet.at(now, last[0])
            observatory.observe(now, readings, tags)
            rounds[0] += 1
            last[0] = now
            if now - saved[0] >= save_every:
                observing.save(now)
                saved[0] = now

        rss_base = status_mb("VmRSS")
        build_start = time.perf_counter()
        t = start
        end = start + days * DAY
        last_day = end - DAY
        fine_from = end - fine_hours * 3_600
        saves_from = end - save_hours * 3_600
        while t < fine_from:
            observe(t, save_every_s if t < saves_from else SAVE_EVERY_S)
            t += round_s if t + round_s <= last_day else min(round_s, 3_600)
        t = fine_from
        round_times = []
        while t < end:
            began = time.perf_counter()
            observe(t, save_every_s if t < saves_from else SAVE_EVERY_S)
            round_times.append(time.perf_counter() - began)
            t += FINE_S
        build_s = time.perf_counter() - build_start
        rss_built = status_mb("VmRSS")
        heap_built = heap_mb()
        store = observing.recorder.store
        usage = observing.recorder.usage
        traced: dict[str, float] = {}
        if trace:
            snapshot = tracemalloc.take_snapshot()
            traced["traced_mb"] = tracemalloc.get_traced_memory()[0] / 1e6
            for stat in snapshot.statistics("filename")[:8]:
                name = Path(stat.traceback[0].filename).name
                traced[f"traced_{name}_mb"] = stat.size / 1e6
            tracemalloc.stop()

        written = [0]
        set_blob = plane.store.set_blob

        def counted_set_blob(key: str, value: bytes) -> None:
            written[0] += len(value)
            set_blob(key, value)

        plane.store.set_blob = counted_set_blob  # type: ignore[method-assign]

        def save() -> tuple[float, float, float, int]:
            lock.holds.clear()
            lock.cpu.clear()
            written[0] = 0
            began = time.perf_counter()
            observing.save(t)
            saved[0] = t
            return max(lock.holds), max(lock.cpu), time.perf_counter() - began, written[0]

        rss_peak_build = status_mb("VmHWM")
        peak_reset = reset_peak()
        first_hold, first_cpu, first_total, first_bytes = save()
        holds, cpus, totals, sizes = [], [], [], []
        for _ in range(SAVES):
            for _ in range(SAVE_EVERY_S // FINE_S):
                observe(t, math.inf)
                t += FINE_S
            hold, cpu, total, size = save()
            holds.append(hold)
            cpus.append(cpu)
            totals.append(total)
            sizes.append(size)
        rss_peak_saves = status_mb("VmHWM") if peak_reset else math.nan
        rss_peak = max(rss_peak_build, status_mb("VmHWM"))
        rss_saved = status_mb("VmRSS")
        db_mb = (Path(folder) / "plane.db").stat().st_size / 1e6
        now = t - FINE_S
        util = "DCGM_FI_DEV_GPU_UTIL"
        workload = "gpufleet_workload_gpu_util"
        queries = {
            "avg_1h_all_util_ms": 1e3
            * median_s(lambda: store.query(util, "avg", 3_600, now), repeats),
            "avg_1d_all_util_ms": 1e3
            * median_s(lambda: store.query(util, "avg", DAY - FINE_S, now), repeats),
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
        "round_s": round_s,
        "save_every_s": save_every_s,
        "save_hours": save_hours,
        "series": len(store),
        "workload_series": len(store.series("gpufleet_workload_gpu_util")),
        "pod_summaries": len(usage),
        "arrays_mb": store.nbytes / 1e6,
        "usage_columns_mb": usage.nbytes() / 1e6,
        "rss_start_mb": rss_start,
        "rss_base_mb": rss_base,
        "rss_built_mb": rss_built,
        "rss_saved_mb": rss_saved,
        "rss_peak_mb": rss_peak,
        "rss_peak_with_restore_mb": status_mb("VmHWM"),
        **heap_built,
        **traced,
        "build_s": build_s,
        "round_ms": statistics.median(round_times) * 1e3,
        "first_save_lock_ms": first_hold * 1e3,
        "first_save_lock_cpu_ms": first_cpu * 1e3,
        "first_save_ms": first_total * 1e3,
        "first_save_mb": first_bytes / 1e6,
        "save_lock_ms": statistics.median(holds) * 1e3,
        "save_lock_max_ms": max(holds) * 1e3,
        "save_lock_cpu_ms": statistics.median(cpus) * 1e3,
        "save_lock_cpu_max_ms": max(cpus) * 1e3,
        "save_ms": statistics.median(totals) * 1e3,
        "save_mb": statistics.median(sizes) / 1e6,
        "rss_peak_build_mb": rss_peak_build,
        "rss_peak_saves_mb": rss_peak_saves,
        "db_mb": db_mb,
        "restore_s": restore_s,
        "restored_same": restored_same,
        **queries,
    }


#: What a row reports: the median over the repeats of each of these.
MEDIANS = (
    "rss_base_mb", "rss_built_mb", "rss_saved_mb", "rss_peak_mb", "rss_peak_with_restore_mb",
    "heap_used_mb", "heap_free_mb", "mmapped_mb", "build_s", "round_ms", "first_save_lock_ms",
    "first_save_ms", "save_lock_ms", "save_ms", "db_mb", "restore_s", "avg_1h_all_util_ms",
    "avg_7d_all_util_ms", "avg_1h_by_queue_ms", "first_save_lock_cpu_ms", "first_save_mb",
    "save_lock_cpu_ms", "save_mb", "rss_peak_build_mb", "rss_peak_saves_mb",
    "avg_1d_all_util_ms",
)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1_000)
    parser.add_argument("--pods-per-day", type=int, nargs="+", default=[0, 1_000, 3_200, 5_000])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per row")
    parser.add_argument("--fine-hours", type=float, default=24.0, help="hours of 15 s rounds")
    parser.add_argument("--round-s", type=int, default=600, help="rounds before the last day")
    parser.add_argument("--save-hours", type=float, default=0.25, help="hours of 300 s saves")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (RSS is each its own)")
    parser.add_argument("--save-every-s", type=int, default=6 * 3_600, help="saves before them")
    parser.add_argument("--trace", action="store_true", help="tracemalloc (slow; by file)")
    parser.add_argument("--label", default="", help="suffix of the results' file names")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(
            json.dumps(
                child(
                    args.gpus,
                    args.child,
                    args.days,
                    3,
                    args.fine_hours,
                    args.round_s,
                    args.save_every_s,
                    args.save_hours,
                    args.trace,
                )
            )
        )
        return 0

    def run(pods: int) -> dict[str, Any]:
        command = [sys.executable, __file__, "--gpus", str(args.gpus)]
        command += ["--days", str(args.days), "--fine-hours", str(args.fine_hours)]
        command += ["--round-s", str(args.round_s), "--save-every-s", str(args.save_every_s)]
        command += ["--save-hours", str(args.save_hours)]
        command += ["--child", str(pods)] + (["--trace"] if args.trace else [])
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(found), flush=True)
        return found

    with ThreadPoolExecutor(args.jobs) as pool:
        started = {
            pods: [pool.submit(run, pods) for _ in range(args.repeats)]
            for pods in args.pods_per_day
        }
    configs = []
    for pods in args.pods_per_day:
        runs = [future.result() for future in started[pods]]
        row = dict(runs[0])
        for name in MEDIANS:
            if all(name in run for run in runs):
                row[name] = statistics.median(run[name] for run in runs)
        row["save_lock_max_ms"] = max(run["save_lock_max_ms"] for run in runs)
        row["save_lock_cpu_max_ms"] = max(run["save_lock_cpu_max_ms"] for run in runs)
        row["rss_peak_runs_mb"] = [run["rss_peak_mb"] for run in runs]
        configs.append(row)
    result = {
        "configs": configs,
        "repeats": args.repeats,
        "target_mb": TARGET_MB,
        "target_lock_ms": TARGET_LOCK_MS,
        "load_average": os.getloadavg(),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
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
    "| pods a day | runs | series (workload) | pod summaries | arrays MB | RSS base | RSS built "
    "| RSS peak (runs) | peak in saves | heap used / free / mapped "
    "| first save: lock / CPU / all ms, MB | save every 300 s: lock (max) / CPU (max) / all ms "
    "| MB a save | db MB | restore s | round ms | query ms: avg 1 h / 1 d / 7 d / by queue |\n"
    + "|---" * 17
    + "|"
)


def report(r: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {c['pods_per_day']:,} | {len(c['rss_peak_runs_mb'])} "
        f"| {c['series']:,} ({c['workload_series']:,}) | {c['pod_summaries']:,} "
        f"| {c['arrays_mb']:.1f} | {c['rss_base_mb']:.0f} | **{c['rss_built_mb']:.0f}** "
        f"| **{c['rss_peak_mb']:.0f}** ({', '.join(f'{x:.0f}' for x in c['rss_peak_runs_mb'])}) "
        f"| {c['rss_peak_saves_mb']:.0f} "
        f"| {c.get('heap_used_mb', 0):.0f} / {c.get('heap_free_mb', 0):.0f} "
        f"/ {c.get('mmapped_mb', 0):.0f} "
        f"| {c['first_save_lock_ms']:.0f} / {c['first_save_lock_cpu_ms']:.0f} "
        f"/ {c['first_save_ms']:.0f}, {c['first_save_mb']:.1f} "
        f"| **{c['save_lock_ms']:.1f}** (max {c['save_lock_max_ms']:.1f}) "
        f"/ {c['save_lock_cpu_ms']:.1f} (max {c['save_lock_cpu_max_ms']:.1f}) / {c['save_ms']:.0f} "
        f"| {c['save_mb']:.2f} | {c['db_mb']:.0f} | {c['restore_s']:.1f} | {c['round_ms']:.1f} "
        f"| {c['avg_1h_all_util_ms']:.1f} / {c['avg_1d_all_util_ms']:.1f} "
        f"/ {c['avg_7d_all_util_ms']:.1f} / {c['avg_1h_by_queue_ms']:.1f} |"
        for c in r["configs"]
    )
    first = r["configs"][0]
    return f"""# Telemetry store: memory and saves at fleet scale, built as `serve` builds it

`python benchmarks/telemetry_store.py --gpus {first["gpus"]}` (Python {r["python"]},
numpy {r["numpy"]}, {r["machine"]}; a shared 2-core machine: `{r["uptime"]}` at the end).
{first["gpus"]:,} GPUs x 5 device metrics over {first["days"]} days, in compressed time: a
round every {first["round_s"] / 60:g} minutes, then every 15 s in the last
{first["fine_hours"]:g} h, so every coarse bucket and every fine step holds a reading, as in
`serve` (a bucket before the last day rolls up one reading, not 40: its mean, max and min are
that reading, as noisy as a raw one, which packs no better than `serve`'s). Each reading is
fresh: a busy GPU's utilisation and temperature whole numbers with noise around the GPU's
level, power in milliwatts with 35 W of noise, memory steady, XIDs 0; an idle GPU near
idle levels (see ``Fleet.readings``). A round sees every pod that ran since the last; saves
every {first["save_every_s"] / 3_600:g} h, then every 300 s in the last
{first["save_hours"]:g} h, with pods a day as below, each its own workload series and usage
summary; one fresh subprocess per run, medians of the runs. RSS: the process' VmRSS after the
imports (base), after the {first["days"]} days (built) and its peak (VmHWM, build and saves,
before the benchmark's restore check), and the peak of the measured saves alone (VmHWM reset
after the build), in MB; glibc's heap in use, free in it (fragmentation) and in its own
mappings (the chunks), in MB, after the build. Saves: the observatory lock's hold, the CPU
time of the holding thread during it (``time.thread_time``: what a loaded machine does not
stretch), the whole save, and the bytes written (first: everything; then {SAVES} saves, each
after 300 s of rounds, as `serve`).

{HEAD}
{rows}

Targets: RSS ≤ {r["target_mb"]:.0f} MB with 5,000 pods a day; a save holds the observatory
lock ≤ {r["target_lock_ms"]:.0f} ms.
"""


if __name__ == "__main__":
    sys.exit(main())
