"""Shape tables on disk: a pod-shape CSV with counts, and a run-time quantile CSV.

The table gpufleet ships (``gpufleet/data/alibaba2023_*.csv``) was derived from the Alibaba
2023 trace with ``gpufleet traces shapes``; it holds counts of pod shapes, not pods.
"""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path

from gpufleet.io.errors import InputError
from gpufleet.model.shapes import ShapeRow, ShapeTable

SHAPE_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "count")
BUNDLED_SHAPES = "alibaba2023_pod_shapes.csv"
BUNDLED_RUNTIMES = "alibaba2023_runtimes.csv"


def write_shape_table(
    table: ShapeTable, shapes_path: Path, runtimes_path: Path, quantiles: tuple[int, ...]
) -> None:
    with shapes_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(SHAPE_COLUMNS)
        for s in table.shapes:
            writer.writerow(
                [s.cpu_milli, s.memory_mib, s.num_gpu, s.gpu_milli, s.gpu_spec, s.count]
            )
    with runtimes_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pod_class", *(f"p{q}" for q in quantiles)])
        for cls, values in table.runtime_quantiles.items():
            writer.writerow([cls, *values])


def read_shape_table(shapes_path: Path, runtimes_path: Path) -> ShapeTable:
    """Read a shape table written by :func:`write_shape_table`."""
    shapes: list[ShapeRow] = []
    source = str(shapes_path)
    with shapes_path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in SHAPE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(source, f"missing column(s) {', '.join(missing)}", "1")
        for row in reader:
            try:
                shapes.append(
                    ShapeRow(
                        int(row["cpu_milli"]),
                        int(row["memory_mib"]),
                        int(row["num_gpu"]),
                        int(row["gpu_milli"]),
                        row["gpu_spec"] or "",
                        int(row["count"]),
                    )
                )
            except ValueError as error:
                raise InputError(source, f"bad number: {error}", str(reader.line_num)) from None
    quantiles: dict[str, tuple[float, ...]] = {}
    with runtimes_path.open(newline="", encoding="utf-8") as handle:
        for line, fields in enumerate(csv.reader(handle), start=1):
            if line == 1 or not fields:
                continue
            try:
                quantiles[fields[0]] = tuple(float(v) for v in fields[1:])
            except ValueError as error:
                raise InputError(str(runtimes_path), f"bad number: {error}", str(line)) from None
    return ShapeTable(tuple(shapes), quantiles)


def bundled_path(name: str) -> Path:
    """Path of a file shipped in ``gpufleet/data``."""
    return Path(str(resources.files("gpufleet") / "data" / name))


def bundled_shape_table() -> ShapeTable:
    """The shape table derived from the Alibaba 2023 trace, shipped with gpufleet."""
    return read_shape_table(bundled_path(BUNDLED_SHAPES), bundled_path(BUNDLED_RUNTIMES))
