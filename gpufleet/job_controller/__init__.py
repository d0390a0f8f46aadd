"""Kubernetes' Job semantics as a pure decision, shared by every world that runs Jobs.

A pod of a Job ended (failed, its container restarted, its index failed, the Job's deadline
passed): :mod:`.decisions` says what follows (restart it in place after a delay, replace it,
fail its index, the Job succeeded or failed, and why), from the Job's rules and counts alone;
:mod:`.backoffs` holds the delays (the kubelet's CrashLoopBackOff, the Job controller's back-off
before a new pod). The simulator (:mod:`gpufleet.backends.sim.jobs`) and the local machine
(:mod:`gpufleet.backends.local.machine`) both ask here and keep only their world's mechanics
(simulated events; processes started and stopped). It imports only the model, does no I/O and
reads no clock.
"""
