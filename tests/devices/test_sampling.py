"""Samples in dcgm-exporter's units, following the fake's timeline; concurrent readers."""

from __future__ import annotations

import threading

from gpufleet.devices.fake import make_fake_nvml
from gpufleet.devices.nvml_source import NvmlDeviceSource
from tests.devices.conftest import EXAMPLE, MakeNvml, SetClock


def test_samples_follow_the_timeline_step_wise(clock: SetClock) -> None:
    source = NvmlDeviceSource(make_fake_nvml(EXAMPLE, clock=clock))
    clock.now = 5.0
    first = source.samples()[0]
    assert (first.gpu_util, first.fb_used_mib, first.power_w, first.sm_clock_mhz) == (
        0.0,
        0,
        72.0,
        345,
    )
    clock.now = 30.0
    busy = source.samples()[0]
    assert (busy.gpu_util, busy.mem_copy_util) == (97.0, 42.0)
    assert busy.fb_used_mib == 74752
    assert busy.fb_free_mib == 81559 - 74752
    assert (busy.temperature_c, busy.power_w) == (67.0, 640.0)
    assert busy.sm_clock_mhz == 1980  # carried forward from the 10 s point
    assert busy.model == "NVIDIA H100 80GB HBM3"
    assert busy.uuid == source.inventory().devices[0].uuid


def test_every_device_and_mig_instance_is_sampled(clock: SetClock) -> None:
    source = NvmlDeviceSource(make_fake_nvml(EXAMPLE, clock=clock))
    samples = source.samples()
    whole = [s for s in samples if not s.mig_profile]
    mig = [s for s in samples if s.mig_profile]
    assert [s.gpu for s in whole] == list(range(8))
    assert {s.gpu for s in mig} == {7}
    inventory = source.inventory().devices[7].mig
    assert sorted((s.uuid, s.mig_profile, s.gpu_instance_id) for s in mig) == sorted(
        (m.uuid, m.profile, m.gpu_instance_id) for m in inventory
    )
    by_profile = {s.gpu_instance_id: s for s in mig}
    three_g = next(m for m in inventory if m.profile == "3g.40gb")
    assert by_profile[three_g.gpu_instance_id].fb_used_mib == 30000
    assert whole[7].fb_used_mib == 30000 + 12000 + 4096
    assert all(s.power_w == 0 for s in mig)
    assert all(s.temperature_c == whole[7].temperature_c for s in mig)


def test_the_example_xid_reaches_samples_and_health(clock: SetClock) -> None:
    source = NvmlDeviceSource(make_fake_nvml(EXAMPLE, clock=clock))
    assert source.wait_health(0) == []
    clock.now = 45.0
    (event,) = source.wait_health(0)
    assert (event.gpu, event.xid, event.healthy) == (2, 79, False)
    assert [s.xid for s in source.samples() if not s.mig_profile] == [0, 0, 79, 0, 0, 0, 0, 0]


def test_scrape_and_health_threads_at_once(make_nvml: MakeNvml) -> None:
    nvml = make_nvml("devices: [{product: NVIDIA H100 80GB HBM3, count: 8}]")
    source = NvmlDeviceSource(nvml)
    failures: list[BaseException] = []
    seen: list[int] = []

    def scrape() -> None:
        try:
            for _ in range(200):
                assert len(source.samples()) == 8
                assert len(source.inventory().devices) == 8
        except BaseException as error:  # handed to the test thread
            failures.append(error)

    def watch() -> None:
        try:
            for _ in range(200):
                seen.extend(e.gpu for e in source.wait_health(0))
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=scrape), threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    for gpu in range(8):
        nvml.inject_xid(gpu, 79)
    for thread in threads:
        thread.join(timeout=30)
    assert not failures
    seen.extend(e.gpu for e in source.wait_health(0))
    assert sorted(seen) == list(range(8))
    assert source.inventory().unhealthy == tuple(range(8))
