"""``serve --local`` observes this machine's GPUs (the fake NVML, its utilisation scheduled):
each sample names the pod holding the device, ``/metrics`` and the node map carry them, the
built-in alerts fire from them, an idle policy stops an idle run, and the series outlive a
restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.devices.discovery import discover
from gpufleet.devices.fake import FakeNvml
from gpufleet.devices.fake_spec import parse_fake_spec
from gpufleet.devices.nvml_source import NvmlDeviceSource
from gpufleet.devices.source import DeviceSource
from gpufleet.model.idle import IdleAction, IdlePolicy, IdleScope, IdleStep
from gpufleet.service.idle_actions import idle_candidates, reclaimer_for
from gpufleet.service.store import StoredEvent
from gpufleet.testing.local_service import TENANT, LocalHarness, MovableClock
from tests.service.local.test_local_plane import pod, report

#: GPU 0 busy, the other three idle (utilisation in percent, memory in MiB).
FOUR_GPUS = """
node: box
driver_version: "550.54.15"
devices:
  - product: NVIDIA H100 80GB HBM3
    utilization: {gpu_util: 95, fb_used_mib: 70000, temperature_c: 60}
  - product: NVIDIA H100 80GB HBM3
    count: 3
    utilization: {gpu_util: 2, fb_used_mib: 1024, temperature_c: 35}
