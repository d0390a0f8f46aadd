"""Workload usage profiles: what the pods on a GPU make it do, over simulated time.

Owns :class:`UsageProfile` (training, inference, notebook, debug, idle), how a pod gets one
(:func:`profile_of`: the ``gpufleet.dev/usage-profile`` annotation, else the scenario's
default, else one from its GPU request's shape), and :class:`ProfileModel`, which turns the
pods on every device into utilisation, memory-copy utilisation, framebuffer used, power,
temperature and SM clock at a simulated time. No I/O and no clock reads: time is passed in,
and every value is a function of (seed, pod, time) alone, so two reads of the same moment
agree and a run is reproducible. It makes no :class:`~gpufleet.model.telemetry.DeviceSample`
itself (the simulated cluster's source does, with the devices' names).

The shapes follow published measurements of production GPU clusters:

* Training (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training
  Workloads", ATC'19, Microsoft Philly; Hu et al., "Characterization and Prediction of Deep
  Learning Workloads in Large-Scale GPU Datacenters", SC'21, SenseTime Helios): a training job
  holds its GPUs steadily busy once past its start-up, with short dips (evaluation,
  checkpoints), and keeps most of the memory it asked for; per-job utilisation levels spread
  widely, lower for jobs spread over servers. Here: a level drawn per pod from 0.70-0.97, a
  2-minute warm-up at 30%, a 1-minute dip to 25% every 30 minutes, memory at 85-97% of what
  the pod may use.
* Inference (Weng et al., "MLaaS in the Wild", NSDI'22, Alibaba PAI): serving follows its
  request load, which is diurnal, and uses a fraction of the compute it holds (the PAI trace's
  instances mostly run far below the GPU they requested). Here: a base of 5-20% rising to a
  peak of 40-80% at 14:00 (+/- 2 h per pod) of each simulated day, memory at 50-80% (weights)
  plus up to 15% more with load (caches).
* Notebooks and debug sessions (Weng et al.: a third of the PAI trace's instances average zero
  GPU utilisation, three quarters under 10%; Hu et al.: most debugging jobs are short): mostly
  idle, with bursts. A notebook bursts in 12% of 10-minute windows, for 1-8 minutes at 30-90%;
  a debug session in 30% of 5-minute windows, for 0.5-3 minutes at 40-100%; both hold 10-60%
  of their memory throughout.
* Idle: holds a little memory and never computes.

A device's utilisation is the sum of its pods' (each weighted by the share of the device it
holds), capped at 100%; its memory is the sum of theirs, capped at its size. Power is idle +
(TDP - idle) * f(utilisation) and temperature follows it in first order (time constant
:data:`THERMAL_TAU_S`): both from :mod:`gpufleet.telemetry.gpus`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from gpufleet.model.pod import Pod
from gpufleet.telemetry.gpus import GpuSpec, power_fraction

#: The pod annotation that names its profile.
USAGE_PROFILE_ANNOTATION = "gpufleet.dev/usage-profile"
#: The temperature's time constant, and the history it is integrated over (in simulated s).
THERMAL_TAU_S = 90.0
HISTORY_STEP_S = 30.0
HISTORY_STEPS = 12
DAY_S = 86400.0
INFERENCE_PEAK_S = 14 * 3600.0
#: Per-pod parameters are kept for this many pods before the cache starts again.
PARAMETER_CACHE = 200_000

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class UsageProfile(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    DEBUG = "debug"
    IDLE = "idle"


_CODES = {profile: code for code, profile in enumerate(UsageProfile)}


def parse_profile(value: str, where: str) -> UsageProfile:
    """``value`` as a profile; ValueError naming ``where`` and the choices if it is none."""
    try:
        return UsageProfile(value.strip().lower())
    except ValueError:
        choices = " | ".join(p.value for p in UsageProfile)
        raise ValueError(
            f"{where}: {USAGE_PROFILE_ANNOTATION} is {value!r}, expected one of {choices}"
        ) from None


def shape_profile(pod: Pod) -> UsageProfile:
    """The profile a pod's GPU request suggests: MIG slices serve (inference), a share of one
    GPU is interactive (notebook), whole GPUs train, no GPU is idle."""
    gpu = pod.gpu
    if gpu.mig_profile is not None:
        return UsageProfile.INFERENCE
    if gpu.count == 0:
        return UsageProfile.IDLE
    return UsageProfile.NOTEBOOK if gpu.is_shared else UsageProfile.TRAINING


def profile_of(pod: Pod, scenario_default: UsageProfile | None = None) -> UsageProfile:
    """The pod's annotation, else ``scenario_default``, else :func:`shape_profile`
    (ValueError, naming the pod, for an annotation that names no profile)."""
    value = pod.annotations.get(USAGE_PROFILE_ANNOTATION)
    if value is not None:
        return parse_profile(value, f"pod {pod.key}")
    return scenario_default or shape_profile(pod)


@dataclass(frozen=True, slots=True)
class PodLoad:
    """One pod's hold on one compute domain (a GPU, or a MIG instance)."""

    key: str
    profile: UsageProfile
    #: The fraction of the domain's compute it holds (1: all of it).
    share: float
    #: The memory it may use there, MiB.
    memory_mib: int
    #: When it started running (simulated seconds).
    started: float


