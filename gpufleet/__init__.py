"""gpufleet: a GPU-aware scheduler for AI workloads.

One scheduling core (``gpufleet.scheduling``) runs in many worlds: the simulated cluster
(``gpufleet.backends.sim``), a Kubernetes cluster (``gpufleet.backends.kube``) and this
machine's GPUs (``gpufleet.backends.local``). See docs/architecture.md for the map.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Looked up when asked for: reading a pyproject or the installed metadata costs every
    # command tens of milliseconds (gpufleet.package_version says which it reads).
    if name != "__version__":
        raise AttributeError(f"module 'gpufleet' has no attribute {name!r}")
    from gpufleet.package_version import current_version

    found = current_version()
    globals()["__version__"] = found
    return found
