"""Fetching traces (against a loopback HTTP server), variants and shape tables."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.cluster_traces.alibaba import read_pods
from gpufleet.io.cluster_traces.datasets import (
    ALIBABA_2023,
    DATASETS,
    PODS_FILE,
    TRACE_DIR_ENV,
    Dataset,
    FetchError,
    fetch_dataset,
    find_alibaba_trace,
    trace_search_path,
)
from gpufleet.io.cluster_traces.shapes import read_shape_table

runner = CliRunner()


def dataset(files: dict[str, bytes], base_url: str, with_sums: bool = True) -> Dataset:
    return Dataset(
        "test",
        base_url,
        tuple(files),
        (),
        {k: hashlib.sha256(v).hexdigest() for k, v in files.items()} if with_sums else {},
        "test data",
    )


def serve(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def test_fetch_downloads_verifies_and_skips_what_it_has(
    http_server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, root, requests = http_server
    files = {"csv/a.csv": b"x,y\n1,2\n", "csv/b.csv": b"z\n" * 1000}
    serve(root, files)
    target = tmp_path / "out"
    seen: list[tuple[str, int]] = []
    written = fetch_dataset(
        dataset(files, url), target, progress=lambda n, d, t: seen.append((n, d))
    )
    assert [p.read_bytes() for p in written] == list(files.values())
    assert seen[-1] == ("csv/b.csv", 2000)
    fetch_dataset(dataset(files, url), target)
    assert len(requests) == 2  # verified copies are not fetched again


def test_checksum_mismatch_leaves_nothing_behind(
    http_server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, root, _ = http_server
    serve(root, {"csv/a.csv": b"tampered\n"})
    spec = dataset({"csv/a.csv": b"original\n"}, url)
    with pytest.raises(FetchError, match="checksum mismatch"):
        fetch_dataset(spec, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.csv*"))


def test_missing_file_names_the_url(
    http_server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, _, _ = http_server
    with pytest.raises(FetchError, match=r"cannot download http://127\.0\.0\.1:\d+/csv/x\.csv"):
        fetch_dataset(dataset({"csv/x.csv": b""}, url, with_sums=False), tmp_path / "out")


def test_cli_fetch_alibaba_from_a_mirror(
    http_server: tuple[str, Path, list[str]], tmp_path: Path, alibaba_trace: Path
) -> None:
    url, root, _ = http_server
    shutil.copytree(alibaba_trace / "csv", root / "csv")
    result = runner.invoke(
        app, ["traces", "fetch", "alibaba-2023", "--dir", str(tmp_path / "t"), "--base-url", url]
    )
    assert result.exit_code == 0, result.output
    assert "3 files in" in result.output
    assert len(read_pods(tmp_path / "t" / "csv" / "openb_pod_list_default.csv")) == 8152


@pytest.mark.parametrize(
    ("served", "error"),
    [
        pytest.param({"csv/a.csv": b"a\n"}, "cannot download", id="a-file-missing"),
        pytest.param(
            {"csv/a.csv": b"a\n", "csv/b.csv": b"tampered\n"}, "checksum mismatch", id="tampered"
        ),
    ],
)
def test_a_failed_fetch_removes_every_folder_it_made(
    http_server: tuple[str, Path, list[str]], tmp_path: Path, served: dict[str, bytes], error: str
) -> None:
    url, root, _ = http_server
    serve(root, served)
    spec = dataset({"csv/a.csv": b"a\n", "csv/b.csv": b"b\n"}, url)
    target = tmp_path / "work" / "traces" / "alibaba-gpu-2023"
    with pytest.raises(FetchError, match=error) as failed:
        fetch_dataset(spec, target)
    assert f"the partial download was removed ({target} is as it was)" in str(failed.value)
    assert not (tmp_path / "work").exists(), "a failed fetch left folders behind"


def test_a_failed_fetch_keeps_what_was_there_and_adds_nothing(
    http_server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, root, _ = http_server
    files = {"csv/a.csv": b"a\n", "csv/b.csv": b"b\n"}
    serve(root, {"csv/a.csv": files["csv/a.csv"]})
    target = tmp_path / "trace"
    (target / "csv").mkdir(parents=True)
    (target / "csv" / "a.csv").write_bytes(files["csv/a.csv"])
    with pytest.raises(FetchError):
        fetch_dataset(dataset(files, url), target)
    assert sorted(p.name for p in target.rglob("*")) == ["a.csv", "csv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served", "trace"]  # no staging


def test_a_fetch_appears_whole_in_one_move(
    http_server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, root, _ = http_server
    files = {"csv/a.csv": b"a\n", "csv/b.csv": b"b\n" * 10}
    serve(root, files)
    target = tmp_path / "traces" / "t"
    seen: list[bool] = []
    fetch_dataset(dataset(files, url), target, progress=lambda *_: seen.append(target.exists()))
    assert seen
    assert not any(seen), "the target existed before every file was complete"
    assert [(target / n).read_bytes() for n in files] == list(files.values())
    assert [p.name for p in (tmp_path / "traces").iterdir()] == ["t"]


def make_trace(directory: Path) -> Path:
    (directory / "csv").mkdir(parents=True)
    (directory / "csv" / PODS_FILE).write_text("name\n")
    return directory


@pytest.mark.parametrize(
    ("present", "env", "found"),
    [
        pytest.param(["fetched", "shared", "user"], {}, "fetched", id="fetched-first"),
        pytest.param(["shared", "user"], {}, "shared", id="then-shared-in-a-parent"),
        pytest.param(["user"], {}, "user", id="then-the-user-data-dir"),
        pytest.param([], {}, None, id="nowhere"),
        pytest.param(["fetched", "env"], {"env": True}, "env", id="the-variable-wins"),
        pytest.param(["fetched"], {"env": True}, None, id="the-variable-is-the-only-place"),
    ],
)
def test_one_search_order_for_every_reader(
    tmp_path: Path, present: list[str], env: dict[str, bool], found: str | None
) -> None:
    work = tmp_path / "repo" / "work"
    work.mkdir(parents=True)
    places = {
        "fetched": work / "traces" / "alibaba-gpu-2023",
        "shared": tmp_path / "shared" / "traces" / "alibaba-gpu-2023",
        "user": tmp_path / "data" / "gpufleet" / "traces" / "alibaba-gpu-2023",
        "env": tmp_path / "elsewhere",
    }
    environ = {"XDG_DATA_HOME": str(tmp_path / "data")}
    if env:
        environ[TRACE_DIR_ENV] = str(places["env"])
    for name in present:
        make_trace(places[name])
    order = trace_search_path(work, environ)
    if not env:
        assert order[0] == places["fetched"]
        assert order[-1] == places["user"]
        assert places["shared"] in order
    assert find_alibaba_trace(work, environ) == (places[found] if found else None)


@pytest.fixture
def fake_alibaba(
    http_server: tuple[str, Path, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """A small stand-in for the Alibaba trace on a loopback server; the working directory and
    the user's data directory are fresh folders. Returns the server's URL."""
    url, root, _ = http_server
    files = {name: f"{name}\n".encode() for name in ALIBABA_2023.files}
    serve(root, files)
    fake = dataset(files, url)
    monkeypatch.setitem(DATASETS, ALIBABA_2023.name, Dataset(
        ALIBABA_2023.name, url, fake.files, (), fake.sha256, "a stand-in"
    ))  # fmt: skip
    monkeypatch.delenv(TRACE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return url


def test_cli_fetch_writes_where_locate_and_the_demo_look(fake_alibaba: str) -> None:
    fetched = runner.invoke(app, ["traces", "fetch", "alibaba-2023"])
    assert fetched.exit_code == 0, fetched.output
    assert "3 files in traces/alibaba-gpu-2023" in fetched.stdout
    assert "GPUFLEET_ALIBABA_TRACE_DIR" not in fetched.stdout  # nothing to set
    located = runner.invoke(app, ["traces", "locate"])
    assert located.exit_code == 0, located.output
    assert located.stdout.strip() == str(Path.cwd().resolve() / "traces" / "alibaba-gpu-2023")
    assert find_alibaba_trace() == Path.cwd().resolve() / "traces" / "alibaba-gpu-2023"


def test_cli_fetch_that_fails_says_so_and_leaves_no_folders(
    fake_alibaba: str, http_server: tuple[str, Path, list[str]]
) -> None:
    _, root, _ = http_server
    (root / "csv" / PODS_FILE).unlink()
    result = runner.invoke(app, ["traces", "fetch", "alibaba-2023"])
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: cannot download {fake_alibaba}/csv/{PODS_FILE}")
    assert line.endswith("the partial download was removed (traces/alibaba-gpu-2023 is as it was)")
    assert list(Path.cwd().iterdir()) == []


def test_cli_locate_without_the_trace_lists_where_it_looked(fake_alibaba: str) -> None:
    result = runner.invoke(app, ["traces", "locate"])
    assert result.exit_code == 1
    assert str(Path.cwd().resolve() / "traces" / "alibaba-gpu-2023") in result.stderr
    assert "gpufleet traces fetch alibaba-2023" in result.stderr


def test_cli_fetch_unknown_dataset_fails_clearly() -> None:
    result = runner.invoke(app, ["traces", "fetch", "helios"])
    assert result.exit_code == 2
    assert "unknown dataset 'helios'; known: alibaba-2023" in result.output


def test_cli_variant_and_shapes(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    out = tmp_path / "share80.csv"
    result = runner.invoke(
        app,
        [
            "traces",
            "variant",
            "--pods",
            str(pods),
            "--kind",
            "gpushare",
            "--percent",
            "80",
            "--out",
            str(out),
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    variant = read_pods(out)
    gpu_pods = [t for t in variant if t.pod.gpu.count]
    assert sum(t.pod.gpu.is_shared for t in gpu_pods) == round(0.8 * len(gpu_pods))
    spec = tmp_path / "spec.csv"
    result = runner.invoke(
        app,
        [
            "traces",
            "variant",
            "--pods",
            str(pods),
            "--kind",
            "gpuspec",
            "--percent",
            "50",
            "--out",
            str(spec),
            "--nodes",
            str(nodes),
        ],
    )
    assert result.exit_code == 0, result.output
    assert any(t.pod.gpu_models for t in read_pods(spec))
    result = runner.invoke(
        app, ["traces", "shapes", "--pods", str(pods), "--out-dir", str(tmp_path / "shapes")]
    )
    assert result.exit_code == 0, result.output
    table = read_shape_table(
        tmp_path / "shapes" / "alibaba2023_pod_shapes.csv",
        tmp_path / "shapes" / "alibaba2023_runtimes.csv",
    )
    assert table.total == 40
    assert set(table.runtime_quantiles) == {"cpu-only", "gpu-share", "one-gpu", "multi-gpu"}


def test_cli_gpuspec_variant_needs_nodes(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    _, pods = small_trace
    result = runner.invoke(
        app,
        [
            "traces",
            "variant",
            "--pods",
            str(pods),
            "--kind",
            "gpuspec",
            "--percent",
            "50",
            "--out",
            str(tmp_path / "x.csv"),
        ],
    )
    assert result.exit_code == 2
    assert "--nodes is needed" in result.output