@dataclass(frozen=True, slots=True)
class Domain:
    """A unit of compute its pods share: a whole GPU, or one MIG instance of a GPU."""

    #: The position of its GPU in the ``gpus`` given to :meth:`ProfileModel.read`.
    gpu: int
    #: Its part of the GPU's compute (1 for a whole GPU, slices/7 for a MIG instance).
    fraction: float
    memory_mib: int
    pods: Sequence[PodLoad] = ()


@dataclass(frozen=True, slots=True)
class Readings:
    """Values at one time: per domain (in the order given) and per GPU."""

    domain_util: FloatArray  # percent
    domain_mem_copy: FloatArray  # percent
    domain_fb_used: IntArray  # MiB
    gpu_util: FloatArray
    gpu_mem_copy: FloatArray
    gpu_fb_used: IntArray
    gpu_temperature: FloatArray  # degrees C
    gpu_power: FloatArray  # W
    gpu_sm_clock: IntArray  # MHz


@dataclass(frozen=True, slots=True)
class _Params:
    seed: int
    level: float
    low: float
    memory: float
    copy: float
    phase: float


class ProfileModel:
    """See the module docstring. Deterministic for ``seed``."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._params: dict[tuple[str, UsageProfile], _Params] = {}
        weights = np.exp(-np.arange(HISTORY_STEPS) * HISTORY_STEP_S / THERMAL_TAU_S)
        self._thermal_weights: FloatArray = weights / weights.sum()

    def params(self, key: str, profile: UsageProfile) -> _Params:
        found = self._params.get((key, profile))
        if found is None:
            if len(self._params) >= PARAMETER_CACHE:
                self._params.clear()
            digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
            pod_hash = int.from_bytes(digest, "little")
            rng = np.random.default_rng([self.seed, pod_hash, _CODES[profile]])
            found = self._params[(key, profile)] = _draw(profile, rng, pod_hash)
        return found

    def read(self, gpus: Sequence[GpuSpec], domains: Sequence[Domain], now: float) -> Readings:
        """Every domain's and GPU's values at ``now`` (simulated seconds)."""
        entries = [(d, pod) for d, domain in enumerate(domains) for pod in domain.pods]
        times = now - np.arange(HISTORY_STEPS, dtype=np.float64) * HISTORY_STEP_S  # newest first
        n_domains, n_gpus = len(domains), len(gpus)
        util = np.zeros((n_domains, HISTORY_STEPS))
        copy = np.zeros(n_domains)
        memory = np.zeros(n_domains)
        if entries:
            where = np.array([d for d, _ in entries], dtype=np.int64)
            pods = [pod for _, pod in entries]
            pod_util, pod_memory, pod_copy = self._pods(pods, times)
            np.add.at(util, where, pod_util)
            np.add.at(copy, where, pod_copy[:, 0])
            np.add.at(memory, where, pod_memory)
        util = np.minimum(util, 1.0)
        copy = np.minimum(copy, 1.0)
        sizes = np.array([d.memory_mib for d in domains], dtype=np.float64)
        domain_fb = np.minimum(np.round(memory), sizes).astype(np.int64)
        # A GPU's compute is its domains' weighted by their part of it.
        parent = np.array([d.gpu for d in domains], dtype=np.int64)
        fraction = np.array([d.fraction for d in domains], dtype=np.float64)
        gpu_util = np.zeros((n_gpus, HISTORY_STEPS))
        gpu_copy = np.zeros(n_gpus)
        gpu_fb = np.zeros(n_gpus, dtype=np.int64)
        if n_domains:
            np.add.at(gpu_util, parent, util * fraction[:, None])
            np.add.at(gpu_copy, parent, copy * fraction)
            np.add.at(gpu_fb, parent, domain_fb)
        gpu_util = np.minimum(gpu_util, 1.0)
        idle = np.array([g.idle_w for g in gpus], dtype=np.float64)
        tdp = np.array([g.tdp_w for g in gpus], dtype=np.float64)
        cool = np.array([g.temp_idle_c for g in gpus], dtype=np.float64)
        hot = np.array([g.temp_load_c for g in gpus], dtype=np.float64)
        clock_max = np.array([g.sm_clock_max_mhz for g in gpus], dtype=np.float64)
        clock_idle = np.array([g.sm_clock_idle_mhz for g in gpus], dtype=np.float64)
        drawn = power_fraction(gpu_util)
        power = idle + (tdp - idle) * drawn[:, 0]
        # First order: the temperature is the steady one of the recent power, exponentially
        # weighted (the discrete response of dT/dt = (T_steady - T) / tau).
        temperature = cool + (hot - cool) * (drawn @ self._thermal_weights)
        busy = gpu_util[:, 0] > 0.005
        clock = np.where(busy, clock_max * (1.0 - 0.05 * drawn[:, 0]), clock_idle)
        return Readings(
            domain_util=np.round(util[:, 0] * 100.0, 2),
            domain_mem_copy=np.round(copy * 100.0, 2),
            domain_fb_used=domain_fb,
            gpu_util=np.round(gpu_util[:, 0] * 100.0, 2),
            gpu_mem_copy=np.round(np.minimum(gpu_copy, 1.0) * 100.0, 2),
            gpu_fb_used=gpu_fb,
            gpu_temperature=np.round(temperature, 1),
            gpu_power=np.round(power, 3),
            gpu_sm_clock=np.round(clock).astype(np.int64),
        )

    def utilisation(self, domains: Sequence[Domain], now: float) -> FloatArray:
        """Each domain's utilisation (percent) at ``now``: :meth:`read`'s ``domain_util``
        alone, for a reader of nothing else (a meter sampling every pod of a run)."""
        entries = [(d, pod) for d, domain in enumerate(domains) for pod in domain.pods]
        util = np.zeros(len(domains))
        if entries:
            where = np.array([d for d, _ in entries], dtype=np.int64)
            pod_util, _, _ = self._pods([pod for _, pod in entries], np.array([float(now)]))
            np.add.at(util, where, pod_util[:, 0])
        return np.asarray(np.round(np.minimum(util, 1.0) * 100.0, 2))

    def _pods(
        self, pods: Sequence[PodLoad], times: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(utilisation of the domain over ``times``, memory now in MiB, memory-copy
        utilisation over ``times``) of each pod, weighted by its share."""
        params = [self.params(p.key, p.profile) for p in pods]
        code = np.array([_CODES[p.profile] for p in pods], dtype=np.int64)[:, None]
        seed = np.array([p.seed for p in params], dtype=np.uint64)[:, None]
        level = np.array([p.level for p in params])[:, None]
        low = np.array([p.low for p in params])[:, None]
        phase = np.array([p.phase for p in params])[:, None]
        share = np.array([p.share for p in pods])[:, None]
        allowed = np.array([p.memory_mib for p in pods], dtype=np.float64)
        started = np.array([p.started for p in pods])[:, None]
        t = times[None, :]
        age = t - started
        util = np.zeros((len(pods), len(times)))
        training = _training(age, level, seed, t)
        inference, load = _inference(t, level, low, phase, seed)
        notebook, burst_nb = _bursts(t, seed, level, 600.0, 0.12, 60.0, 480.0)
        debug, burst_db = _bursts(t, seed, level, 300.0, 0.30, 30.0, 180.0)
        util = np.select(
            [code == _CODES[UsageProfile.TRAINING], code == _CODES[UsageProfile.INFERENCE],
             code == _CODES[UsageProfile.NOTEBOOK], code == _CODES[UsageProfile.DEBUG]],
            [training, inference, notebook, debug],
            0.0,
        )  # fmt: skip
        util = np.where(age >= 0.0, np.clip(util, 0.0, 1.0), 0.0) * share
        memory_share = np.array([p.memory for p in params])
        now_code = code[:, 0]
        extra = np.select(
            [now_code == _CODES[UsageProfile.INFERENCE], now_code == _CODES[UsageProfile.NOTEBOOK],
             now_code == _CODES[UsageProfile.DEBUG]],
            [0.15 * load[:, 0], 0.3 * burst_nb[:, 0], 0.3 * burst_db[:, 0]],
            0.0,
        )  # fmt: skip
        warm = np.where(
            now_code == _CODES[UsageProfile.TRAINING], np.clip(age[:, 0] / 60.0, 0, 1), 1
        )
        memory = np.where(
            age[:, 0] >= 0.0, allowed * np.minimum(1.0, (memory_share + extra) * warm), 0
        )
        copy = util * np.array([p.copy for p in params])[:, None]
        return util, memory, copy


