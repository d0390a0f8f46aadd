"""Big and odd inputs: an error quotes at most ~200 characters of what it found; a manifest over
the size limit is refused before it is read (files and streams); and every reader answers a
document that is a list or a scalar, text that is not UTF-8, a binary file, or a value Python
refuses, with an InputError rather than a traceback."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.io.cluster_traces import alibaba
from gpufleet.io.errors import InputError, quoted, shorten
from gpufleet.io.fleet.cluster_spec import read_cluster_spec
from gpufleet.io.manifests import LIMIT_VARIABLE, MAX_MANIFEST_BYTES, load_manifests, read_limited
from gpufleet.io.readers import read_cluster, read_scenario, read_workload

YAML_READERS: dict[str, Callable[[Path], object]] = {
    "workload": read_workload,
    "cluster": read_cluster,
    "scenario": read_scenario,
    "cluster-spec": read_cluster_spec,
    "any-manifests": load_manifests,  # serve --rules, serve --scenario
}
CSV_READERS: dict[str, Callable[[Path], object]] = {
    "pod-csv": alibaba.read_pods,
    "node-csv": alibaba.read_nodes,
    "pod-csv-as-workload": read_workload,
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("short", "'short'", id="short"),
        pytest.param("x" * 200, repr("x" * 200), id="at-the-limit"),
        pytest.param("x" * 201, f"{'x' * 200!r}... (201 characters)", id="one-over"),
        pytest.param("y" * 10**6, f"{'y' * 200!r}... (1,000,000 characters)", id="a-megabyte"),
        pytest.param(list(range(1000)), None, id="not-a-string"),
    ],
)
def test_quoted(value: object, expected: str | None) -> None:
    text = quoted(value)
    if expected is not None:
        assert text == expected
    assert len(text) < 240


def test_input_errors_bound_every_part() -> None:
    error = InputError("f.yaml", "m" * 5000, "l" * 5000, "f" * 5000)
    assert len(str(error)) < 1800
    assert error.reason == shorten("m" * 5000, 1000)
    assert str(error).endswith("... (5,000 characters)")


def test_a_file_of_base64_is_not_quoted_back(write_file: Callable[[str, str], Path]) -> None:
    blob = "QUJD" * 500_000  # 2 MB on one line: one YAML scalar, not an object
    path = write_file("blob.yaml", blob + "\n")
    for reader in YAML_READERS.values():
        with pytest.raises(InputError) as raised:
            reader(path)
        message = str(raised.value)
        assert len(message) < 500, message
        assert "... (2,000,000 characters)" in message


def test_a_long_scalar_in_a_field_is_not_quoted_back(
    write_file: Callable[[str, str], Path],
) -> None:
    path = write_file(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
        "spec: {containers: [{name: c, resources: {limits: {cpu: '" + "9" * 100_000 + "x'}}}]}\n",
    )
    with pytest.raises(InputError) as raised:
        read_workload(path)
    assert len(str(raised.value)) < 500
    assert "not a Kubernetes quantity: '999" in str(raised.value)


@pytest.fixture
def one_kib(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv(LIMIT_VARIABLE, "1Ki")
    return 1024


@pytest.mark.parametrize("reader", YAML_READERS.values(), ids=YAML_READERS.keys())
def test_files_over_the_limit_are_refused_before_reading(
    write_file: Callable[[str, str], Path], one_kib: int, reader: Callable[[Path], object]
) -> None:
    path = write_file("big.yaml", "# " + "x" * 2045 + "\n")  # 2 KiB
    with pytest.raises(InputError) as raised:
        reader(path)
    assert str(raised.value) == (
        f"{path}: the input is 2 KiB; manifests above 1 KiB are refused before they are read "
        f"(set {LIMIT_VARIABLE}, e.g. to 256Mi, to allow more)"
    )


def test_files_at_the_limit_are_read(write_file: Callable[[str, str], Path], one_kib: int) -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n"
    path = write_file("pod.yaml", pod + "#" * (one_kib - len(pod) - 1) + "\n")
    assert path.stat().st_size == one_kib
    assert [t.pod.name for t in read_workload(path)] == ["p"]


class CountingStream(io.RawIOBase):
    """An endless stream (stdin, a pipe) that counts what is read of it."""

    def __init__(self) -> None:
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        size = len(buffer)
        buffer[:size] = b"x" * size
        self.given += size
        return size


def test_streams_are_read_up_to_the_limit_and_one_byte(one_kib: int) -> None:
    stream = CountingStream()
    with pytest.raises(InputError) as raised:
        read_limited(io.BufferedReader(stream, buffer_size=64), "stdin")
    assert str(raised.value).startswith(
        "stdin: the input has more than 1 KiB; manifests above 1 KiB are refused"
    )
    assert stream.given <= one_kib + 64


def test_a_bad_limit_is_an_input_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LIMIT_VARIABLE, "lots")
    path = tmp_path / "x.yaml"
    path.write_text("kind: Pod\n")
    with pytest.raises(InputError, match=f"{LIMIT_VARIABLE}: expected a size such as 256Mi"):
        read_workload(path)


def test_the_default_limit_on_a_sparse_file_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + (6 << 20))  # 70 MiB that take no disk
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as raised:
            read_workload(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(raised.value) == (
        f"{path}: the input is 70 MiB; manifests above 64 MiB are refused before they are read "
        f"(set {LIMIT_VARIABLE}, e.g. to 256Mi, to allow more)"
    )
    assert peak < 1 << 20  # not read: a read would hold 64 MiB


BAD_CONTENT = {
    "list-document": (b"- a\n- b\n", "expected a Kubernetes object (a mapping with apiVersion"),
    "scalar-document": (b"just words\n", "got 'just words'"),
    "not-utf8": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n",
        "line 3: not UTF-8 text: byte 0xe9 at offset 45 cannot be decoded",
    ),
    "binary": (bytes(range(256)) * 4, "not UTF-8 text: byte 0x80 at offset 128"),
    "binary-that-is-utf8": (b"\x00\x01\x02PK\x03\x04", "not valid YAML: unacceptable character"),
    "integer-of-5000-digits": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {priority: " + b"9" * 5000 + b"}\n",
        "not valid YAML: a value cannot be read (Exceeds the limit (4300 digits)",
    ),
    "impossible-date": (
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: 2024-13-01}\n",
        "month must be",
    ),
}


@pytest.mark.parametrize("reader", YAML_READERS.values(), ids=YAML_READERS.keys())
@pytest.mark.parametrize(("content", "message"), BAD_CONTENT.values(), ids=BAD_CONTENT.keys())
def test_odd_content_is_an_input_error(
    tmp_path: Path, reader: Callable[[Path], object], content: bytes, message: str
) -> None:
    path = tmp_path / "input.yaml"
    path.write_bytes(content)
    with pytest.raises(InputError) as raised:
        reader(path)
    assert message in str(raised.value)
    assert str(raised.value).startswith(f"{path}:")
    assert len(str(raised.value)) < 500


HEADER = {"pod-csv": "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"}
HEADER["node-csv"] = "sn,cpu_milli,memory_mib,gpu,model\n"
HEADER["pod-csv-as-workload"] = HEADER["pod-csv"]
BAD_CSV = {
    "not-utf8": (b"p\xe9,1,1,0,0\n", "not UTF-8 text"),
    "nul-byte": (b"p\x00,1,1,0,0\n", ":2: "),
    "field-over-csvs-limit": (b'"' + b"y" * 200_000 + b'",1,1,0,0\n', "2: not a CSV line: field"),
    "binary": (bytes(range(256)) * 4, "not"),
}


@pytest.mark.parametrize("reader", CSV_READERS.keys())
@pytest.mark.parametrize(("rows", "message"), BAD_CSV.values(), ids=BAD_CSV.keys())
def test_odd_csv_is_an_input_error(tmp_path: Path, reader: str, rows: bytes, message: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(HEADER[reader].encode() + rows)
    with pytest.raises(InputError) as raised:
        CSV_READERS[reader](path)
    assert message in str(raised.value)
    assert len(str(raised.value)) < 500
