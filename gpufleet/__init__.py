"""gpufleet: a GPU-aware scheduler for AI workloads.

One scheduling core (``gpufleet.scheduling``) runs in many worlds: the embedded simulated
cluster (``gpufleet.backends.sim``) and, later, real clusters. See README.md for the map.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpufleet")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0+unknown"