def _draw(profile: UsageProfile, rng: np.random.Generator, pod_hash: int) -> _Params:
    """A pod's own parameters (see the module docstring for the ranges)."""
    seed = int(rng.integers(0, 2**63)) ^ pod_hash
    phase = float(rng.uniform(-7200.0, 7200.0))
    if profile is UsageProfile.TRAINING:
        return _Params(seed, rng.uniform(0.70, 0.97), 0.0, rng.uniform(0.85, 0.97),
                       rng.uniform(0.35, 0.6), phase)  # fmt: skip
    if profile is UsageProfile.INFERENCE:
        return _Params(seed, rng.uniform(0.40, 0.80), rng.uniform(0.05, 0.20),
                       rng.uniform(0.50, 0.80), rng.uniform(0.6, 0.9), phase)  # fmt: skip
    if profile is UsageProfile.NOTEBOOK:
        return _Params(seed, rng.uniform(0.30, 0.90), 0.0, rng.uniform(0.10, 0.60),
                       rng.uniform(0.3, 0.6), phase)  # fmt: skip
    if profile is UsageProfile.DEBUG:
        return _Params(seed, rng.uniform(0.40, 1.00), 0.0, rng.uniform(0.10, 0.60),
                       rng.uniform(0.3, 0.6), phase)  # fmt: skip
    return _Params(seed, 0.0, 0.0, rng.uniform(0.0, 0.05), 0.0, phase)


