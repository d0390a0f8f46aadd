"""gpufleet: a GPU-aware scheduler for AI workloads.

One scheduling core (``gpufleet.scheduling``) runs in many worlds: the simulated cluster
(``gpufleet.backends.sim``), a Kubernetes cluster (``gpufleet.backends.kube``) and this
machine's GPUs (``gpufleet.backends.local``). See docs/architecture.md for the map.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Looked up when asked for: reading the installed metadata costs every command 25 ms.
    if name != "__version__":
        raise AttributeError(f"module 'gpufleet' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("gpufleet")
    except PackageNotFoundError:  # run from a source tree that was never installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
