"""What a submission may hold and what a request calls itself: the kinds of workload the
control plane takes and the name its errors give the request body.

Its own module, of constants only, so that the CLI names the kinds without importing the
readers that :mod:`gpufleet.service.submissions` turns bodies into workloads with.
"""

from __future__ import annotations

#: How the server's errors name a request body (the CLI puts the file's name in its place).
SOURCE = "request"
WORKLOAD_KINDS = (
    "Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet", "PyTorchJob", "MPIJob",
    "RayCluster", "RayJob", "PodGroup",
)  # fmt: skip
