"""Public GPU-cluster traces: where they live on this machine, and fetching them.

The trace files cannot be shipped with gpufleet. :func:`fetch_dataset` downloads them on a
machine with internet, atomically: into a temporary folder next to the target, moved into place
only once every file is complete and, where we know its checksum, verified; a failed fetch
removes what it made. Everything that reads the Alibaba trace (``traces locate``, ``make demo``,
``simulate``, the benchmarks, the tests' fixture) finds it with :func:`find_alibaba_trace`,
which looks in one order (:func:`trace_search_path`): the directory named by
``GPUFLEET_ALIBABA_TRACE_DIR`` (only there, when it is set); else ``traces/alibaba-gpu-2023``
under the working directory (where ``traces fetch`` writes by default);
``shared/traces/alibaba-gpu-2023`` next to the working directory or one of its parents (where
the project's CI keeps it); the user's data directory (``$XDG_DATA_HOME/gpufleet/traces/...``,
by default ``~/.local/share/gpufleet/traces/alibaba-gpu-2023``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

TRACE_DIR_ENV = "GPUFLEET_ALIBABA_TRACE_DIR"
BASE_URL_ENV = "GPUFLEET_TRACE_BASE_URL"
NODES_FILE = "openb_node_list_gpu_node.csv"
PODS_FILE = "openb_pod_list_default.csv"
#: The trace's directory name, under each place it is looked for.
ALIBABA_DIR_NAME = "alibaba-gpu-2023"
#: Where ``gpufleet traces fetch`` writes by default (relative to the working directory).
DEFAULT_FETCH_DIR = Path("traces") / ALIBABA_DIR_NAME


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


def user_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """gpufleet's folder in the user's data directory (XDG): ``~/.local/share/gpufleet``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpufleet"


def trace_search_path(
    start: Path | None = None, environ: Mapping[str, str] | None = None
) -> list[Path]:
    """Where the Alibaba 2023 trace is looked for, in order (see the module docstring);
    ``start`` stands for the working directory."""
    env = os.environ if environ is None else environ
    override = env.get(TRACE_DIR_ENV)
    if override:
        return [Path(override)]
    here = (start or Path.cwd()).resolve()
    shared = [base / "shared" / "traces" / ALIBABA_DIR_NAME for base in (here, *here.parents)]
    return [here / DEFAULT_FETCH_DIR, *shared, user_data_dir(env) / "traces" / ALIBABA_DIR_NAME]


def holds_alibaba_trace(directory: Path) -> bool:
    return (directory / "csv" / PODS_FILE).is_file()


def find_alibaba_trace(
    start: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The first directory of :func:`trace_search_path` holding the trace (``csv/``), or None."""
    return next((p for p in trace_search_path(start, environ) if holds_alibaba_trace(p)), None)


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
    """Download the dataset's files into ``directory`` (keeping their ``csv/`` layout); files
    already there and verified are kept. Atomic: the files are downloaded into a temporary
    folder next to ``directory`` and moved into place only when all are complete; on failure
    everything this call made is removed and :class:`FetchError` says so."""
    base = (base_url or os.environ.get(BASE_URL_ENV) or dataset.base_url).rstrip("/")
    names = dataset.files + (dataset.variants if include_variants else ())
    wanted = [n for n in names if not _verified(directory / n, dataset.sha256.get(n))]
    made = _missing_folders(directory.parent)
    staging: Path | None = None
    try:
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        except OSError as error:
            raise FetchError(f"cannot write to {directory.parent}: {error.strerror}") from None
        for name in wanted:
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            _download(f"{base}/{name}", target, name, dataset.sha256.get(name), progress, timeout)
        if not directory.exists():
            staging.replace(directory)  # one rename: the directory appears whole
        else:
            for name in wanted:
                (directory / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / name).replace(directory / name)
    except FetchError as error:
        _remove(staging, made)
        raise FetchError(
            f"{error}; the partial download was removed ({directory} is as it was)"
        ) from None
    except BaseException:
        _remove(staging, made)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return [directory / name for name in names]


def _verified(path: Path, expected: str | None) -> bool:
    return path.is_file() and expected is not None and _sha256(path) == expected


def _missing_folders(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    missing: list[Path] = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def _remove(staging: Path | None, made: list[Path]) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
    for folder in made:  # deepest first; only if nothing else was put there meanwhile
        with contextlib.suppress(OSError):
            folder.rmdir()


def _download(
    url: str,
    target: Path,
    name: str,
    expected: str | None,
    progress: FetchProgress | None,
    timeout: float,
) -> None:
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            done = 0
            with target.open("wb") as handle:
                while chunk := response.read(1 << 16):
                    handle.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(name, done, total)
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise FetchError(f"cannot download {url}: {error}") from error
    if expected is not None and digest.hexdigest() != expected:
        raise FetchError(
            f"{url}: checksum mismatch (got sha256 {digest.hexdigest()}, expected {expected})"
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 16):
            digest.update(chunk)
    return digest.hexdigest()
