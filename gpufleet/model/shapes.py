"""Shape tables: the distribution of pod shapes (how many pods of each), with run-time
quantiles per pod class, as a trace's summary gives them. Reading one is io's
(:mod:`gpufleet.io.cluster_traces.shapes`); drawing pods from one is the simulator's."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.model.pod import GpuRequest, Pod


@dataclass(frozen=True, slots=True)
class ShapeRow:
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str
    count: int

    def pod(self, name: str) -> Pod:
        gpu = GpuRequest(self.num_gpu, self.gpu_milli) if self.num_gpu else GpuRequest()
        models = frozenset(self.gpu_spec.split("|")) if self.gpu_spec else None
        return Pod(name, "default", self.cpu_milli, self.memory_mib, gpu, gpu_models=models)


@dataclass(frozen=True, slots=True)
class ShapeTable:
    """Pod shapes with counts, and run-time quantiles (seconds) per pod class."""

    shapes: tuple[ShapeRow, ...]
    runtime_quantiles: dict[str, tuple[float, ...]]

    @property
    def total(self) -> int:
        return sum(s.count for s in self.shapes)
