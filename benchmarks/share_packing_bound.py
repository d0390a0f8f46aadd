"""A lower bound for the fill-up metric: how well can the trace's GPU-sharing pods be packed?

    python benchmarks/share_packing_bound.py

At 100% arrived, the arrived GPU request equals the cluster's capacity, so the unallocated GPU %
equals the idle GPU %: what lies in partly used GPUs plus whole GPUs nobody could use. Every
sharing pod that is placed leaves its device's unused remainder idle unless other shares fill
it. This script solves the bin packing of all sharing pods of the default trace into GPUs
(capacity 1000 milli each) exactly: the Gilmore-Gomory LP over all packing patterns for a lower
bound, and the integer program (HiGHS, through scipy) for the optimum. Even an offline packer that
knew every pod in advance would leave that much idle; an online scheduler that places every pod
that fits (as the protocol demands) can only do worse, up to the few shares that arrive after
the cluster is full.

Writes benchmarks/results/share_packing_bound.md and .json.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.optimize import LinearConstraint, linprog, milp

from gpufleet.io.cluster_traces.alibaba import read_nodes, read_pods
from gpufleet.io.cluster_traces.datasets import NODES_FILE, PODS_FILE, find_alibaba_trace
from gpufleet.model import MILLI_PER_GPU
from gpufleet.report.summary import write_json

RESULTS = Path(__file__).resolve().parent / "results"


def patterns(sizes: list[int], capacity: int) -> npt.NDArray[np.int64]:
    """All multisets of ``sizes`` that fit in one device (columns: counts per size)."""
    found: list[list[int]] = []
    counts = [0] * len(sizes)

    def extend(i: int, room: int) -> None:
        if i == len(sizes):
            if any(counts):
                found.append(counts.copy())
            return
        for k in range(room // sizes[i] + 1):
            counts[i] = k
            extend(i + 1, room - k * sizes[i])
        counts[i] = 0

    extend(0, capacity)
    return np.array(found, dtype=np.int64).T


def main() -> int:
    trace = find_alibaba_trace()
    if trace is None:
        print("Alibaba 2023 trace not found: set GPUFLEET_ALIBABA_TRACE_DIR", file=sys.stderr)
        return 2
    capacity = sum(n.gpu_count for n in read_nodes(trace / "csv" / NODES_FILE)) * MILLI_PER_GPU
    pods = [t.pod for t in read_pods(trace / "csv" / PODS_FILE)]
    shares = Counter(p.gpu.milli for p in pods if p.gpu.is_shared)
    sizes = sorted(shares)
    demand = np.array([shares[s] for s in sizes], dtype=np.float64)
    total = int(sum(s * shares[s] for s in sizes))
    matrix = patterns(sizes, MILLI_PER_GPU)
    cost = np.ones(matrix.shape[1])
    lp = linprog(cost, A_ub=-matrix, b_ub=-demand, bounds=(0, None), method="highs")
    ip = milp(
        cost,
        constraints=LinearConstraint(matrix, lb=demand),
        integrality=np.ones(matrix.shape[1]),
        options={"time_limit": 300},
    )
    lp_waste = lp.fun * MILLI_PER_GPU - total
    ip_waste = ip.fun * MILLI_PER_GPU - total
    big = max(sizes, key=lambda s: shares[s])  # the most common share
    fillers = sum(shares[s] for s in sizes if s <= MILLI_PER_GPU - big)
    result = {
        "command": "python benchmarks/share_packing_bound.py",
        "sharing_pods": int(sum(shares.values())),
        "share_milli": total,
        "capacity_milli": capacity,
        "patterns": int(matrix.shape[1]),
        "lp_devices": round(float(lp.fun), 3),
        "lp_waste_milli": round(float(lp_waste), 1),
        "optimal_devices": round(float(ip.fun)),
        "optimal_waste_milli": round(float(ip_waste)),
        "optimal_waste_pct_of_capacity": round(100.0 * ip_waste / capacity, 3),
        "solver": str(ip.message),
        "largest_waste_source": {
            "milli": big,
            "pods": shares[big],
            "pods_small_enough_to_share_its_device": fillers,
        },
        "share_sizes": {str(s): shares[s] for s in sizes},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS / "share_packing_bound.json", result)
    ip_pct = 100 * ip_waste / capacity
    solved = "integer program, optimal" if ip.status == 0 else f"integer program: {ip.message}"
    text = f"""# How well can the trace's GPU-sharing pods be packed at all?

`python benchmarks/share_packing_bound.py`. The default trace has {result["sharing_pods"]:,}
pods that ask for a share of one GPU, {total:,} milli-GPU in all, on a cluster of
{capacity // MILLI_PER_GPU:,} GPUs. Packing them into devices of 1,000 milli, solved exactly over
all {result["patterns"]:,} packing patterns:

| | devices | idle milli-GPU on them | % of the cluster's GPU capacity |
|---|---|---|---|
| LP lower bound | {lp.fun:,.2f} | {lp_waste:,.0f} | {100 * lp_waste / capacity:.3f} |
| optimal packing ({solved}) | {ip.fun:,.0f} | {ip_waste:,.0f} | **{ip_pct:.3f}** |

The most common share, {big} milli ({shares[big]:,} pods), leaves {MILLI_PER_GPU - big} milli
on its device that only the {fillers} pods of at most {MILLI_PER_GPU - big} milli could use.

Why it matters: at 100% arrived, the arrived GPU request equals the capacity, so the unallocated
GPU % of the fill-up benchmark is exactly the idle GPU %. A scheduler that places every pod that
fits (as the protocol requires) places nearly all sharing pods before the cluster fills up, so
its unallocated GPU % at 100% arrived cannot go much below this optimum: only the few sharing pods
that arrive after the cluster is full escape it.
"""
    (RESULTS / "share_packing_bound.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
