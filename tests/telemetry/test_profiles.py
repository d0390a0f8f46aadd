"""Usage profiles: bounded, deterministic for a seed, shaped as measured (notebooks mostly
idle, training steady and high, inference following the day), power and temperature rising
with utilisation, and a pod's profile chosen by its annotation or shape."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model.pod import GpuRequest, Pod
from gpufleet.telemetry.gpus import GPU_SPECS, gpu_spec, power_watts, sm_clock, steady_temperature
from gpufleet.telemetry.profiles import (
    USAGE_PROFILE_ANNOTATION,
    Domain,
    PodLoad,
    ProfileModel,
    Readings,
    UsageProfile,
    profile_of,
)

H100 = gpu_spec("H100")
MEMORY = 80 * 1024


def one_gpu(
    profile: UsageProfile, share: float = 1.0, pods: int = 1, memory: int = MEMORY
) -> list[Domain]:
    loads = [PodLoad(f"ns/p{i}", profile, share, memory, 0.0) for i in range(pods)]
    return [Domain(0, 1.0, MEMORY, loads)]


def series(
    profile: UsageProfile, seconds: float, step: float = 30.0, seed: int = 0
) -> list[Readings]:
    model = ProfileModel(seed)
    domains = one_gpu(profile)
    return [model.read([H100], domains, t) for t in np.arange(600.0, seconds, step)]


@settings(max_examples=40, deadline=None)
@given(
    profiles=st.lists(st.sampled_from(list(UsageProfile)), min_size=1, max_size=8),
    share=st.floats(0.05, 1.0),
    memory=st.integers(0, 2 * MEMORY),
    now=st.floats(0.0, 30 * 86400.0),
    seed=st.integers(0, 2**32),
)
def test_values_stay_within_the_device(
    profiles: list[UsageProfile], share: float, memory: int, now: float, seed: int
) -> None:
    loads = [PodLoad(f"ns/p{i}", p, share, memory, 0.0) for i, p in enumerate(profiles)]
    got = ProfileModel(seed).read([H100], [Domain(0, 1.0, MEMORY, loads)], now)
    assert 0.0 <= got.gpu_util[0] <= 100.0
    assert 0.0 <= got.gpu_mem_copy[0] <= 100.0
    assert 0 <= got.gpu_fb_used[0] <= MEMORY
    assert H100.idle_w <= got.gpu_power[0] <= H100.tdp_w
    assert H100.temp_idle_c <= got.gpu_temperature[0] <= H100.temp_load_c
    assert H100.sm_clock_idle_mhz <= got.gpu_sm_clock[0] <= H100.sm_clock_max_mhz


def test_same_seed_same_values_other_seed_other_values() -> None:
    domains = one_gpu(UsageProfile.NOTEBOOK, pods=3, share=0.3)
    times = np.arange(0.0, 86400.0, 97.0)
    first = [ProfileModel(7).read([H100], domains, t).gpu_util[0] for t in times]
    again = [ProfileModel(7).read([H100], domains, t).gpu_util[0] for t in times]
    other = [ProfileModel(8).read([H100], domains, t).gpu_util[0] for t in times]
    assert first == again
    assert first != other


def test_notebooks_are_mostly_idle_with_bursts() -> None:
    utils = [r.gpu_util[0] for r in series(UsageProfile.NOTEBOOK, 3 * 86400.0)]
    idle = sum(u < 5.0 for u in utils) / len(utils)
    assert idle > 0.8
    assert max(utils) > 25.0  # it does burst


def test_training_is_steady_and_high_with_memory_near_its_request() -> None:
    readings = series(UsageProfile.TRAINING, 86400.0)
    utils = np.array([r.gpu_util[0] for r in readings])
    assert np.median(utils) > 65.0
    assert all(0.85 * MEMORY <= r.gpu_fb_used[0] <= MEMORY for r in readings)


def test_inference_follows_the_day() -> None:
    model = ProfileModel(3)
    domains = one_gpu(UsageProfile.INFERENCE)
    day = [np.mean([model.read([H100], domains, d * 86400.0 + h * 3600.0 + m * 60).gpu_util[0]
                    for m in range(0, 60, 5)]) for d in range(2) for h in (3, 14)]  # fmt: skip
    night_1, afternoon_1, night_2, afternoon_2 = day
    assert afternoon_1 > 2 * night_1
    assert afternoon_2 > 2 * night_2


def test_idle_pods_never_compute() -> None:
    assert {r.gpu_util[0] for r in series(UsageProfile.IDLE, 7200.0)} == {0.0}


def test_shares_add_up_and_are_capped() -> None:
    model = ProfileModel(0)
    one = model.read([H100], one_gpu(UsageProfile.TRAINING, share=0.25), 4000.0).gpu_util[0]
    two = model.read([H100], [Domain(0, 1.0, MEMORY, [
        PodLoad("ns/p0", UsageProfile.TRAINING, 0.25, 1000, 0.0),
        PodLoad("ns/q0", UsageProfile.IDLE, 0.25, 1000, 0.0)])], 4000.0).gpu_util[0]  # fmt: skip
    assert one == two  # an idle neighbour adds nothing
    many = model.read([H100], one_gpu(UsageProfile.TRAINING, pods=8), 4000.0).gpu_util[0]
    assert many == 100.0


@pytest.mark.parametrize("model", sorted(GPU_SPECS), ids=sorted(GPU_SPECS))
def test_power_temperature_and_clock_rise_with_utilisation(model: str) -> None:
    spec = GPU_SPECS[model]
    util = np.linspace(0.0, 1.0, 101)
    power = power_watts(spec, util)
    assert np.all(np.diff(power) >= 0)
    assert power[0] == spec.idle_w
    assert power[-1] == spec.tdp_w
    assert np.all(np.diff(steady_temperature(spec, util)) >= 0)
    assert sm_clock(spec, np.array([0.0]))[0] == spec.sm_clock_idle_mhz
    assert sm_clock(spec, np.array([0.5]))[0] > spec.sm_clock_idle_mhz


def test_temperature_follows_power_in_first_order() -> None:
    model = ProfileModel(0)
    domains = [Domain(0, 1.0, MEMORY, [PodLoad("ns/t", UsageProfile.TRAINING, 1.0, 1, 3600.0)])]
    temps = [model.read([H100], domains, 3600.0 + s).gpu_temperature[0] for s in (0, 150, 330)]
    assert temps[0] < temps[1] < temps[2]  # warming towards the steady value, not jumping


@pytest.mark.parametrize(
    ("model", "tdp"),
    [("H100", 700), ("NVIDIA-H100-80GB-HBM3", 700), ("A100", 400), ("A100-80GB", 400),
     ("Tesla-T4", 70), ("L4", 72), ("A10", 150), ("V100M32", 300), ("G2", 250)],
    ids=["h100", "h100-product", "a100", "a100-80gb", "t4", "l4", "a10", "v100m32", "unknown"],
)  # fmt: skip
def test_specs_by_model_or_product(model: str, tdp: float) -> None:
    assert gpu_spec(model).tdp_w == tdp


@pytest.mark.parametrize(
    ("gpu", "annotation", "default", "expected"),
    [
        (GpuRequest.whole(2), None, None, UsageProfile.TRAINING),
        (GpuRequest.share(milli=250), None, None, UsageProfile.NOTEBOOK),
        (GpuRequest.mig("1g.10gb"), None, None, UsageProfile.INFERENCE),
        (GpuRequest(), None, None, UsageProfile.IDLE),
        (GpuRequest.whole(1), None, UsageProfile.DEBUG, UsageProfile.DEBUG),
        (GpuRequest.whole(1), "Inference", UsageProfile.DEBUG, UsageProfile.INFERENCE),
    ],
    ids=["whole-trains", "share-notebook", "mig-inference", "cpu-idle", "scenario", "annotation"],
)
def test_a_pods_profile(
    gpu: GpuRequest, annotation: str | None, default: UsageProfile | None, expected: UsageProfile
) -> None:
    annotations = {USAGE_PROFILE_ANNOTATION: annotation} if annotation else {}
    pod = Pod("p", gpu=gpu, annotations=annotations)
    assert profile_of(pod, default) is expected


def test_a_bad_annotation_names_the_pod_and_the_choices() -> None:
    pod = Pod("p", annotations={USAGE_PROFILE_ANNOTATION: "gaming"})
    with pytest.raises(ValueError, match=r"pod default/p: gpufleet.dev/usage-profile is 'gaming'"):
        profile_of(pod)
