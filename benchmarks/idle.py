"""Idle-GPU reclaim on a multi-team day: queueing delay with and without an IdlePolicy.

    python benchmarks/idle.py [--hours 12] [--node-fraction 0.1] [--seed 0] [--load 1.15]

The day: the Alibaba 2023 trace's GPU pods (request shapes and run times, capped at
``--max-runtime``) as four teams' workloads on a sample of the trace's GPU nodes, arriving over
``--hours`` at an offered GPU load of ``--load``
(:func:`gpufleet.backends.sim.scenarios.from_trace`, as ``benchmarks/multitenant.py``). Without
the trace (``../shared/traces`` or ``GPUFLEET_TRACE_DIR``), the same day is generated from the
trace's shape table shipped with gpufleet on its bundled Alibaba-like cluster, and the output
says so.

Each workload gets a usage profile (``gpufleet.dev/usage-profile``, which drives the simulated
GPUs' utilisation) and an object kind, by team (:data:`MIX`; gangs are always training): the
training team trains; research trains or works in notebooks; dev works in notebooks and debug
sessions, some left open and idle; inference serves. Notebooks and idle sessions are
StatefulSets (as Kubeflow makes them), debug sessions Pods, training Jobs (gangs PyTorchJobs),
serving Deployments. The mix actually drawn is printed and written.

The policy (:data:`POLICY`): interactive kinds (StatefulSet, Pod) whose GPUs' mean utilisation
over 30 minutes is below 10%, after an hour's grace: Notify, then Stop 15 minutes later.

Two runs of the same day, seed and placement policy, both through gpufleet's queues:

* **without**: the policy in dry run (it decides, acts on nothing: the run is the same as one
  without it, and the dry run says when each idle holder *would* have been stopped);
* **with**: the policy acting.

Workloads that **waited behind idle holders**: an *idle holder* is a workload the policy would
have stopped in the run without it; from that Stop decision's time ``t`` until the holder ends
(its admission plus its run time) it holds GPUs the policy would have given back. A GPU
workload that is not itself an idle holder *waited behind idle holders* when, in the run without
the policy, its wait (arrival to admission, or to the end of the run if never admitted) overlaps
at least one such span ``[t, end)`` for a positive time. The set is fixed from the run without
the policy and the same workloads are measured in both runs; a workload never admitted counts
its wait up to the end of its run (censored). Measured: GPU-hours reclaimed (what the stopped
workloads would still have held), p95 queueing delay (arrival to the whole gang admitted) of
the workloads that waited behind idle holders and of all workloads, with and without. Target
(issue 14): at least 30% lower p95 for the work that waited behind idle holders. The script
exits 1 if any training workload was stopped.

Results: benchmarks/results/idle.md and .json.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.backends.sim.results import TenancyRun
from gpufleet.backends.sim.run import run_workloads
from gpufleet.backends.sim.scenarios import TenantScenario, from_trace, sample_nodes
from gpufleet.backends.sim.workloads import synthetic_workload
from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import NODES_FILE, PODS_FILE, find_alibaba_trace
from gpufleet.io.cluster_traces.shapes import bundled_path, bundled_shape_table
from gpufleet.io.fleet.cluster_spec import read_cluster_spec
from gpufleet.model import Node
from gpufleet.model.idle import IdleAction, IdlePolicy, IdleScope, IdleStep
from gpufleet.model.times import format_duration
from gpufleet.model.workload import TimedWorkload, Workload
from gpufleet.report.summary import write_json
from gpufleet.telemetry.profiles import USAGE_PROFILE_ANNOTATION, UsageProfile

RESULTS = Path(__file__).resolve().parent / "results"
PLACEMENT = "default"
TARGET_REDUCTION = 0.30
HOUR = 3600.0
#: Pods drawn from the shipped shape table when the trace is missing.
GENERATED_PODS = 20_000

#: Usage profile of a team's single-pod workloads (probabilities); gangs always train.
MIX: dict[str, dict[UsageProfile, float]] = {
    "training": {UsageProfile.TRAINING: 1.0},
    "research": {UsageProfile.TRAINING: 0.6, UsageProfile.NOTEBOOK: 0.25, UsageProfile.IDLE: 0.15},
    "dev": {UsageProfile.NOTEBOOK: 0.4, UsageProfile.DEBUG: 0.35, UsageProfile.IDLE: 0.25},
    "inference": {UsageProfile.INFERENCE: 1.0},
}
KIND = {
    UsageProfile.TRAINING: "Job",
    UsageProfile.INFERENCE: "Deployment",
    UsageProfile.NOTEBOOK: "StatefulSet",
    UsageProfile.IDLE: "StatefulSet",
    UsageProfile.DEBUG: "Pod",
}
POLICY = IdlePolicy(
    "interactive-sessions",
    (IdleStep(IdleAction.NOTIFY), IdleStep(IdleAction.STOP, 900.0)),
    IdleScope(workload_kinds=frozenset({"StatefulSet", "Pod"})),
    threshold_pct=10.0,
    window_s=1800.0,
    grace_s=HOUR,
)


@dataclass(frozen=True, slots=True)
class Day:
    nodes: list[Node]
    scenario: TenantScenario
    workloads: list[TimedWorkload]
    kinds: dict[str, str]
    profiles: dict[str, UsageProfile]
    source: str


def build_day(args: argparse.Namespace) -> Day:
    trace = find_alibaba_trace()
    if trace is not None:
        all_nodes = [n for n in read_nodes(trace / "csv" / NODES_FILE) if n.gpu_count]
        nodes = sample_nodes(all_nodes, args.node_fraction, args.seed)
        pods = read_pods(trace / "csv" / PODS_FILE)
        source = (
            f"the Alibaba 2023 trace ({trace}): {len(nodes)} of its GPU nodes "
            f"({args.node_fraction:g} drawn with the seed)"
        )
    else:
        nodes = sample_nodes(
            read_cluster_spec(bundled_path("alibaba-like-cluster.yaml")),
            args.node_fraction,
            args.seed,
        )
        pods = synthetic_workload(bundled_shape_table(), GENERATED_PODS, args.seed, 1.0)
        source = (
            "a GENERATED day: the Alibaba 2023 trace was not found, so its pods were drawn from "
            "the trace's shape table shipped with gpufleet (request shapes and run-time "
            f"quantiles), on {len(nodes)} nodes of the bundled Alibaba-like cluster"
        )
    scenario = from_trace(
        pods, nodes, args.seed, args.hours, args.load, args.max_runtime, burst_gpus=0.0
    )
    rng = np.random.default_rng(args.seed + 1)
    workloads: list[TimedWorkload] = []
    kinds: dict[str, str] = {}
    profiles: dict[str, UsageProfile] = {}
    for timed in scenario.workloads:
        workload = timed.workload
        if workload.gang_size > 1:
            profile, kind = UsageProfile.TRAINING, "PyTorchJob"
        else:
            mix = MIX.get(workload.queue, {UsageProfile.TRAINING: 1.0})
            names = list(mix)
            profile = names[int(rng.choice(len(names), p=np.array(list(mix.values()))))]
            kind = KIND[profile]
        workloads.append(dataclasses.replace(timed, workload=with_profile(workload, profile)))
        kinds[workload.key] = kind
        profiles[workload.key] = profile
    return Day(nodes, scenario, workloads, kinds, profiles, source)


def with_profile(workload: Workload, profile: UsageProfile) -> Workload:
    pods = tuple(
        dataclasses.replace(p, annotations={**p.annotations, USAGE_PROFILE_ANNOTATION: profile})
        for p in workload.pods
    )
    return dataclasses.replace(workload, pods=pods)


def run(day: Day, seed: int, dry_run: bool) -> tuple[TenancyRun, float]:
    started = time.perf_counter()
    label = "without (dry run)" if dry_run else "with the policy"
    print(f"  {label}: {len(day.workloads):,} workloads ...", flush=True)
    result = run_workloads(
        day.nodes, day.workloads, PLACEMENT, seed, day.scenario.queues,
        idle_policies=[POLICY], kinds=day.kinds, idle_dry_run=dry_run,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    print(f"    {seconds:.0f} s", flush=True)
    return result, seconds


def waits(result: TenancyRun) -> dict[str, tuple[float, float]]:
    """Each workload's wait: (arrival, admission or the end of the run)."""
    end = result.replay.simulated_seconds
    return {
        key: (arrived, end if admitted is None else admitted)
        for key, (arrived, admitted) in result.tenancy.admissions.items()
    }


