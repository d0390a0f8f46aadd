"""Sustained workload submissions against a real ``gpufleet serve`` on loopback.

    python benchmarks/api_load.py [--rate 200] [--duration 60] [--concurrency 64] [--clients 4] \
        [--speed 60] [--runtime 10s] [--gpus 1] [--format json]

Starts ``gpufleet serve`` as a subprocess on a free port with a fresh database in a temporary
directory (the bundled cluster and queues), makes a tenant token with
``gpufleet admin create-token`` (tenant ``inference``: its queue, its namespace), waits for
``/readyz``, and then submits one Pod per request, ``--rate`` per second for ``--duration``
seconds. Pacing is open loop: request i is sent at start + i/rate whether or not earlier ones
were answered (at most ``--concurrency`` in flight; one waiting for a free slot counts its wait in
its latency, which is measured from its scheduled time, so a slow server cannot hide behind a
slow sender). Each pod asks for ``--gpus`` GPUs and runs ``--runtime`` of simulated time, so
with ``--speed 60`` the cluster keeps up and the test measures the API, not a growing backlog.

Reported: errors by kind (the run fails unless there are none), achieved throughput (answers
per second over the time from the first send to the last answer), latency p50/p99/max, and
whether the server lists every accepted workload afterwards. Results:
benchmarks/results/api_load.md and .json, with the machine (CPUs, load average, Python) and
the command line. The load generator runs on the same machine as the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.testing.server_process import wait_until_ready

RESULTS = Path(__file__).resolve().parent / "results"
TENANT = "inference"
GPUFLEET = str(Path(sys.executable).parent / "gpufleet")


@dataclass
class Tally:
    """What came back: latencies of the accepted submissions and errors by kind."""

    latencies: list[float] = field(default_factory=list)  # from the scheduled send time
    service: list[float] = field(default_factory=list)  # from the actual send
    errors: Counter[str] = field(default_factory=Counter)
    first_error: str | None = None
    late_sends: int = 0  # sent more than 10 ms after their time (a slot or the loop was busy)
    last_answer: float = 0.0

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if self.first_error is None:
            self.first_error = f"{kind}: {detail}"[:300]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def create_token(db: Path) -> str:
    made = subprocess.run(
        [GPUFLEET, "admin", "create-token", "--db", str(db), "--tenant", TENANT],
        check=True,
        capture_output=True,
        text=True,
    )
    # the token is the one word of the output that has the token prefix
    tokens = [word for word in made.stdout.split() if word.startswith("gf_")]
    if len(tokens) != 1:
        raise SystemExit(f"could not find the token in: {made.stdout!r}")
    return tokens[0]


def start_server(
    args: argparse.Namespace, db: Path, port: int, log: Path
) -> subprocess.Popen[bytes]:
    command = [GPUFLEET, "serve", "--db", str(db), "--port", str(port), "--speed", str(args.speed)]
    command += ["--log-level", "warning"]
    handle = log.open("wb")
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


def pod_manifest(name: str, gpus: int, runtime: str) -> dict[str, Any]:
    """A Pod as a tenant writes it: GPUs as limits, the GPU taint tolerated, a run time."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": {"gpufleet.dev/expected-runtime": runtime},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "2Gi"},
                        "limits": {"nvidia.com/gpu": gpus},
                    },
                }
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }


def bodies(args: argparse.Namespace, count: int) -> tuple[list[bytes], str]:
    """Every request's body, made before the clock starts (names are unique per run)."""
    run = uuid.uuid4().hex[:6]
    docs = [pod_manifest(f"load-{run}-{i:06d}", args.gpus, args.runtime) for i in range(count)]
    if args.format == "yaml":
        return [yaml.safe_dump(d, sort_keys=False).encode() for d in docs], "application/yaml"
    return [json.dumps(d).encode() for d in docs], "application/json"


