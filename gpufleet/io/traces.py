"""Public GPU-cluster traces: where they live on this machine, and fetching them.

The trace files cannot be shipped with gpufleet. :func:`fetch_dataset` downloads them on a
machine with internet (atomically: a file appears only once complete and, where we know its
checksum, verified). :func:`find_alibaba_trace` locates a local copy: the directory named by
``GPUFLEET_ALIBABA_TRACE_DIR``, else ``shared/traces/alibaba-gpu-2023`` next to the working
directory or one of its parents (where the project's CI keeps it).
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TRACE_DIR_ENV = "GPUFLEET_ALIBABA_TRACE_DIR"
BASE_URL_ENV = "GPUFLEET_TRACE_BASE_URL"
NODES_FILE = "openb_node_list_gpu_node.csv"
PODS_FILE = "openb_pod_list_default.csv"


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    base_url: str
    files: tuple[str, ...]
    variants: tuple[str, ...]
    sha256: dict[str, str]
    description: str


ALIBABA_2023 = Dataset(
    name="alibaba-2023",
    base_url="https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023",
    files=(
        "csv/openb_node_list_gpu_node.csv",
        "csv/openb_node_list_all_node.csv",
        "csv/openb_pod_list_default.csv",
    ),
    variants=tuple(
        f"csv/openb_pod_list_{name}.csv"
        for name in (
            "cpu050",
            "cpu100",
            "cpu200",
            "cpu250",
            "gpushare20",
            "gpushare40",
            "gpushare60",
            "gpushare80",
            "gpushare100",
            "gpuspec10",
            "gpuspec20",
            "gpuspec25",
            "gpuspec33",
            "multigpu20",
            "multigpu30",
            "multigpu40",
            "multigpu50",
        )
    ),
    sha256={
        "csv/openb_node_list_gpu_node.csv": (
            "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5"
        ),
        "csv/openb_node_list_all_node.csv": (
            "5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15"
        ),
        "csv/openb_pod_list_default.csv": (
            "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"
        ),
    },
    description="Alibaba GPU cluster trace 2023 (FGD paper): 1,523 nodes, 8,152 pods",
)

DATASETS = {ALIBABA_2023.name: ALIBABA_2023}


class FetchError(RuntimeError):
    pass


def find_alibaba_trace(start: Path | None = None) -> Path | None:
    """The local ``alibaba-gpu-2023`` directory (holding ``csv/``), or None."""
    override = os.environ.get(TRACE_DIR_ENV)
    if override:
        path = Path(override)
        return path if (path / "csv" / PODS_FILE).is_file() else None
    here = (start or Path.cwd()).resolve()
    for base in (here, *here.parents):
        candidate = base / "shared" / "traces" / "alibaba-gpu-2023"
        if (candidate / "csv" / PODS_FILE).is_file():
            return candidate
    return None


#: Called with (file name, bytes so far, total bytes or None).
FetchProgress = Callable[[str, int, int | None], None]


def fetch_dataset(
    dataset: Dataset,
    directory: Path,
    base_url: str | None = None,
    include_variants: bool = False,
    progress: FetchProgress | None = None,
    timeout: float = 60.0,
) -> list[Path]:
    """Download the dataset's files into ``directory`` (keeping their ``csv/`` layout)."""
    base = (base_url or os.environ.get(BASE_URL_ENV) or dataset.base_url).rstrip("/")
    names = dataset.files + (dataset.variants if include_variants else ())
    written = []
    for name in names:
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        expected = dataset.sha256.get(name)
        if target.is_file() and expected is not None and _sha256(target) == expected:
            written.append(target)
            continue
        _download(f"{base}/{name}", target, name, expected, progress, timeout)
        written.append(target)
    return written


def _download(
    url: str,
    target: Path,
    name: str,
    expected: str | None,
    progress: FetchProgress | None,
    timeout: float,
) -> None:
    partial = target.with_suffix(target.suffix + ".part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            done = 0
            with partial.open("wb") as handle:
                while chunk := response.read(1 << 16):
                    handle.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(name, done, total)
    except (urllib.error.URLError, OSError, ValueError) as error:
        partial.unlink(missing_ok=True)
        raise FetchError(f"cannot download {url}: {error}") from error
    if expected is not None and digest.hexdigest() != expected:
        partial.unlink(missing_ok=True)
        raise FetchError(
            f"{url}: checksum mismatch (got sha256 {digest.hexdigest()}, expected {expected})"
        )
    partial.replace(target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 16):
            digest.update(chunk)
    return digest.hexdigest()
