"""Health from the fake NVML: fatal and ignored XIDs, ECC, lost devices, recovery, overrides."""

from __future__ import annotations

import pytest

from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.health import APPLICATION_XIDS, XidPolicy
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.model.telemetry import HealthEvent
from tests.devices.conftest import MakeNvml, SetClock

NODE = "node: n1\ndevices: [{product: NVIDIA H100 80GB HBM3, count: 4}]"


def source_of(nvml: FakeNvml, policy: XidPolicy | None = None) -> NvmlDeviceSource:
    return NvmlDeviceSource(nvml, xid_policy=policy)


@pytest.mark.parametrize(
    ("xid", "fatal"),
    [(79, True), (48, True), (94, True), (95, True), (119, True), (74, True), (63, True)]
    + [(xid, False) for xid in sorted(APPLICATION_XIDS)],
    ids=lambda v: str(v),
)
def test_fatal_and_application_xids(make_nvml: MakeNvml, xid: int, fatal: bool) -> None:
    nvml = make_nvml(NODE)
    source = source_of(nvml)
    nvml.inject_xid(2, xid)
    events = source.wait_health(0)
    if fatal:
        assert events == [HealthEvent(2, nvml.gpus[2].uuid, False, xid, events[0].reason)]
        assert events[0].reason.startswith(f"XID {xid}: ")
        assert source.inventory().unhealthy == (2,)
    else:
        assert events == []
        assert source.inventory().unhealthy == ()
    assert [s.xid for s in source.samples()] == [0, 0, xid, 0]


def test_xid_79_is_named_and_recovery_brings_the_device_back(make_nvml: MakeNvml) -> None:
    nvml = make_nvml(NODE)
    source = source_of(nvml)
    nvml.inject_xid(1, 79)
    (event,) = source.wait_health(0)
    assert event.reason == "XID 79: GPU has fallen off the bus"
    assert source.inventory().devices[1].reason == "XID 79: GPU has fallen off the bus"
    nvml.recover(1)
    assert source.wait_health(0) == [HealthEvent(1, nvml.gpus[1].uuid, True, 0, "recovered")]
    assert source.inventory().unhealthy == ()


def test_double_bit_ecc(make_nvml: MakeNvml) -> None:
    nvml = make_nvml(NODE)
    source = source_of(nvml)
    nvml.inject_double_bit_ecc(3)
    (event,) = source.wait_health(0)
    assert (event.gpu, event.healthy, event.xid) == (3, False, 0)
    assert "double-bit ECC" in event.reason
    handle = nvml.nvmlDeviceGetHandleByIndex(3)
    assert nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0) == 1
    nvml.recover(3)
    assert [e.healthy for e in source.wait_health(0)] == [True]
    assert nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0) == 0


def test_a_lost_device_and_its_return(make_nvml: MakeNvml) -> None:
    nvml = make_nvml(NODE)
    source = source_of(nvml)
    nvml.lose(0)
    samples = source.samples()
    assert 0 not in {s.gpu for s in samples}
    (event,) = source.wait_health(0)
    assert (event.gpu, event.healthy) == (0, False)
    assert "GPU is lost" in event.reason
    assert source.wait_health(0) == []  # reported once
    nvml.recover(0)
    assert [(e.gpu, e.healthy) for e in source.wait_health(0)] == [(0, True)]
    assert {s.gpu for s in source.samples()} == {0, 1, 2, 3}


def test_a_device_lost_at_start_is_rediscovered_when_back(make_nvml: MakeNvml) -> None:
    nvml = make_nvml(NODE)
    nvml.lose(2)
    source = source_of(nvml)
    assert source.inventory().devices[2].memory_mib == 0
    nvml.recover(2)
    assert [(e.gpu, e.healthy) for e in source.wait_health(0)] == [(2, True)]
    device = source.inventory().devices[2]
    assert (device.healthy, device.memory_mib) == (True, 81559)


def test_scheduled_faults_follow_the_clock(make_nvml: MakeNvml, clock: SetClock) -> None:
    nvml = make_nvml(
        NODE + "\nfaults: [{at: 45s, gpu: 2, xid: 79}, {at: 1m, gpu: 3, lost: true},"
        " {at: 90s, gpu: 2, recover: true}]"
    )
    source = source_of(nvml)
    clock.now = 44.9
    assert source.wait_health(0) == []
    clock.now = 45.0
    assert [(e.gpu, e.xid) for e in source.wait_health(0)] == [(2, 79)]
    clock.now = 60.0
    assert [(e.gpu, e.healthy) for e in source.wait_health(0)] == [(3, False)]
    clock.now = 90.0
    assert [(e.gpu, e.healthy) for e in source.wait_health(0)] == [(2, True)]
    assert source.inventory().unhealthy == (3,)


@pytest.mark.parametrize(
    ("environ", "extra", "xid", "fatal"),
    [
        ({}, [79], 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "79,48"}, [], 48, False),
        ({"DP_DISABLE_HEALTHCHECKS": "79,48"}, [], 94, True),
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, [], 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "xids", "DP_ENABLE_HEALTHCHECKS": "79"}, [], 79, True),
        ({"DP_DISABLE_HEALTHCHECKS": "xids", "DP_ENABLE_HEALTHCHECKS": "79"}, [], 48, False),
        ({"DP_ENABLE_HEALTHCHECKS": "13"}, [], 13, True),
        ({"DP_ENABLE_HEALTHCHECKS": "all"}, [], 31, True),
        ({"DP_DISABLE_HEALTHCHECKS": "bogus, 94"}, [], 94, False),
    ],
    ids=[
        "extra-ignored",
        "env-ignored",
        "env-others-count",
        "all-off",
        "all-off-but-one",
        "all-off-but-one-other",
        "application-enabled",
        "enable-all",
        "malformed-skipped",
    ],
)
def test_overrides_like_the_device_plugin(
    make_nvml: MakeNvml, environ: dict[str, str], extra: list[int], xid: int, fatal: bool
) -> None:
    policy = XidPolicy.from_env(environ, extra_ignored=extra)
    assert policy.is_fatal(xid) is fatal
    nvml = make_nvml(NODE)
    source = source_of(nvml, policy)
    nvml.inject_xid(0, xid)
    assert [e.xid for e in source.wait_health(0)] == ([xid] if fatal else [])


def test_close_shuts_nvml_down(make_nvml: MakeNvml) -> None:
    nvml = make_nvml(NODE)
    source = source_of(nvml)
    source.close()
    source.close()
    with pytest.raises(Exception, match="Uninitialized"):
        nvml.nvmlDeviceGetCount()