_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _noise(seed: NDArray[np.uint64], slot: FloatArray, stream: int) -> FloatArray:
    """Uniform [0, 1) per (pod seed, time slot, stream): a splitmix64 hash, so a moment's
    value needs no state and no generator."""
    with np.errstate(over="ignore"):
        x = seed + slot.astype(np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x = x + np.uint64(stream) * np.uint64(0xD1B54A32D192ED03)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return np.asarray((x >> np.uint64(11)).astype(np.float64) / float(1 << 53))


def _training(
    age: FloatArray, level: FloatArray, seed: NDArray[np.uint64], t: FloatArray
) -> FloatArray:
    jitter = 0.94 + 0.06 * _noise(seed, np.floor(t / 30.0), 1)
    warm = np.where(age < 120.0, 0.3, 1.0)
    dip = np.where(np.mod(age, 1800.0) < 60.0, 0.25, 1.0)
    return np.asarray(level * jitter * np.where(age < 120.0, warm, dip))


def _inference(
    t: FloatArray, peak: FloatArray, base: FloatArray, phase: FloatArray,
    seed: NDArray[np.uint64],
) -> tuple[FloatArray, FloatArray]:  # fmt: skip
    """(utilisation, the request load 0..1) following the day."""
    load = 0.5 + 0.5 * np.cos(2.0 * np.pi * (t - INFERENCE_PEAK_S - phase) / DAY_S)
    jitter = 0.85 + 0.3 * _noise(seed, np.floor(t / 60.0), 2)
    return np.asarray((base + (peak - base) * load) * jitter), np.asarray(load)


def _bursts(
    t: FloatArray, seed: NDArray[np.uint64], level: FloatArray, window: float,
    chance: float, shortest: float, longest: float,
) -> tuple[FloatArray, FloatArray]:  # fmt: skip
    """(utilisation, 1 while bursting else 0): in each window a burst with ``chance``, of a
    length between ``shortest`` and ``longest`` seconds, at ``level``; else near idle."""
    slot = np.floor(t / window)
    bursts = _noise(seed, slot, 3) < chance
    length = shortest + (longest - shortest) * _noise(seed, slot, 4)
    start = slot * window + (window - length) * _noise(seed, slot, 5)
    on = bursts & (t >= start) & (t < start + length)
    busy = level * (0.8 + 0.2 * _noise(seed, np.floor(t / 30.0), 6))
    quiet = 0.01 * _noise(seed, np.floor(t / 60.0), 7)
    return np.asarray(np.where(on, busy, quiet)), on.astype(np.float64)
