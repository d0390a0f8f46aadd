"""The job controllers a simulated cluster holds, by workload.

Owns :class:`JobControllers`: the :class:`~gpufleet.backends.sim.jobs.JobRun` of each job of
each workload that arrived (the latest workload of each key), every one ever made when a run's
report needs them, and those taken back after a restart (from saved states) until their
workload arrives again. It decides nothing (the runs do) and schedules nothing (the cluster
does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.backends.sim.jobs import JobRun
from gpufleet.model.workload import TimedWorkload, Workload


class JobControllers:
    """See the module docstring; ``keep``: keep every run made, for a run's report."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        #: Every job's controller, with the workload it came in (when ``keep``).
        self.runs: list[tuple[Workload, JobRun]] = []
        #: Taken back after a restart: by workload key, then pod name.
        self._adopted: dict[str, dict[str, JobRun]] = {}
        #: The controllers of the latest workload of each key.
        self._runs_of: dict[str, list[JobRun]] = {}

    def arrived(self, timed: TimedWorkload) -> dict[str, JobRun]:
        """The controllers of a workload that arrives, by pod name: those adopted for it,
        else new ones."""
        return self._adopted.pop(timed.workload.key, None) or self._new(timed)

    def adopt(self, timed: TimedWorkload, states: Mapping[str, Mapping[str, Any]]) -> None:
        """Take back the controllers of a workload that was here before a restart, from their
        saved states (by job name), until it arrives (if it has jobs)."""
        if timed.jobs:
            self._adopted[timed.workload.key] = self._new(timed, states)

    def adopted(self, workload_key: str, pod_name: str) -> JobRun | None:
        """The adopted controller of a pod put back after a restart."""
        return self._adopted.get(workload_key, {}).get(pod_name)

    def states(self, workload_key: str) -> dict[str, dict[str, Any]]:
        """The saved states of a workload's jobs, by job name (see :meth:`adopt`)."""
        return {run.spec.name: run.state() for run in self.of(workload_key)}

    def of(self, workload_key: str) -> list[JobRun]:
        """The controllers of the workload of this key (the latest arrived)."""
        return list(self._runs_of.get(workload_key, ()))

    def forget(self, workload_key: str) -> None:
        """The workload is deleted: its controllers go too."""
        self._runs_of.pop(workload_key, None)
        self._adopted.pop(workload_key, None)

    def _new(
        self, timed: TimedWorkload, states: Mapping[str, Mapping[str, Any]] | None = None
    ) -> dict[str, JobRun]:
        """The controllers of a workload's jobs (from their saved states, if given), by pod."""
        runs: dict[str, JobRun] = {}
        workload = timed.workload
        mine = self._runs_of[workload.key] = []
        for spec in timed.jobs:
            state = (states or {}).get(spec.name, {})
            run = JobRun.restored(spec, workload.namespace, state)
            mine.append(run)
            if self.keep:
                self.runs.append((workload, run))
            runs.update(dict.fromkeys(spec.pod_names, run))
        return runs
