"""What one DRA allocation on one node costs: the allocator's search and policy, per shape.

    python benchmarks/dra_allocate.py [--repeat 200]

Issue 32's target shape is kube-scheduler's scheduler_perf DRA test: nodes of 8 GPUs, a claim
per pod from a template. :data:`SHAPES` times ``allocate`` (gpufleet/scheduling/dra/) on one
such node, empty and half taken, for 1, 2, 4 and 8 GPUs (with a selector on the product name,
and with ``matchAttribute`` on the PCIe root), and on a node of partitionable GPUs (one
whole-GPU device and seven 1g.10gb MIG devices each) for a MIG device and a whole GPU. Each
shape: the median of ``--repeat`` calls, milliseconds (selectors compiled and device
contexts built before timing, as a running scheduler has them). Results:
benchmarks/results/dra_allocate.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median

from gpufleet.model.dra import NVIDIA_GPU_DRIVER, PCIE_ROOT_ATTRIBUTE, Device, ResourceSlice
from gpufleet.scheduling.dra.allocator import Allocation, ClaimToAllocate, allocate
from gpufleet.scheduling.dra.inventory import NodeDevices, node_devices
from gpufleet.testing.dra import GPU_CLASS, exact, gpu_counters, make_claim, make_gpu, make_mig

RESULTS = Path(__file__).resolve().parent / "results"
CLASSES = {GPU_CLASS.name: GPU_CLASS}
H100 = 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")'
MIG = 'device.attributes["gpu.nvidia.com"].type == "mig"'
WHOLE = 'device.attributes["gpu.nvidia.com"].type == "gpu"'


def gpu_node(*taken: int) -> NodeDevices:
    return NodeDevices(
        tuple(make_gpu(i) for i in range(8)), taken=frozenset(make_gpu(i).id for i in taken)
    )


def mig_node() -> NodeDevices:
    devices: list[Device] = []
    for gpu in range(8):
        devices.append(make_gpu(gpu, counter_set=f"gpu-{gpu}-counters"))
        devices.extend(make_mig(gpu, "1g.10gb", slot) for slot in range(7))
    counters = tuple(gpu_counters(f"gpu-{gpu}-counters") for gpu in range(8))
    resource_slice = ResourceSlice(
        "node-a", NVIDIA_GPU_DRIVER, "node-a", 1, 1, tuple(devices), "node-a",
        shared_counters=counters,
    )  # fmt: skip
    taken = [make_mig(0, "1g.10gb", 0).id]
    return node_devices([resource_slice], "node-a", allocated=taken)


def shape(node: NodeDevices, count: int, selector: str, match: bool) -> Callable[[], Allocation]:
    spec = make_claim(("gpus", exact(count, selector)), match=[PCIE_ROOT_ATTRIBUTE] * match)
    claims = [ClaimToAllocate("default/pod-gpus", spec)]
    return lambda: allocate(node, claims, CLASSES)


SHAPES: dict[str, Callable[[], Allocation]] = {
    **{
        f"{n} GPU{'s' if n > 1 else ''}, empty node": shape(gpu_node(), n, H100, False)
        for n in (1, 2, 4, 8)
    },
    **{
        f"{n} GPUs on one PCIe root, empty node": shape(gpu_node(), n, H100, True)
        for n in (2,)
    },
    **{f"{n} GPU{'s' if n > 1 else ''}, 4 taken": shape(gpu_node(0, 2, 5, 7), n, H100, False)
       for n in (1, 2, 4)},
    "1 MIG device, partitionable node": shape(mig_node(), 1, MIG, False),
    "1 whole GPU, partitionable node": shape(mig_node(), 1, WHOLE, False),
}  # fmt: skip


def timed(call: Callable[[], Allocation], repeat: int) -> float:
    call()  # compile the selectors, build the devices' contexts
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    lines = [
        "# DRA allocation on one node",
        "",
        f"`python benchmarks/dra_allocate.py --repeat {args.repeat}` on "
        f"{platform.python_implementation()} {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f} before",
        "",
        "| shape | devices chosen | median ms |",
        "|---|---|---|",
    ]
    for name, call in SHAPES.items():
        allocation = call()
        chosen = ", ".join(c.device.name for c in allocation.choices) or str(allocation.reason)
        lines.append(f"| {name} | {chosen} | {timed(call, args.repeat):.2f} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dra_allocate.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