def idle_spans(day: Day, without: TenancyRun) -> dict[str, tuple[float, float]]:
    """Idle holder -> (the would-be Stop, its end) in the run without the policy."""
    assert without.idle is not None
    duration = {t.workload.key: t.duration for t in day.workloads}
    spans: dict[str, tuple[float, float]] = {}
    for decision in without.idle.decisions:
        if decision.action is not IdleAction.STOP:
            continue
        admitted = without.tenancy.admissions.get(decision.workload, (0.0, None))[1]
        left = duration.get(decision.workload)
        end = without.replay.simulated_seconds
        if admitted is not None and left is not None:
            end = min(end, admitted + left)
        if end > decision.at:
            spans[decision.workload] = (decision.at, end)
    return spans


def waited_behind(
    without: TenancyRun, spans: dict[str, tuple[float, float]], gpu_keys: set[str]
) -> list[str]:
    """See the module docstring."""
    if not spans:
        return []
    starts = np.array([s for s, _ in spans.values()])
    ends = np.array([e for _, e in spans.values()])
    found = []
    for key, (arrived, left) in waits(without).items():
        if key in spans or key not in gpu_keys or left <= arrived:
            continue
        if np.any((starts < left) & (ends > arrived)):
            found.append(key)
    return sorted(found)


def p95(result: TenancyRun, keys: list[str]) -> float | None:
    spans = waits(result)
    delays = [spans[k][1] - spans[k][0] for k in keys if k in spans]
    return float(np.percentile(delays, 95)) if delays else None


