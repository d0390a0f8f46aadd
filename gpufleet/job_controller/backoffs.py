"""The delays of Kubernetes' Job semantics, in one place.

Owns the kubelet's crash-loop back-off (a container restarted in place: 10 s doubling to
5 min, back to 10 s once a run lasted 10 min), the Job controller's back-off before it makes a
new pod for a failed one (10 s doubling to 6 min), and :func:`backoff`, the doubling itself.
"""

from __future__ import annotations

#: The kubelet's crash-loop back-off: first delay, longest delay (seconds).
KUBELET_BACKOFF = (10.0, 300.0)
#: How long a container must have run for the kubelet to start its back-off anew (seconds).
KUBELET_BACKOFF_RESET_S = 600.0
#: The Job controller's back-off before it makes a new pod for a failed one.
JOB_BACKOFF = (10.0, 360.0)


def backoff(rule: tuple[float, float], times: int) -> float:
    """The delay after the ``times``-th failure (1 for the first) under a doubling back-off
    ``rule`` (first delay, longest delay)."""
    first, longest = rule
    # The doubling is capped long before a float overflows (a pod may crash-loop for ever).
    return float(min(longest, first * 2.0 ** min(max(0, times - 1), 64)))