"""
BUSY_GPU = 0

#: Judged after 10 minutes of running, on its last 5 minutes: told at once, stopped 20 minutes
#: later.
POLICY = IdlePolicy(
    name="notebooks",
    steps=(IdleStep(IdleAction.NOTIFY), IdleStep(IdleAction.STOP, after_s=1200.0)),
    scope=IdleScope(workload_kinds=frozenset({"Pod"})),
    threshold_pct=10.0,
    window_s=300.0,
    grace_s=600.0,
)


class FakeGpus:
    """Opens the four fake GPUs, their schedule read on the test's clock; keeps the latest
    fake NVML opened (to inject faults into)."""

    def __init__(self, clock: MovableClock) -> None:
        self.clock = clock
        self.nvml: FakeNvml | None = None

    def __call__(self) -> DeviceSource:
        spec = parse_fake_spec(yaml.safe_load(FOUR_GPUS), "gpus.yaml")
        self.nvml = FakeNvml(spec, lambda: self.clock.offset)
        self.nvml.nvmlInit()
        return NvmlDeviceSource(self.nvml)


@pytest.fixture
def observed(state_root: Path) -> Iterator[LocalHarness]:
    clock = MovableClock()
    devices = FakeGpus(clock)
    source = devices()
    inventory = source.inventory()
    source.close()
    made = LocalHarness.start(inventory, state_root, devices, clock)
    yield made
    made.shut_down()


def running(harness: LocalHarness, *names: str) -> None:
    """Submit a one-GPU pod for each name (each waits on a file that never comes), in order,
    and turn until they all run."""
    for name in names:
        body = harness.submit(pod(name, report(harness, "0", "never")))
        assert body["status"] == 201, body
    for name in names:
        harness.run_until(harness.state_is(name, "Running"))


def gpu_of(harness: LocalHarness, name: str) -> int:
    record = harness.plane.records[f"{TENANT}/Pod/{name}"]
    (pod_record,) = record.pods.values()
    assert pod_record.placement is not None
    (index,) = pod_record.placement.gpu_indices
    return index


def rounds(harness: LocalHarness, seconds: float, step: float = 60.0) -> None:
    """Move the clock ``step`` at a time, observing and turning after each move."""
    for _ in range(int(seconds // step)):
        assert harness.clock is not None
        harness.clock.advance(step)
        harness.plane.observing.round()
        harness.plane.turn()


def alerts(harness: LocalHarness, **params: str) -> list[dict[str, Any]]:
    response = harness.client("admin").get("/api/v1/alerts", params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["alerts"]
    return found


def idle_events(harness: LocalHarness, key: str) -> list[StoredEvent]:
    return [e for e in harness.store.events(key) if e.reason.startswith("IdleReclaim")]


def test_each_sample_names_the_pod_on_its_gpu_and_metrics_and_nodes_show_them(
    observed: LocalHarness,
) -> None:
    running(observed, "busy", "idle")
    telemetry = observed.plane.telemetry
    assert telemetry is not None
    (reading,) = telemetry.read()
    uuids = {d.index: d.uuid for d in observed.inventory.devices}
    assert reading.hostname == "box"
    assert sorted(s.gpu for s in reading.samples) == [0, 1, 2, 3]
    held = {gpu_of(observed, "busy"): "busy", gpu_of(observed, "idle"): "idle"}
    assert {(u.uuid, u.namespace, u.pod, u.container) for u in reading.users} == {
        (uuids[gpu], TENANT, name, "main") for gpu, name in held.items()
    }
    assert reading.allocated == {uuids[gpu]: 1.0 for gpu in held}
    busy = next(s for s in reading.samples if s.gpu == BUSY_GPU)
    assert (busy.gpu_util, busy.fb_used_mib) == (95.0, 70000)

    text = observed.client("admin").get("/metrics").text
    for gpu, name in held.items():
        line = next(
            line
            for line in text.splitlines()
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'UUID="{uuids[gpu]}"' in line
        )
        for label in (
            f'pod="{name}"',
            f'namespace="{TENANT}"',
            'container="main"',
            'Hostname="box"',
        ):
            assert label in line, line
    assert "gpufleet_gpu_allocated{" in text

    (node,) = observed.client("admin").get("/api/v1/nodes").json()
    by_index = {d["index"]: d for d in node["devices"]}
    assert by_index[BUSY_GPU]["utilization"] == pytest.approx(0.95)
    assert by_index[BUSY_GPU]["memory_used_mib"] == 70000
    assert {i for i, d in by_index.items() if d["utilization"] == pytest.approx(0.02)} == {1, 2, 3}


def test_an_idle_run_is_told_then_stopped_and_the_busy_one_is_left_alone(
    observed: LocalHarness,
) -> None:
    reclaimer = reclaimer_for(observed.plane, [POLICY])
    assert reclaimer is not None
    running(observed, "busy", "idle")
    assert gpu_of(observed, "busy") == BUSY_GPU, "the first pod took the first GPU"
    rounds(observed, 40 * 60)
    idle_key, busy_key = f"{TENANT}/Pod/idle", f"{TENANT}/Pod/busy"
    notify, stop = idle_events(observed, idle_key)
    assert (notify.reason, stop.reason) == ("IdleReclaimNotify", "IdleReclaimStop")
    assert stop.time - notify.time == pytest.approx(1200.0, abs=60)
    assert "mean GPU utilisation 2.0%" in stop.message, stop.message
    # Stopped as a cancel is (SIGTERM to its process), its GPU given back.
    observed.run_until(lambda: observed.machine.run_of(f"{TENANT}/idle") is None)
    assert observed.workload("idle")["state"] == "Cancelled"
    cancelled = [e.message for e in observed.store.events(idle_key) if e.reason == "Cancelled"]
    assert cancelled == ["by IdlePolicy notebooks (idle GPUs)"]
    assert idle_events(observed, busy_key) == []
    assert observed.workload("busy")["state"] == "Running"
    assert [d.action for d in reclaimer.decisions] == [IdleAction.NOTIFY, IdleAction.STOP]


def test_an_idle_run_fires_the_built_in_idle_alert(observed: LocalHarness) -> None:
    running(observed, "busy", "idle")
    assert gpu_of(observed, "busy") == BUSY_GPU, "the first pod took the first GPU"
    rounds(observed, 2 * 3600 + 5 * 60)
    firing = alerts(observed, state="firing")
    idle = [a for a in firing if a["rule"] == "workload-gpu-idle"]
    assert [(a["labels"]["pod"], a["workload"]) for a in idle] == [("idle", f"{TENANT}/Pod/idle")]
    assert idle[0]["value"] == pytest.approx(2.0, abs=0.01)  # as the store keeps it
    # Named by Prometheus' labels (``avg by (namespace, pod)``), not the store's tags.
    assert "queue" not in idle[0]["labels"]
    low = {a["labels"]["gpu"] for a in firing if a["rule"] == "gpu-utilisation-low"}
    assert low == {str(gpu_of(observed, "idle"))}, (
        "the idle run's GPU: not the busy one, nor the two nobody holds (issue 29 item 7)"
    )


def test_the_series_and_usage_survive_a_restart(observed: LocalHarness) -> None:
    running(observed, "busy")
    rounds(observed, 20 * 60)
    observatory = observed.plane.observatory
    assert observatory is not None
    now = observed.plane.now()
    before = observatory.series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 1_200, now)
    assert len(before) == 4
    usage = observed.plane.observing.recorder.usage[(TENANT, "busy")]
    observed.restart(clean=True)
    again = observed.plane.observatory
    assert again is not None
    assert again is not observatory
    after = again.series.query("DCGM_FI_DEV_GPU_UTIL", "avg", 1_200, now)
    by_uuid = {dict(k)["UUID"]: v for k, v in before.items()}
    assert {dict(k)["UUID"]: v for k, v in after.items()} == pytest.approx(by_uuid)
    assert sorted(by_uuid.values()) == pytest.approx([2.0, 2.0, 2.0, 95.0], abs=0.01)
    assert observed.plane.observing.recorder.usage[(TENANT, "busy")] == usage
    assert usage.samples == 20
    # The run was found again, and is observed on.
    assert observed.workload("busy")["state"] == "Running"
    rounds(observed, 60)
    assert observed.plane.observing.recorder.usage[(TENANT, "busy")].samples == 21


def test_a_plane_without_gpus_reads_no_samples(state_root: Path) -> None:
    nvml = FakeNvml(parse_fake_spec(yaml.safe_load(FOUR_GPUS), "gpus.yaml"), lambda: 0.0)
    nvml.nvmlInit()
    harness = LocalHarness.start(discover(nvml), state_root)
    try:
        assert harness.plane.telemetry is None
        assert harness.plane.observing.round() is not None
        assert alerts(harness) == []
    finally:
        harness.shut_down()


def test_a_preemptible_step_lets_waiting_work_preempt_the_idle_run(
    observed: LocalHarness,
) -> None:
    """The idle run holds the three idle GPUs; a run of its priority waits for two of them and
    could not preempt it. Lowered by the policy, it is stopped (SIGTERM) for the waiting one,
    and waits again."""
    policy = IdlePolicy(
        name="lower",
        steps=(IdleStep(IdleAction.PREEMPTIBLE),),
        scope=IdleScope(workload_kinds=frozenset({"Pod"})),
        threshold_pct=10.0,
        window_s=300.0,
        grace_s=600.0,
    )
    reclaimer = reclaimer_for(observed.plane, [policy])
    assert reclaimer is not None
    running(observed, "busy")
    for name, gpus in (("idle", 3), ("waiter", 2)):
        body = observed.submit(pod(name, report(observed, "0", "never"), gpus=gpus))
        assert body["status"] == 201, body
    observed.run_until(observed.state_is("idle", "Running"))
    rounds(observed, 5 * 60)
    assert observed.workload("waiter")["state"] == "Pending", "nothing lower to preempt yet"
    rounds(observed, 10 * 60)
    found = idle_events(observed, f"{TENANT}/Pod/idle")
    assert len(found) == 1, (
        f"decisions {list(reclaimer.decisions)}; candidates "
        f"{idle_candidates(observed.plane.records)}; at {observed.plane.now()}"
    )
    (lowered,) = found
    assert lowered.reason == "IdleReclaimPreemptible"
    assert "lowered to preemptible" in lowered.message, lowered.message
    observed.run_until(observed.state_is("waiter", "Running"))
    assert observed.workload("idle")["state"] == "Pending"
    assert observed.machine.run_of(f"{TENANT}/idle") is None
    assert "Preempted" in [e["reason"] for e in observed.workload("idle")["events"]]


def test_a_gpu_with_a_critical_xid_is_withdrawn_until_it_recovers(observed: LocalHarness) -> None:
    fake = observed.devices
    assert isinstance(fake, FakeGpus)
    assert fake.nvml is not None
    running(observed, "busy")
    assert gpu_of(observed, "busy") == BUSY_GPU, "the first pod took the first GPU"
    uuid = observed.inventory.devices[2].uuid
    fake.nvml.inject_xid(2, 79)
    (withdrawn,) = observed.plane.check_health(timeout_s=5.0)
    assert (withdrawn.workload, withdrawn.type, withdrawn.reason) == (
        None, "Warning", "GPUUnhealthy",
    )  # fmt: skip
    assert withdrawn.message.startswith(f"GPU 2 ({uuid}) withdrawn from scheduling: XID 79")
    assert withdrawn in observed.store.events()
    (node,) = observed.client("admin").get("/api/v1/nodes").json()
    assert [d["index"] for d in node["devices"] if not d["healthy"]] == [2]
    observed.plane.turn()
    metrics = observed.client("admin").get("/metrics").text
    assert 'gpufleet_gpu_unhealthy{gpu="2",node="box"} 1.0' in metrics
    # Three GPUs are free but one is withdrawn: a pod asking for three waits.
    body = observed.submit(pod("wide", report(observed, "0", "never"), gpus=3))
    assert body["status"] == 201, body
    observed.run_until(lambda: f"{TENANT}/wide" in observed.machine.unschedulable)
    assert observed.workload("wide")["state"] == "Pending"
    # The XID is in the samples: the built-in alert fires for that GPU.
    rounds(observed, 60)
    xid = [a for a in alerts(observed, state="firing") if a["rule"] == "gpu-xid-error"]
    assert [a["labels"]["gpu"] for a in xid] == ["2"]
    assert xid[0]["value"] == pytest.approx(79.0, abs=0.01)  # as the store keeps it
    # Recovered (the driver says no action is needed any more): back in service, and used.
    fake.nvml.recover(2)
    (back,) = observed.plane.check_health(timeout_s=5.0)
    assert (back.reason, back.message) == ("GPUHealthy", f"GPU 2 ({uuid}) is back in service")
    observed.run_until(observed.state_is("wide", "Running"))


def test_cost_prices_the_runs_with_their_measured_utilisation(observed: LocalHarness) -> None:
    """``gpufleet cost`` from the local plane's records and series: each run's GPU-hours on
    the machine's GPUs, split into used and idle by what NVML measured."""
    running(observed, "busy", "idle")
    rounds(observed, 60 * 60, step=observed.observe_step_s)  # a sample stands two steps at most
    response = observed.client("admin").get(
        "/api/v1/cost", params={"by": "workload", "window": "1h"}
    )
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["measured"]
    assert report["unpriced_models"] == []
    lines = {line["name"]: line for line in report["lines"]}
    for name, utilisation in (("busy", 0.95), ("idle", 0.02)):
        line = lines[f"{TENANT}/{name}"]
        assert line["gpu_hours"] == pytest.approx(1.0, abs=0.01)
        assert line["utilisation"] == pytest.approx(utilisation, abs=0.001)
        assert line["allocated"] > 0
        assert line["used"] == pytest.approx(line["allocated"] * utilisation, rel=0.01)
    assert lines["__idle__"]["gpu_hours"] == pytest.approx(2.0, abs=0.01), "GPUs nobody held"
    assert [h["workload"] for h in report["idle_holders"]] == [f"{TENANT}/Pod/idle"]


def test_cost_counts_the_gpus_from_the_first_start_of_the_server(observed: LocalHarness) -> None:
    """A day's window over a box that has run one hour: its four GPUs cost one hour each
    (three idle, one held), not a day's idle GPUs before the server ever ran; a restart
    keeps that start."""
    first_start = observed.plane.now()
    running(observed, "busy")
    rounds(observed, 60 * 60)

    def day() -> dict[str, Any]:
        response = observed.client("admin").get(
            "/api/v1/cost", params={"by": "workload", "window": "1d"}
        )
        assert response.status_code == 200, response.text
        report: dict[str, Any] = response.json()
        return report

    report = day()
    assert report["start"] == pytest.approx(first_start, abs=1.0)
    lines = {line["name"]: line for line in report["lines"]}
    assert lines[f"{TENANT}/busy"]["gpu_hours"] == pytest.approx(1.0, abs=0.01)
    assert lines[f"{TENANT}/busy"]["utilisation"] == pytest.approx(0.95, abs=0.001)
    assert lines["__idle__"]["gpu_hours"] == pytest.approx(3.0, abs=0.01), "GPUs nobody held"
    observed.restart()
    assert day()["start"] == pytest.approx(first_start, abs=1.0)
