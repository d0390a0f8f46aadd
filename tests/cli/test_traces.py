"""Fetching traces (against a loopback HTTP server), variants and shape tables."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.io.alibaba import read_pods
from gpufleet.io.shapes import read_shape_table
from gpufleet.io.traces import Dataset, FetchError, fetch_dataset

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
