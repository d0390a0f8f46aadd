"""How the local machine starts the processes of a gang bound to it.

Owns :class:`GangStarts`, a part of :class:`~.machine.LocalMachine` given its
:class:`~.machine_state.MachineState`: a ``Bind`` taken in (the gang starts once all its pods
are bound), a gang's start (its rendezvous port, its time limit, each member's run prepared
with its devices' and completion's variables and the labels a restarted server needs,
recorded before any member starts so that a restart finishes a start cut short), one pod's
next Job completion run in place, and :class:`PreparedRun`. What follows when a run ends is
:mod:`.gang_ends`'.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from gpufleet.backends.local.cgroups import Limits
from gpufleet.backends.local.devices_env import placement_env, rendezvous_env
from gpufleet.backends.local.gangs import (
    BoundPod,
    Gang,
    array_env,
    placement_from_text,
    placement_to_text,
)
from gpufleet.backends.local.machine_state import MachineState, gang_counts
from gpufleet.backends.local.private_dev import gpu_nodes
from gpufleet.backends.local.run_state import read_json, write_json
from gpufleet.devices.visibility import DeviceNotFoundError
from gpufleet.model import Placement, Pod
from gpufleet.model.events import BindFailed, PodBound, PodEnd, PodReady, PodRestarted
from gpufleet.model.processes import ProcessSpec

log = logging.getLogger(__name__)


#: The variable that gives an Indexed Job's pod its completion's index, as Kubernetes sets it.
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"


@dataclass(slots=True)
class PreparedRun:
    """A run about to start: its id, its process (its variables laid over), what it keeps
    with it, when it starts, its Job completion and its time limit."""

    run_id: str
    spec: ProcessSpec
    labels: dict[str, str]
    started_at: float
    completion: int | None
    deadline_at: float | None = None


class GangStarts:
    """Binds and starts of the local machine's gangs (see the module docstring)."""

    def __init__(self, state: MachineState) -> None:
        self._state = state

    def bind(self, pod: Pod, placement: Placement) -> None:
        """Take in the core's ``Bind``: the pod holds its place; its gang starts once all
        its pods are bound (``BindFailed`` when the machine cannot carry it out)."""
        state = self._state
        workload_key = state.workload_of.get(pod.key)
        gang = None if workload_key is None else state.gangs.get(workload_key)
        if gang is None:
            state.events.append(BindFailed(pod.key, "no process was submitted for this pod"))
            return
        try:
            placement_env(placement, state.inventory, state.mps)
        except DeviceNotFoundError as error:
            state.events.append(BindFailed(pod.key, f"this machine has no {error}"))
            return
        rank = next(i for i, p in enumerate(gang.workload.pods) if p.key == pod.key)
        state.bound[pod.key] = BoundPod(pod, placement, gang.workload.key, rank)
        state.events.append(PodBound(pod, placement))
        gang.bound.add(pod.key)
        if len(gang.bound) == len(gang.needed):
            self.start_gang(gang)

    def start_gang(self, gang: Gang, retry: bool = False) -> None:
        """Start the gang's processes, those that have yet to succeed (``retry``: again after
        a failure, where they were; its time limit still counts from the first start, and its
        pods were ready already)."""
        state = self._state
        pods = gang.needed
        size = len(gang.workload.pods)
        try:
            port = state.ports.draw(gang.workload.key) if size > 1 else 0
        except OSError as error:
            for pod in pods:
                state.bound.pop(pod.key, None)
                state.events.append(BindFailed(pod.key, str(error)))
            gang.bound.clear()
            return
        started: list[str] = []
        limits = [s.deadline_s for s in gang.specs.values() if s.deadline_s is not None]
        deadline_at = state.clock.now() + min(limits) if limits else None
        if (retry or gang.keep_deadline) and gang.deadline_at is not None:
            deadline_at = gang.deadline_at
        gang.deadline_at, gang.keep_deadline, gang.restart_at = deadline_at, False, None
        record = self._gang_start_path(gang.workload.key)
        try:
            prepared = []
            for pod in pods:
                bound = state.bound[pod.key]
                env = {} if size == 1 else dict(rendezvous_env(bound.rank, size, port))
                prepared.append((bound, self._prepare_run(gang, bound, env)))
            if len(prepared) > 1:  # a restart finds the gang started whole, or not at all
                runs = [{"run_id": r.run_id, "spec": r.spec.to_json(), "labels": r.labels}
                        for _, r in prepared]  # fmt: skip
                write_json(record, {"workload": gang.workload.key, "runs": runs})
            for bound, run in prepared:
                self._launch(bound, run)
                started.append(bound.pod.key)
        except (ValueError, OSError) as error:
            # The gang starts whole or not at all: what started is stopped again.
            for key in started:
                state.stop_pod(state.bound[key], PodEnd.FAILED, f"gang member failed: {error}")
            for other in pods:
                if other.key not in started:
                    state.bound.pop(other.key, None)
                    state.events.append(BindFailed(other.key, str(error)))
            gang.bound.clear()
            if not state.holding(gang.workload.key):
                state.ports.release(gang.workload.key)
            record.unlink(missing_ok=True)
            return
        record.unlink(missing_ok=True)  # started whole: a restart adopts its runs
        gang.bound.clear()
        if not retry:
            state.events.extend(PodReady(key) for key in started)

    def _gang_start_path(self, workload_key: str) -> Path:
        """Where a gang's start is recorded while its members start (a file in the private
        runs directory, which no run's directory is named like)."""
        name = f".gang-start-{workload_key.replace('/', '_')}.json"
        return self._state.supervisor.runs_dir / name

    def finish_gang_starts(self) -> None:
        """At a restart: a gang whose start was recorded and not finished (the server died
        between two of its members' starts) is started whole now, each member missing started
        as it was to be (its run id, command, rendezvous port), and none started twice."""
        state = self._state
        for path in sorted(state.supervisor.runs_dir.glob(".gang-start-*.json")):
            record = read_json(path) or {}
            for run in record.get("runs") or []:
                run_id = str(run.get("run_id", ""))
                if not run_id or state.supervisor.run_dir(run_id).exists():
                    continue
                try:
                    labels = {str(k): str(v) for k, v in dict(run["labels"]).items()}
                    spec = ProcessSpec.from_json(run["spec"])
                    confinement = self._confinement(spec, labels["placement"])
                    state.supervisor.start(run_id, spec, labels, state.grace_s, *confinement)
                except (KeyError, TypeError, ValueError, OSError) as error:
                    log.error("run %s of an unfinished gang start cannot start: %s", run_id, error)
                else:
                    log.warning("run %s: started now, its gang's start was cut short", run_id)
            path.unlink(missing_ok=True)

    def _start_run(self, gang: Gang, bound: BoundPod, env: dict[str, str]) -> None:
        """Start one run of a bound pod of the gang (:meth:`_prepare_run`, then launched)."""
        self._launch(bound, self._prepare_run(gang, bound, env))

    def _prepare_run(self, gang: Gang, bound: BoundPod, env: dict[str, str]) -> PreparedRun:
        """One run of a bound pod of the gang, to start: ``env`` and its devices' variables
        laid over its process's, its Job completion's index given (an Indexed Job's), and
        what a restarted server needs kept with it (see the module docstring)."""
        state = self._state
        pod = bound.pod
        completion = gang.completion_of.get(pod.key)
        if completion is None:
            completion = gang.next_completion()
            if completion is not None:
                gang.completion_of[pod.key] = completion
        env.update(placement_env(bound.placement, state.inventory, state.mps))
        spec = gang.specs[pod.key]
        if gang.indexed and completion is not None:
            env[JOB_COMPLETION_INDEX] = str(completion)
            if spec.array_first is not None:
                env.update(array_env(spec.array_first, completion, gang.completions))
        run_id = self._next_run_id(pod)
        started_at = state.clock.now()
        labels = {
            "pod": pod.key,
            "workload": gang.workload.key,
            "rank": str(bound.rank),
            "attempt": run_id.rsplit("_", 1)[1],
            "placement": placement_to_text(bound.placement),
            "started_at": repr(started_at),
            **gang_counts(gang).labels(),
        }
        if completion is not None:
            labels["completion"] = str(completion)
        port = state.ports.port_of(gang.workload.key)
        if port is not None and len(gang.workload.pods) > 1:
            labels["port"] = str(port)  # held again by a restarted server while it runs
        run = PreparedRun(run_id, spec.with_env(env), labels, started_at, completion)
        run.deadline_at = gang.deadline_at
        return run

    def _launch(self, bound: BoundPod, run: PreparedRun) -> None:
        """Start a prepared run of ``bound`` and take it as its current run."""
        state = self._state
        confinement = self._confinement(run.spec, run.labels["placement"])
        state.supervisor.start(run.run_id, run.spec, run.labels, state.grace_s, *confinement)
        bound.run_id, bound.completion = run.run_id, run.completion
        bound.deadline_at, bound.started_at = run.deadline_at, run.started_at
        state.by_run[run.run_id] = bound.pod.key

    def _confinement(
        self, spec: ProcessSpec, placement_text: str
    ) -> tuple[Limits, list[tuple[str, str]]]:
        """A run's cgroup limits and the device nodes of its placement (its labels' text)."""
        placement = placement_from_text(placement_text)
        gpus = [*placement.gpu_indices, *(gpu for gpu, _ in placement.mig_slices)]
        instances = []
        for gpu, slot in placement.mig_slices:
            device = self._state.inventory.device(gpu)
            found = next((m for m in device.mig if m.slot == slot), None) if device else None
            if found is not None:
                instances.append((gpu, found.gpu_instance_id, found.compute_instance_id))
        nodes = gpu_nodes(gpus, self._state.device_dir, instances)
        return Limits(spec.cpu_limit_milli, spec.memory_limit_bytes, None), nodes

    def run_next_completion(
        self, gang: Gang, bound: BoundPod, completion: int, retried: str = ""
    ) -> bool:
        """A pod whose completion succeeded runs the next one in place, at once (as the
        simulator's Job does: its place and quota stay taken); ``retried``: it runs
        ``completion`` again, or the next after it failed, saying so (a failure, not a
        completion done). False if it cannot start."""
        state = self._state
        state.by_run.pop(bound.run_id or "", None)
        gang.completion_of[bound.pod.key] = completion
        try:
            self._start_run(gang, bound, {})
        except (ValueError, OSError) as error:
            log.error("pod %s: completion %d cannot start: %s", bound.pod.key, completion, error)
            gang.completion_of.pop(bound.pod.key, None)
            return False
        if retried:
            state.events.append(PodRestarted(bound.pod.key, retried))
            return True
        message = f"runs completion {completion} ({len(gang.done)} of {gang.completions} done)"
        state.events.append(PodRestarted(bound.pod.key, message, completion))
        return True

    def _next_run_id(self, pod: Pod) -> str:
        prefix = f"{pod.namespace}_{pod.name}_"
        attempts = [
            int(name[len(prefix) :])
            for name in os.listdir(self._state.supervisor.runs_dir)
            if name.startswith(prefix) and name[len(prefix) :].isdigit()
        ]
        return f"{prefix}{max(attempts, default=0) + 1}"
