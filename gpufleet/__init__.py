"""gpufleet: a GPU-aware scheduler for AI workloads.

One scheduling core (``gpufleet.scheduling``) runs in many worlds: the embedded simulated
cluster (``gpufleet.backends.sim``) and, later, real clusters. See README.md for the map.
"""

__version__ = "0.1.0"
