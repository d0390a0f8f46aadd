"""The fake GPU description: the shipped example loads, bad input names file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.devices.fake import make_fake_nvml
from gpufleet.devices.fake_spec import (
    FakeSpecError,
    load_fake_spec,
    parse_duration,
    parse_fake_spec,
)
from tests.devices.conftest import EXAMPLE


def test_the_shipped_example_loads() -> None:
    spec = load_fake_spec(EXAMPLE)
    nvml = make_fake_nvml(EXAMPLE, clock=lambda: 0.0)
    assert sum(d.count for d in spec.devices) == 8 == nvml.nvmlDeviceGetCount()
    assert spec.nvswitch
    assert [f.xid for f in spec.faults] == [79]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("1.5m", 90.0), ("500ms", 0.5), ("2h", 7200.0), (12, 12.0)],
    ids=["seconds", "minutes", "millis", "hours", "number"],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("body", "where", "what"),
    [
        (
            "devices: [{product: NVIDIA H100 80GB HBM3, colour: red}]",
            "devices[0].colour",
            "unknown field (expected one of: product, count,",
        ),
        ("devices: [{product: Mystery GPU}]", "devices[0]", "unknown product"),
        (
            "devices: [{product: NVIDIA H100 80GB HBM3, mig: {instances: [{profile: 3x.40}]}}]",
            "devices[0].mig.instances[0].profile",
            "not a MIG profile",
        ),
        (
            "devices: [{product: NVIDIA H100 80GB HBM3, mig: {instances: [{profile: 3g.35gb}]}}]",
            "devices[0].mig.instances[0].profile",
            "does not fit",
        ),
        (
            "devices: [{product: Tesla T4, mig: {instances: [{profile: 1g.5gb}]}}]",
            "devices[0].mig",
            "does not support MIG",
        ),
        (
            "devices: [{product: NVIDIA H100 80GB HBM3, mig: {instances: "
            "[{profile: 3g.40gb, placement_start: 0}, {profile: 2g.20gb, placement_start: 2}]}}]",
            "devices[0].mig.instances[1].placement_start",
            "overlaps",
        ),
        (
            "devices: [{product: Tesla T4, nvlink_peers: [3]}]",
            "devices[0].nvlink_peers[0]",
            "no GPU 3",
        ),
        (
            "devices: [{product: Tesla T4}]\nfaults: [{at: 5s, gpu: 4, xid: 79}]",
            "faults[0].gpu",
            "no GPU 4",
        ),
        (
            "devices: [{product: Tesla T4}]\nfaults: [{at: 5s, gpu: 0, xid: 79, lost: true}]",
            "faults[0]",
            "exactly one of",
        ),
        (
            "devices: [{product: Tesla T4}]\nfaults: [{at: soon, gpu: 0, xid: 79}]",
            "faults[0].at",
            "duration",
        ),
        (
            "devices: [{product: Tesla T4, utilization: [{at: 20s, gpu_util: 5}, {at: 10s}]}]",
            "devices[0]",
            "time order",
        ),
        (
            "devices: [{product: Tesla T4, utilization: {gpu_util: 130}}]",
            "devices[0].utilization[0].gpu_util",
            "less than or equal",
        ),
    ],
    ids=[
        "unknown-field",
        "unknown-product",
        "profile-form",
        "profile-size",
        "no-mig",
        "overlap",
        "peer",
        "fault-gpu",
        "fault-kind",
        "fault-time",
        "timeline-order",
        "utilisation-range",
    ],
)
def test_errors_name_the_file_and_field(tmp_path: Path, body: str, where: str, what: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(body)
    with pytest.raises(FakeSpecError) as error:
        make_fake_nvml(path)
    message = str(error.value)
    assert f"{path}: {where}" in message
    assert what in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FakeSpecError, match=r"nope\.yaml: cannot read"):
        load_fake_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("nodee: gpu-1", "nodee: unknown field; did you mean 'node'?"),
        (
            "devices: [{product: Tesla T4, cont: 2}]",
            "devices[0].cont: unknown field; did you mean 'count'?",
        ),
        (
            "devices: [{product: NVIDIA A100-SXM4-80GB, mig: {instances: [{profil: 1g.10gb}]}}]",
            "devices[0].mig.instances[0].profil: unknown field; did you mean 'profile'?",
        ),
        (
            "devices: [{product: Tesla T4, utilization: {gpu_utl: 5}}]",
            "devices[0].utilization[0].gpu_utl: unknown field; did you mean 'gpu_util'?",
        ),
        (
            "devices: [{product: Tesla T4}]\nfaults: [{at: 1s, gpu: 0, recovr: true}]",
            "faults[0].recovr: unknown field; did you mean 'recover'?",
        ),
        ("devices: [{count: 2}]", "devices[0].product: required"),
    ],
    ids=["top", "device", "mig-instance", "usage-point", "fault", "missing"],
)
def test_errors_read_as_every_reader_of_gpufleet_says_them(
    tmp_path: Path, body: str, error: str
) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(body)
    with pytest.raises(FakeSpecError) as raised:
        load_fake_spec(path)
    assert f"{path}: {error}" in str(raised.value).splitlines()


@pytest.mark.parametrize("body", ["", "# nothing yet\n"], ids=["empty", "comments"])
def test_an_empty_file_is_refused(tmp_path: Path, body: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(body)
    with pytest.raises(FakeSpecError, match=r"expected a fake GPU description .*found no objects"):
        load_fake_spec(path)


def test_a_node_without_gpus_says_devices_empty() -> None:
    assert parse_fake_spec(yaml.safe_load("devices: []"), "gpus.yaml").devices == ()
