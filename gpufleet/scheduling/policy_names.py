"""The placement policies' names and what each does, and nothing else.

Its own module (no imports) so that a command can check a ``--policy`` before it imports the
policies themselves (``gpufleet scheduler`` lists its cluster meanwhile). The policies are
built by name in :mod:`gpufleet.scheduling.policies`, for exactly these names.
"""

from __future__ import annotations

POLICY_DESCRIPTIONS: dict[str, str] = {
    "random": "a feasible node uniformly at random (FGD paper baseline)",
    "dotprod": "Tetris dot product of free and requested resources (FGD paper baseline)",
    "gpu-clustering": "keep pods of the same GPU kind together (FGD paper baseline)",
    "gpu-packing": "fill partly used GPUs, then used nodes, then new ones (FGD paper baseline)",
    "bestfit": "least free CPU and GPU left after placement (FGD paper baseline)",
    "fgd": "fragmentation gradient descent (Weng et al., USENIX ATC 2023)",
    "default": "gpufleet's own policy (see gpufleet/scheduling/policies/default.py)",
}
#: In the order the FGD paper's figures give them, gpufleet's own last.
POLICY_NAMES: tuple[str, ...] = tuple(POLICY_DESCRIPTIONS)