async def submit_share(
    args: argparse.Namespace,
    server: str,
    token: str,
    items: list[tuple[int, bytes]],
    content_type: str,
    start: float,
    done: Any,
) -> Tally:
    """One client's share: request ``i`` sent at ``start + i / rate`` (open loop, at most this
    client's share of ``--concurrency`` in flight); ``done`` counts answers for the progress."""
    tally = Tally()
    concurrency = max(1, args.concurrency // args.clients)
    slots = asyncio.Semaphore(concurrency)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    url = f"{server}/api/v1/workloads"
    async with httpx.AsyncClient(
        limits=limits, timeout=httpx.Timeout(args.timeout), headers=headers
    ) as client:

        async def one(due: float, body: bytes) -> None:
            async with slots:
                sent = time.monotonic()
                if sent - due > 0.010:
                    tally.late_sends += 1
                try:
                    response = await client.post(url, content=body)
                except httpx.HTTPError as error:
                    tally.error(type(error).__name__, str(error))
                else:
                    if response.status_code == 201:
                        answered = time.monotonic()
                        tally.latencies.append(answered - due)
                        tally.service.append(answered - sent)
                    else:
                        tally.error(f"HTTP {response.status_code}", response.text)
                tally.last_answer = max(tally.last_answer, time.monotonic())
            with done.get_lock():
                done.value += 1

        in_flight: set[asyncio.Task[None]] = set()
        for index, body in items:
            due = start + index / args.rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            job = asyncio.create_task(one(due, body))
            in_flight.add(job)
            job.add_done_callback(in_flight.discard)
        while in_flight:
            await asyncio.gather(*list(in_flight))
    return tally


def _client(job: tuple[argparse.Namespace, str, str, list[tuple[int, bytes]], str, float]) -> Tally:
    args, server, token, items, content_type, start = job
    return asyncio.run(submit_share(args, server, token, items, content_type, start, _DONE))


_DONE: Any = None


def _init_client(done: Any) -> None:
    global _DONE
    _DONE = done


def submit_all(
    args: argparse.Namespace, server: str, token: str, payloads: list[bytes], content_type: str
) -> tuple[Tally, float, float]:
    """Send the payloads on schedule from ``--clients`` processes (one Python process cannot
    generate 200 requests/s with httpx and measure them too); (tally, start, end of the last
    answer) in monotonic time, which Linux shares between processes."""
    done = multiprocessing.Value("i", 0)
    progress = Progress(
        TextColumn("[bold]submitting[/]"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )  # fmt: skip
    indexed = list(enumerate(payloads))
    start = time.monotonic() + 1.0  # the clients' start-up is not the server's fault
    jobs = [
        (args, server, token, indexed[k :: args.clients], content_type, start)
        for k in range(args.clients)
    ]
    tally = Tally()
    with (
        progress,
        ProcessPoolExecutor(args.clients, initializer=_init_client, initargs=(done,)) as pool,
    ):
        task = progress.add_task("load", total=len(payloads))
        futures = [pool.submit(_client, job) for job in jobs]
        while not all(f.done() for f in futures):
            progress.update(task, completed=done.value)
            time.sleep(0.2)
        progress.update(task, completed=done.value)
        for future in futures:
            part = future.result()
            tally.latencies += part.latencies
            tally.service += part.service
            tally.errors.update(part.errors)
            tally.first_error = tally.first_error or part.first_error
            tally.late_sends += part.late_sends
            tally.last_answer = max(tally.last_answer, part.last_answer)
    return tally, start, tally.last_answer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def listed(server: str, token: str) -> int:
    response = httpx.get(
        f"{server}/api/v1/workloads",
        headers={"Authorization": f"Bearer {token}"},
        timeout=120.0,
    )
    response.raise_for_status()
    return len(response.json())


def machine(load_before: tuple[float, float, float]) -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "load_average_before_1_5_15": [round(x, 2) for x in load_before],
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def format_ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _verdict(r: dict[str, Any]) -> str:
    errors = sum(r["errors"].values())
    kept = r["listed_after"] == r["accepted"]
    # sustained: answers keep up with the offered rate (within 5%)
    sustained = r["achieved_per_s"] >= 0.95 * r["offered_per_s"]
    if errors == 0 and kept and sustained:
        return "**Passed**: no errors, the offered rate sustained, every accepted workload listed."
    problems = []
    if errors:
        problems.append(
            f"{errors} failed requests (none of them half-accepted)"
            if kept
            else f"{errors} failed requests"
        )
    if not sustained:
        problems.append(f"{r['achieved_per_s']:.0f}/s answered of {r['offered_per_s']:g}/s offered")
    if not kept:
        problems.append(f"{r['listed_after']} listed of {r['accepted']} accepted")
    return "**Failed**: " + "; ".join(problems) + "."


def write_results(result: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "api_load.json").write_text(json.dumps(result, indent=2) + "\n")
    m, r = result["machine"], result["results"]
    errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "none"
    lines = [
        "# API load: sustained submissions on loopback",
        "",
        f"`{result['command']}`",
        "",
        f"A real `gpufleet serve` (subprocess, fresh SQLite database, bundled cluster of "
        f"{result['setup']['nodes']} nodes, speed {result['setup']['speed']:g}x) and the load "
        f"generator ({result['setup']['clients']} processes of httpx AsyncClient, open-loop "
        f"pacing, at most {result['setup']['concurrency']} requests in flight) on the same "
        "machine: "
        f"{m['cpus']} CPUs, load average (1/5/15 min) "
        f"{' / '.join(str(x) for x in m['load_average_before_1_5_15'])} before and "
        f"{' / '.join(str(x) for x in m['load_average_1_5_15'])} after, "
        f"Python {m['python']}, {m['platform']}. One Pod per request "
        f"({result['setup']['gpus']} GPU, {result['setup']['runtime']} simulated run time, "
        f"{result['setup']['format'].upper()}), as tenant `{TENANT}`. Latency is from each "
        "request's scheduled send time to its answer.",
        "",
        "| offered | sent | accepted | errors | achieved | p50 | p99 | max | listed after |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        f"| {r['offered_per_s']:g}/s for {r['duration_s']:g} s | {r['sent']} | "
        f"{r['accepted']} | {errors} | {r['achieved_per_s']:.1f}/s | "
        f"{format_ms(r['latency_ms']['p50'])} | {format_ms(r['latency_ms']['p99'])} | "
        f"{format_ms(r['latency_ms']['max'])} | {r['listed_after']} |",
        "",
        f"Service time (from the actual send): p50 {format_ms(r['service_ms']['p50'])}, "
        f"p99 {format_ms(r['service_ms']['p99'])}. Requests sent more than 10 ms late (no free "
        f"slot, or the generator busy): {r['late_sends']}.",
        "",
        _verdict(r),
        "",
    ]
    (RESULTS / "api_load.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="submissions per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--concurrency", type=int, default=64, help="most requests in flight")
    parser.add_argument(
        "--clients", type=int, default=4, help="load generator processes (sharing the rate)"
    )
    parser.add_argument("--speed", type=float, default=60.0, help="serve --speed")
    parser.add_argument("--runtime", default="10s", help="simulated run time of each pod")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs of each pod")
    parser.add_argument("--format", choices=("json", "yaml"), default="json")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    parser.add_argument("--no-write", action="store_true", help="print only, keep no results")
    args = parser.parse_args()
    if args.rate <= 0 or args.duration <= 0 or args.concurrency < 1 or args.clients < 1:
        parser.error("--rate and --duration must be above 0, --concurrency and --clients 1+")
    count = round(args.rate * args.duration)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="gpufleet-api-load-") as scratch:
        db, log = Path(scratch) / "gpufleet.db", Path(scratch) / "serve.log"
        token = create_token(db)
        port = free_port()
        server = f"http://127.0.0.1:{port}"
        process = start_server(args, db, port, log)
        try:
            wait_until_ready(server, process, log, timeout=120.0)
            nodes = len(httpx.get(
                f"{server}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}
            ).json())  # fmt: skip
            payloads, content_type = bodies(args, count)
            tally, start, end = submit_all(args, server, token, payloads, content_type)
            after = listed(server, token)
        finally:
            stop_server(process)
            # what the server said, kept for a failed run (its directory goes away now)
            server_log = log.read_text(errors="replace")[-4000:]
            if process.returncode not in (0, -15):
                print(server_log, file=sys.stderr)
    accepted = len(tally.latencies)
    ms = [1000 * x for x in tally.latencies] or [float("nan")]
    service = [1000 * x for x in tally.service] or [float("nan")]
    result: dict[str, Any] = {
        "command": " ".join(["python benchmarks/api_load.py", shlex.join(sys.argv[1:])]).strip(),
        "machine": machine(load_before),
        "setup": {
            "nodes": nodes,
            "speed": args.speed,
            "concurrency": args.concurrency,
            "clients": args.clients,
            "gpus": args.gpus,
            "runtime": args.runtime,
            "format": args.format,
        },
        "results": {
            "offered_per_s": args.rate,
            "duration_s": args.duration,
            "sent": count,
            "accepted": accepted,
            "errors": dict(tally.errors),
            "first_error": tally.first_error,
            "achieved_per_s": accepted / max(end - start, 1e-9),
            "wall_s": end - start,
            "latency_ms": {
                "p50": statistics.median(ms),
                "p99": percentile(ms, 0.99),
                "max": max(ms),
            },
            "service_ms": {"p50": statistics.median(service), "p99": percentile(service, 0.99)},
            "late_sends": tally.late_sends,
            "listed_after": after,
        },
        "server_log_tail": server_log if tally.errors else "",
    }
    print(json.dumps(result["results"], indent=2))
    if not args.no_write:
        write_results(result)
        print(f"results: {RESULTS / 'api_load.md'}")
    if tally.errors or after != accepted:
        raise SystemExit(
            f"FAILED: {sum(tally.errors.values())} errors ({tally.first_error}); "
            f"{after} listed of {accepted} accepted"
        )


if __name__ == "__main__":
    main()
