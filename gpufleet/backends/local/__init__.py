"""The local machine as a world: its GPUs, and workloads run as processes on them.

``gpufleet serve --local``'s backend (see README "How it works"): :mod:`.machine` (the
ClusterBackend), :mod:`.supervisor` and :mod:`.shim` (processes that outlive the server),
:mod:`.run_state` (what each run left on disk), :mod:`.proc_hiding` (a run's ``/proc`` with
only its own user's processes), :mod:`.devices_env` (devices and gangs as environment
variables), :mod:`.node` (this machine as the scheduler's one node).

Kept free of imports (as ``gpufleet/__init__.py`` and ``gpufleet/backends/__init__.py`` are):
one shim starts per run (:func:`.supervisor.shim_command`), importing the packages above it,
and every module imported here would slow each start.
"""
