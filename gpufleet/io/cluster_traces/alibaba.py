"""The Alibaba GPU cluster trace (cluster-trace-gpu-v2023) as nodes and timed pods.

Node lists have ``sn, cpu_milli, memory_mib, gpu, model``. Pod lists have ``name, cpu_milli,
memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time`` (some trace variants carry only the first five).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from gpufleet.io.errors import InputError, quoted, shorten
from gpufleet.io.names import label_value_problem, name_problem
from gpufleet.model import MILLI_PER_GPU, GpuDevice, GpuRequest, Node, Pod, gfd_labels
from gpufleet.model.node import GFD_LABELS
from gpufleet.model.workload import TimedPod

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPTIONAL_POD_COLUMNS = (
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)

#: GPU memory per device (MiB) of the trace's models; G1-G3 are undisclosed, so unknown (0).
GPU_MEMORY_MIB = {
    "P100": 16_384,
    "T4": 15_360,
    "V100M16": 16_384,
    "V100M32": 32_768,
    "A10": 24_576,
}
_MISSING = ("", "nan", "NaN", "None", "null")


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV file, streamed (a trace may be large); a line that cannot be read (not
    UTF-8, a NUL byte, a field of more than csv's limit) is an InputError naming it."""
    source = str(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as error:
        raise InputError(source, f"cannot open: {error.strerror}") from error
    with handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                found = ", ".join(shorten(c, 40) for c in header[:20]) or "none"
                raise InputError(
                    source, f"missing column(s) {', '.join(missing)}; found {found}", "1"
                )
            for row in reader:
                if None in row:
                    raise InputError(
                        source, "more fields than the header has", str(reader.line_num)
                    )
                yield reader.line_num, {k: (v or "").strip() for k, v in row.items()}
        except UnicodeDecodeError as error:
            raise InputError(
                source,
                f"not UTF-8 text ({error.reason}): is it a binary file?",
                f"after line {reader.line_num}",
            ) from None
        except csv.Error as error:
            raise InputError(
                source, f"not a CSV line: {shorten(str(error))}", str(reader.line_num + 1)
            ) from None


def _named_rows(
    path: Path, required: tuple[str, ...], name_column: str, kind: str
) -> Iterator[tuple[int, str, dict[str, str]]]:
    """Rows with a name that appears only once and is a valid Kubernetes name (a DNS-1123
    subdomain; a node's also a label value, since it is its hostname label)."""
    seen: set[str] = set()
    for line, row in _rows(path, required):
        name = row[name_column]
        if not name:
            raise InputError(str(path), f"empty {kind} name", str(line), name_column)
        problem = name_problem(name) or (label_value_problem(name) if kind == "node" else None)
        if problem is not None:
            raise InputError(
                str(path), f"{kind} name {problem}; got {quoted(name)}", str(line), name_column
            )
        if name in seen:
            raise InputError(
                str(path), f"{kind} {quoted(name)} appears twice", str(line), name_column
            )
        seen.add(name)
        yield line, name, row


def _int(source: str, line: int, row: dict[str, str], column: str, minimum: int = 0) -> int:
    text = row.get(column, "")
    try:
        value = float(text)
        if not value.is_integer():
            raise ValueError(text)
    except ValueError:
        raise InputError(
            source, f"expected a whole number >= {minimum}, got {quoted(text)}", str(line), column
        ) from None
    if value < minimum:
        raise InputError(
            source, f"expected a whole number >= {minimum}, got {quoted(text)}", str(line), column
        )
    return int(value)


def _time(source: str, line: int, row: dict[str, str], column: str) -> float | None:
    text = row.get(column, "")
    if text in _MISSING:
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(
            source, f"expected seconds, got {quoted(text)}", str(line), column
        ) from None


def read_nodes(path: str | Path, include_cpu_only: bool = True) -> list[Node]:
    """Nodes of an ``openb_node_list_*.csv`` file, with GPU Feature Discovery labels."""
    path = Path(path)
    source = str(path)
    nodes: list[Node] = []
    for line, name, row in _named_rows(path, NODE_COLUMNS, "sn", "node"):
        count = _int(source, line, row, "gpu")
        model = row["model"] if row["model"] not in _MISSING else ""
        if count and not model:
            raise InputError(source, f"node has {count} GPUs but no model", str(line), "model")
        memory = GPU_MEMORY_MIB.get(model, 0)
        if row.get("gpu_memory_mib"):
            memory = _int(source, line, row, "gpu_memory_mib")
        gpus = tuple(GpuDevice(i, model, memory) for i in range(count))
        if not count and not include_cpu_only:
            continue
        labels = {GFD_LABELS.HOSTNAME: name, **gfd_labels(gpus)}
        nodes.append(
            Node(
                name,
                _int(source, line, row, "cpu_milli", 1),
                _int(source, line, row, "memory_mib", 1),
                gpus,
                labels,
            )
        )
    if not nodes:
        raise InputError(source, "no nodes in file")
    return nodes


def read_pods(path: str | Path, namespace: str = "default") -> list[TimedPod]:
    """Pods of an ``openb_pod_list_*.csv`` file, with their trace times."""
    path = Path(path)
    source = str(path)
    pods: list[TimedPod] = []
    for line, name, row in _named_rows(path, POD_COLUMNS, "name", "pod"):
        count = _int(source, line, row, "num_gpu")
        milli = _int(source, line, row, "gpu_milli")
        if milli > MILLI_PER_GPU:
            raise InputError(
                source, f"more than one GPU per device ({milli} > 1000)", str(line), "gpu_milli"
            )
        if count == 0:
            gpu = GpuRequest()
        elif count > 1 and milli != MILLI_PER_GPU:
            raise InputError(
                source,
                f"{count} GPUs must each be whole (gpu_milli 1000), got {milli}",
                str(line),
                "gpu_milli",
            )
        elif milli == 0:
            raise InputError(source, "a GPU pod needs gpu_milli > 0", str(line), "gpu_milli")
        else:
            gpu = GpuRequest(count=count, milli=milli)
        spec = row.get("gpu_spec", "")
        models = None
        if spec not in _MISSING:
            models = frozenset(m.strip() for m in spec.split("|") if m.strip()) or None
        labels = {k: row[k] for k in ("qos", "pod_phase") if row.get(k)}
        pod = Pod(
            name,
            namespace,
            _int(source, line, row, "cpu_milli"),
            _int(source, line, row, "memory_mib"),
            gpu,
            gpu_models=models,
            labels=labels,
        )
        pods.append(
            TimedPod(
                pod,
                _time(source, line, row, "creation_time"),
                _time(source, line, row, "deletion_time"),
                _time(source, line, row, "scheduled_time"),
            )
        )
    return pods


def write_pods(path: str | Path, pods: list[TimedPod]) -> None:
    """Write pods in the trace's pod-list format (all eleven columns)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(POD_COLUMNS + OPTIONAL_POD_COLUMNS)
        for timed in pods:
            pod = timed.pod
            spec = "|".join(sorted(pod.gpu_models)) if pod.gpu_models else ""
            writer.writerow(
                [
                    pod.name,
                    pod.cpu_milli,
                    pod.memory_mib,
                    pod.gpu.count,
                    pod.gpu.milli if pod.gpu.count else 0,
                    spec,
                    pod.labels.get("qos", ""),
                    pod.labels.get("pod_phase", ""),
                    *(_fmt_time(t) for t in (timed.created, timed.deleted, timed.scheduled)),
                ]
            )
    tmp.replace(path)


def _fmt_time(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else str(value)
