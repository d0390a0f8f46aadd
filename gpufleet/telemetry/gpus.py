"""What each GPU model draws, how hot it runs and how fast it clocks: the constants of the
simulated telemetry.

Owns :class:`GpuSpec` and :func:`gpu_spec` (a model or product name to its constants), and the
two curves every simulated device follows: :func:`power_fraction` (how much of the span from
idle power to TDP a device draws at a utilisation) and :func:`steady_temperature`. It reads no
device and no clock; :mod:`gpufleet.telemetry.profiles` uses it.

Sources. TDP, maximum SM (boost) clock and memory are NVIDIA's datasheets: H100 SXM5 (700 W,
1980 MHz, 80 GB), H200 SXM (700 W, 1980 MHz, 141 GB), B200 (1000 W per GPU in HGX B200,
1965 MHz), A100 SXM4 (400 W, 1410 MHz, 40/80 GB), A30 (165 W, 1440 MHz, 24 GB), A10 (150 W,
1695 MHz, 24 GB), L4 (72 W, 2040 MHz, 24 GB), L40S (350 W, 2520 MHz, 48 GB), T4 (70 W,
1590 MHz, 16 GB), V100 SXM2 (300 W, 1530 MHz, 16/32 GB), P100 SXM2 (300 W, 1480 MHz, 16 GB).
Idle power, the idle clock (the P8 state nvidia-smi shows on an idle board) and temperatures
are typical ``nvidia-smi`` readings of idle and loaded data-centre boards, roughly 8-15% of TDP
at idle; they are approximations, not datasheet values. Power rises concavely with utilisation
(clocks and voltage ramp up before the SMs are full), which the exponent of
:func:`power_fraction` stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gpufleet.model.gpu import canonical_model, model_matches

#: The exponent of the concave power curve: 50% utilisation draws ~57% of the dynamic span.
POWER_EXPONENT = 0.8
#: A device idles at its P8 clocks below this utilisation (a fraction).
BUSY_THRESHOLD = 0.005
#: How much the boost clock sags at full power (power capping), as a fraction.
CLOCK_SAG_AT_TDP = 0.05

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model's constants (watts, MHz, MiB, degrees C)."""

    tdp_w: float
    idle_w: float
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    memory_mib: int
    temp_idle_c: float
    temp_load_c: float


GIB = 1024
#: By short model name, as :func:`~gpufleet.model.gpu.model_matches` compares names.
GPU_SPECS: dict[str, GpuSpec] = {
    "H100": GpuSpec(700.0, 70.0, 1980, 345, 80 * GIB, 32.0, 72.0),
    "H200": GpuSpec(700.0, 75.0, 1980, 345, 141 * GIB, 32.0, 72.0),
    "B200": GpuSpec(1000.0, 120.0, 1965, 345, 180 * GIB, 33.0, 75.0),
    "A100": GpuSpec(400.0, 55.0, 1410, 210, 40 * GIB, 30.0, 70.0),
    "A100-80GB": GpuSpec(400.0, 60.0, 1410, 210, 80 * GIB, 30.0, 70.0),
    "A30": GpuSpec(165.0, 30.0, 1440, 210, 24 * GIB, 30.0, 72.0),
    "A10": GpuSpec(150.0, 18.0, 1695, 210, 24 * GIB, 32.0, 78.0),
    "L4": GpuSpec(72.0, 16.0, 2040, 210, 24 * GIB, 35.0, 75.0),
    "L40S": GpuSpec(350.0, 35.0, 2520, 210, 48 * GIB, 32.0, 78.0),
    "T4": GpuSpec(70.0, 10.0, 1590, 300, 16 * GIB, 33.0, 75.0),
    "V100": GpuSpec(300.0, 40.0, 1530, 135, 16 * GIB, 33.0, 75.0),
    "V100M16": GpuSpec(300.0, 40.0, 1530, 135, 16 * GIB, 33.0, 75.0),
    "V100M32": GpuSpec(300.0, 42.0, 1530, 135, 32 * GIB, 33.0, 75.0),
    "P100": GpuSpec(300.0, 30.0, 1480, 405, 16 * GIB, 33.0, 78.0),
}
#: A model none of the above covers (Alibaba's anonymised ``G2``, ``MISC``...): a mid-range
#: data-centre board.
GENERIC = GpuSpec(250.0, 30.0, 1500, 300, 16 * GIB, 32.0, 75.0)


def gpu_spec(model: str) -> GpuSpec:
    """The constants of ``model`` (a short name or a product: ``H100``,
    ``NVIDIA-H100-80GB-HBM3``); the most specific name that covers it wins, else
    :data:`GENERIC`."""
    covering = [name for name in GPU_SPECS if model_matches(name, model)]
    if not covering:
        return GENERIC
    return GPU_SPECS[max(covering, key=lambda name: len(canonical_model(name)))]


def power_fraction(util: FloatArray) -> FloatArray:
    """The fraction of the span from idle power to TDP drawn at ``util`` (0..1 each):
    increasing, 0 at 0 and 1 at 1."""
    clipped: FloatArray = np.clip(util, 0.0, 1.0)
    return np.asarray(clipped**POWER_EXPONENT, dtype=np.float64)


def power_watts(spec: GpuSpec, util: FloatArray) -> FloatArray:
    """Power drawn at ``util``: idle + (TDP - idle) * :func:`power_fraction`."""
    return spec.idle_w + (spec.tdp_w - spec.idle_w) * power_fraction(util)


def steady_temperature(spec: GpuSpec, fraction: FloatArray) -> FloatArray:
    """The temperature a device settles at while drawing ``fraction`` of its power span."""
    clipped = np.clip(fraction, 0.0, 1.0)
    return np.asarray(
        spec.temp_idle_c + (spec.temp_load_c - spec.temp_idle_c) * clipped, dtype=np.float64
    )


def sm_clock(spec: GpuSpec, util: FloatArray) -> FloatArray:
    """The SM clock at ``util``: the idle clock when idle, else the boost clock, sagging a
    little towards TDP."""
    busy = np.asarray(util) > BUSY_THRESHOLD
    boost = spec.sm_clock_max_mhz * (1.0 - CLOCK_SAG_AT_TDP * power_fraction(util))
    return np.where(busy, np.round(boost), float(spec.sm_clock_idle_mhz))
