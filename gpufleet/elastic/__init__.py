"""Elastic capacity, decided: how many replicas an autoscaled workload should run (the
HorizontalPodAutoscaler's algorithm) and which node pools should grow or shrink (a cluster
autoscaler's choices).

Pure decisions, like the scheduling core: each takes a snapshot (metrics, pending work, the
nodes and the pools, ``now``) and returns what to do; the worlds carry it out (the simulator
adds and removes nodes and replicas; on Kubernetes the scale subresource, or Cluster Autoscaler
and Karpenter, do). No I/O and no clock here. It sits between the control loop and the
scheduling core: it may ask the core's placement whether work fits on nodes that do not exist
yet, never the other way round.
"""
