"""What a process is, on a machine that runs workloads as local processes.

Owns :class:`ProcessSpec`: the executable and its argv (a container's ``command`` and
``args``), the exact environment it starts with (nothing is inherited by the process itself:
whoever builds a spec decides the base), its working directory, the identity it runs as and
where its output goes, its time limit, its retries, its restart policy and its Job's
completions. Plain data: reading
a Pod manifest into one is :mod:`gpufleet.io.kube.process_specs`; adding the devices' and a gang's
variables and running it is :mod:`gpufleet.backends.local`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpufleet.model.jobs import RestartPolicy


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process to run. ``executable`` is the resolved path of ``argv[0]`` (what is
    executed; ``argv[0]`` is what the program sees as its name). ``uid``/``gid`` None: the
    server's own identity. ``log_path`` None: the run's own log in its state directory.
    ``deadline_s``: the seconds it may run, from the start of its workload's run, before it is
    stopped and failed (a Pod's or Job's ``activeDeadlineSeconds``; None: no limit).
    ``backoff_limit``: how many failed runs of its workload are started again before the
    workload fails (a Job's ``backoffLimit``; None: a failure ends it, as a bare Pod's does).
    ``container``: the name of the container it was read from (what telemetry labels its GPUs
    with, as dcgm-exporter does; empty: not known).
    ``restart_policy``: ``Always`` (a Deployment's replica) restarts its process in place
    whenever it ends, ``OnFailure`` when it fails, after the kubelet's back-off; None (or
    ``Never``): an end is its end (a Job's failures are its ``backoff_limit``'s).
    ``completions``: its Job's completions (None: one per pod), run by its workload's pods in
    turn; ``indexed``: each completion has an index (``JOB_COMPLETION_INDEX``).
    ``backoff_limit_per_index``: an Indexed Job's ``backoffLimitPerIndex``, the failed runs of
    each index started again on their own (the other indexes run on) before the index fails;
    ``max_failed_indexes``: its ``maxFailedIndexes``, the failed indexes beyond which the Job
    fails at once (None: it runs its other indexes, and fails at the end).
    ``array_first``: a job array's first task id (``gpufleet run --array``; None: no array):
    each run of the Indexed Job also sees Slurm's ``SLURM_ARRAY_TASK_ID`` (its index plus it).
    ``cpu_limit_milli`` and ``memory_limit_bytes``: its container's ``resources.limits`` (or
    ``gpufleet run --cpus/--memory``), what its cgroup holds it to (None: no limit).
    ``tty``: it runs on a pseudo-terminal that clients attach to (a container's ``stdin`` and
    ``tty``, ``gpufleet run -it``)."""

    argv: tuple[str, ...]
    executable: str
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    working_dir: str = "/"
    uid: int | None = None
    gid: int | None = None
    log_path: str | None = None
    deadline_s: float | None = None
    backoff_limit: int | None = None
    container: str = ""
    restart_policy: RestartPolicy | None = None
    completions: int | None = None
    indexed: bool = False
    cpu_limit_milli: int | None = None
    memory_limit_bytes: int | None = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    array_first: int | None = None
    tty: bool = False

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("a process needs a command: argv is empty")
        if not self.executable.startswith("/"):
            raise ValueError(f"the executable must be an absolute path, got {self.executable!r}")
        if (self.uid is None) != (self.gid is None):
            raise ValueError("give both uid and gid, or neither")
        if self.deadline_s is not None and not self.deadline_s > 0:
            raise ValueError(f"a time limit must be positive, got {self.deadline_s!r}")
        if self.backoff_limit is not None and self.backoff_limit < 0:
            raise ValueError(f"a backoff limit must be >= 0, got {self.backoff_limit!r}")
        if self.completions is not None and self.completions < 1:
            raise ValueError(f"completions must be >= 1, got {self.completions!r}")
        if self.backoff_limit_per_index is not None and not self.indexed:
            raise ValueError("a backoff limit per index requires an Indexed Job")
        if self.max_failed_indexes is not None and self.backoff_limit_per_index is None:
            raise ValueError("a maximum of failed indexes requires a backoff limit per index")
        if self.array_first is not None and not self.indexed:
            raise ValueError("a job array is an Indexed Job")
        for name in ("backoff_limit_per_index", "max_failed_indexes", "array_first"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        for name in ("cpu_limit_milli", "memory_limit_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be positive, got {value!r}")

    def with_env(self, extra: Mapping[str, str]) -> ProcessSpec:
        """This spec with ``extra`` laid over its environment (``extra`` wins)."""
        return replace(self, env={**self.env, **extra})

    def to_json(self) -> dict[str, object]:
        return {
            "argv": list(self.argv),
            "executable": self.executable,
            "env": dict(self.env),
            "working_dir": self.working_dir,
            "uid": self.uid,
            "gid": self.gid,
            "log_path": self.log_path,
            "deadline_s": self.deadline_s,
            "backoff_limit": self.backoff_limit,
            "container": self.container,
            "restart_policy": None if self.restart_policy is None else self.restart_policy.value,
            "completions": self.completions,
            "indexed": self.indexed,
            "cpu_limit_milli": self.cpu_limit_milli,
            "memory_limit_bytes": self.memory_limit_bytes,
            "backoff_limit_per_index": self.backoff_limit_per_index,
            "max_failed_indexes": self.max_failed_indexes,
            "array_first": self.array_first,
            "tty": self.tty,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessSpec:
        """The inverse of :meth:`to_json` (a ValueError, or TypeError, on a malformed one)."""
        argv, env = data["argv"], data["env"]
        if not isinstance(argv, list) or not isinstance(env, dict):
            raise ValueError("a process spec needs argv (a list) and env (a mapping)")
        uid, gid, log_path = data.get("uid"), data.get("gid"), data.get("log_path")
        deadline, backoff = data.get("deadline_s"), data.get("backoff_limit")
        policy, completions = data.get("restart_policy"), data.get("completions")
        return cls(
            tuple(str(a) for a in argv),
            str(data["executable"]),
            {str(k): str(v) for k, v in env.items()},
            str(data["working_dir"]),
            None if uid is None else int(str(uid)),
            None if gid is None else int(str(gid)),
            None if log_path is None else str(log_path),
            None if deadline is None else float(str(deadline)),
            None if backoff is None else int(str(backoff)),
            str(data.get("container") or ""),
            None if policy is None else RestartPolicy(str(policy)),
            None if completions is None else int(str(completions)),
            bool(data.get("indexed", False)),
            _optional_int(data.get("cpu_limit_milli")),
            _optional_int(data.get("memory_limit_bytes")),
            _optional_int(data.get("backoff_limit_per_index")),
            _optional_int(data.get("max_failed_indexes")),
            _optional_int(data.get("array_first")),
            bool(data.get("tty", False)),
        )


def _optional_int(value: object) -> int | None:
    return None if value is None else int(str(value))
