"""What one node of a shape costs an hour, from a price list: :func:`node_rate`.

A node is priced as the price list prices what runs on it, so that a node pool's price and the
cost reports agree: its GPUs at the list's price of one GPU of their model on the node's
capacity type, plus its vCPUs and GiB of memory at the list's host prices (the list's GPU
prices are instance prices less the host, so the host is added back here, not counted twice).
A price the list only estimates (a spot price as a fraction of on-demand) makes the node's
price estimated too.

What it does not do: read the list (:mod:`gpufleet.io.fleet.prices`) or take a pool's own price
(a pool that states one is not looked up: :mod:`gpufleet.io.fleet.nodepools`).
"""

from __future__ import annotations

from gpufleet.economics.prices import PriceList, Rate
from gpufleet.model.capacity import CapacityType
from gpufleet.model.node import Node

MIB_PER_GIB = 1024
MILLI_PER_CPU = 1000


def node_rate(node: Node, capacity: CapacityType, prices: PriceList) -> Rate:
    """The hourly price of ``node`` bought as ``capacity``. Raises
    :class:`~gpufleet.economics.prices.MissingPriceError` when the list does not price its GPU
    model, or the model or the host on that capacity type (and gives no estimate)."""
    hourly = 0.0
    estimated = False
    model = node.gpu_model
    if model is not None:
        gpu = prices.gpu_rate(model, capacity)
        hourly += gpu.hourly * node.gpu_count
        estimated |= gpu.estimated
    cpu = prices.cpu_rate(capacity)
    memory = prices.memory_rate(capacity)
    hourly += cpu.hourly * node.cpu_milli / MILLI_PER_CPU
    hourly += memory.hourly * node.memory_mib / MIB_PER_GIB
    return Rate(hourly, estimated or cpu.estimated or memory.estimated)


__all__ = ["node_rate"]
