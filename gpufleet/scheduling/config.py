"""The knobs of admission and preemption, and nothing else.

Its own module so that what only configures the core (``gpufleet scheduler``'s flags and their
defaults) does not import the core: the scheduler starts listing its cluster before that.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Knobs of admission and preemption (seconds where they are times)."""

    #: A workload runs at least this long before it may be preempted.
    min_runtime: float = 120.0
    #: Pods of an admitted gang must all be ready within this, else it is released.
    gang_ready_timeout: float = 600.0
    backoff_base: float = 30.0
    backoff_max: float = 3600.0
    #: Run time assumed for backfill when a workload declares none (a safe, long guess).
    default_expected_runtime: float = 24 * 3600.0
    #: Priority aging: +``aging_step`` per ``aging_interval`` waited (off when None).
    aging_interval: float | None = None
    aging_step: int = 1
    #: Preemption searches per cycle, and candidates each search considers.
    max_preemption_searches: int = 8
    max_victim_candidates: int = 64
    #: Backfill: keep the capacity that frees first for the first blocked workload.
    backfill: bool = True
    #: Re-plan the reservation of the same blocked workload at most this often.
    replan_interval: float = 60.0