def fmt(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def reduction(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before <= 0:
        return None
    return 1.0 - after / before


def change(cut: float | None) -> str:
    """A reduction as words: "92% lower", "3% higher", "-" when undefined."""
    if cut is None:
        return "-"
    return f"{cut:.0%} lower" if cut >= 0 else f"{-cut:.0%} higher"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=12.0, help="Hours of arrivals.")
    parser.add_argument("--node-fraction", type=float, default=0.1, help="Trace nodes kept.")
    parser.add_argument("--load", type=float, default=1.15, help="Offered GPU load.")
    parser.add_argument("--max-runtime", type=float, default=8 * HOUR, help="Run-time cap (s).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    day = build_day(args)
    print(day.source, flush=True)
    mix = Counter(str(p) for p in day.profiles.values())
    print("profile mix: " + ", ".join(f"{p} {n:,}" for p, n in sorted(mix.items())), flush=True)
    without, without_s = run(day, args.seed, dry_run=True)
    with_policy, with_s = run(day, args.seed, dry_run=False)
    assert with_policy.idle is not None
    gpu_keys = {t.workload.key for t in day.workloads if t.workload.gpu_milli > 0}
    spans = idle_spans(day, without)
    behind = waited_behind(without, spans, gpu_keys)
    every = sorted(gpu_keys)
    behind_before, behind_after = p95(without, behind), p95(with_policy, behind)
    all_before, all_after = p95(without, every), p95(with_policy, every)
    cut = reduction(behind_before, behind_after)
    met = cut is not None and cut >= TARGET_REDUCTION
    report = with_policy.idle
    training_stopped = sorted(report.stopped_training)
    rows = [
        ("GPU-hours reclaimed", f"{report.gpu_hours_reclaimed:,.1f}", "", ""),
        ("workloads stopped", f"{len(report.stopped):,}", "", ""),
        ("actions", ", ".join(f"{n} {a}" for a, n in report.actions().items()) or "none", "", ""),
        ("idle holders (without the policy)", f"{len(spans):,}", "", ""),
        (
            f"p95 delay, work that waited behind idle holders ({len(behind):,})",
            fmt(behind_after),
            fmt(behind_before),
            change(cut),
        ),
        (
            f"p95 delay, all work ({len(every):,})",
            fmt(all_after),
            fmt(all_before),
            change(reduction(all_before, all_after)),
        ),
        ("training workloads stopped", f"{len(training_stopped)}", "", ""),
    ]
    verdict = "pass" if met else "FAIL"
    lines = [
        "# Idle-GPU reclaim on a multi-team day",
        "",
        f"Command: `python benchmarks/idle.py --hours {args.hours:g} --node-fraction "
        f"{args.node_fraction:g} --load {args.load:g} --max-runtime {args.max_runtime:g} "
        f"--seed {args.seed}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}; placement "
        f"`{PLACEMENT}`; simulated in {without_s:.0f} s (without) and {with_s:.0f} s (with).",
        "",
        f"Day: {day.source}. {day.scenario.description}.",
        "",
        "Profile mix (workloads): "
        + ", ".join(f"{p} {n:,} ({n / len(day.profiles):.0%})" for p, n in sorted(mix.items()))
        + ". By team (single-pod workloads; gangs train): "
        + "; ".join(
            f"{team}: " + ", ".join(f"{p} {share:.0%}" for p, share in m.items())
            for team, m in MIX.items()
        )
        + ".",
        "",
        f"Policy `{POLICY.name}`: StatefulSets and Pods below {POLICY.threshold_pct:g}% mean GPU "
        f"utilisation over {format_duration(POLICY.window_s)}, after "
        f"{format_duration(POLICY.grace_s)} of running: Notify, then Stop after 15m. "
        "'Waited behind idle holders' is defined in the script's docstring.",
        "",
        "| measure | with the policy | without | change |",
        "|---|---:|---:|---:|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
        f"Target: p95 delay of the work that waited behind idle holders at least "
        f"{TARGET_REDUCTION:.0%} lower: **{verdict}**. Training stopped: "
        f"{', '.join(training_stopped) or 'none'}.",
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "idle.md").write_text("\n".join(lines))
    write_json(
        args.out / "idle.json",
        {
            "settings": vars(args) | {"out": str(args.out), "placement": PLACEMENT},
            "source": day.source,
            "profile_mix": dict(mix),
            "policy": {
                "name": POLICY.name,
                "workload_kinds": sorted(POLICY.scope.workload_kinds),
                "threshold_pct": POLICY.threshold_pct,
                "window_s": POLICY.window_s,
                "grace_s": POLICY.grace_s,
                "steps": [(str(s.action), s.after_s) for s in POLICY.steps],
            },
            "gpu_hours_reclaimed": report.gpu_hours_reclaimed,
            "stopped": report.stopped,
            "stopped_training": training_stopped,
            "actions": report.actions(),
            "idle_holders": len(spans),
            "waited_behind_idle_holders": len(behind),
            "p95_delay_behind_idle": {"with": behind_after, "without": behind_before},
            "p95_delay_all": {"with": all_after, "without": all_before},
            "reduction_behind_idle": cut,
            "target_met": met,
        },
    )
    print("\n".join(lines[8:]))
    print(f"wrote {args.out / 'idle.md'}")
    if training_stopped:
        print(f"FAIL: training workloads were stopped: {', '.join(training_stopped)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
