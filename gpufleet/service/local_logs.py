"""The output and terminals of ``gpufleet serve --local``'s runs.

Owns :class:`LocalRunOutput`, the local plane's :class:`~gpufleet.service.capabilities.
PodLogs` and :class:`~gpufleet.service.capabilities.Terminals` (the other worlds have none):
the logs of each pod's runs (:meth:`LocalRunOutput.pod_log`: from an offset, or their last
bytes), kept on disk after the run, and the terminal of a run started with one (``gpufleet
run -it``: :meth:`LocalRunOutput.attach_point`), for its own tenant only.
"""

from __future__ import annotations

import os

from gpufleet.backends.local.machine import LocalMachine
from gpufleet.backends.local.run_state import EXIT_FILE
from gpufleet.backends.local.terminal import ATTACH_SOCKET
from gpufleet.service.auth import ForbiddenError, Principal
from gpufleet.service.capabilities import AttachPoint, PodLog
from gpufleet.service.plane_book import LOG_CHUNK, ConflictError, NotFoundError, PlaneBook


class LocalRunOutput:
    """See the module docstring."""

    def __init__(self, book: PlaneBook, machine: LocalMachine) -> None:
        self.book = book
        self.machine = machine

    def pod_log(
        self,
        principal: Principal,
        key: str,
        pod: str | None = None,
        attempt: int | None = None,
        offset: int = 0,
        limit: int = LOG_CHUNK,
        tail: int | None = None,
    ) -> PodLog:
        """Output of one run of a pod of the workload ``key`` (its first pod, latest run by
        default), from byte ``offset``, or its last ``tail`` bytes (the log's size then)."""
        with self.book.lock:
            record = self.book.visible(principal, key)
            pods = list(record.pods.values())
            chosen = (
                pods[0]
                if pod is None
                else next((p for p in pods if p.pod.name == pod or p.pod.key == pod), None)
            )
            if chosen is None:
                names = ", ".join(p.pod.name for p in pods)
                raise NotFoundError(f"workload {key} has no pod {pod!r} (its pods: {names})")
            pod_key = chosen.pod.key
            runs = self.machine.runs_of(pod_key)
            running_run = self.machine.run_of(pod_key)
            finished = not record.active
        if not runs:
            return PodLog(chosen.pod.name, 0, 0, 0, 0, "", False, finished)
        number = len(runs) if attempt is None else attempt
        if not 1 <= number <= len(runs):
            raise NotFoundError(f"pod {chosen.pod.name} has runs 1 to {len(runs)}, not {number}")
        run = runs[number - 1]
        path = self.machine.supervisor.log_path(run)
        data = b""
        try:
            with open(path, "rb") as handle:
                if tail is not None:
                    offset = max(0, handle.seek(0, os.SEEK_END) - max(0, tail))
                handle.seek(max(0, offset))
                data = handle.read(max(0, min(limit, LOG_CHUNK)))
        except FileNotFoundError:
            pass
        return PodLog(
            chosen.pod.name,
            number,
            len(runs),
            offset,
            offset + len(data),
            data.decode("utf-8", errors="replace"),
            running_run == run,
            finished,
        )

    def attach_point(self, principal: Principal, key: str) -> AttachPoint:
        """The terminal of the workload ``key``'s first pod's running run (``gpufleet run
        -it``): for its own tenant only (typing into it acts as that tenant's user; an
        admin may cancel it, not type into it). ConflictError when there is none to attach
        to now: it has ended, was not started with a terminal, or waits for its GPUs."""
        namespace, _, rest = key.partition("/")
        shown = f"{namespace}/{rest.rpartition('/')[2]}"  # as gpufleet logs and attach take it
        with self.book.lock:
            record = self.book.visible(principal, key)
            if principal.tenant != record.tenant:
                raise ForbiddenError(
                    f"workload {shown}: only its own tenant ({record.tenant}) attaches to its "
                    "terminal (typing into it acts as that tenant's user)"
                )
            chosen = next(iter(record.pods.values()))
            if not record.active:
                raise ConflictError(
                    f"workload {shown} has ended ({record.state.value}): there is no terminal "
                    f"to attach to; its output: gpufleet logs {shown}"
                )
            spec = self.machine.spec_of(chosen.pod.key)
            if spec is None or not spec.tty:
                raise ConflictError(
                    f"workload {shown} has no terminal: it was not started with one (gpufleet "
                    "run -it; a container's stdin: true and tty: true)"
                )
            run = self.machine.run_of(chosen.pod.key)
            if run is None:
                raise ConflictError(
                    f"workload {shown} is not running yet ({record.state.value}): it waits for "
                    "its GPUs"
                )
        run_dir = self.machine.supervisor.run_dir(run)
        return AttachPoint(chosen.pod.name, str(run_dir / ATTACH_SOCKET), str(run_dir / EXIT_FILE))
