"""Kubernetes objects read into the model: Nodes, Pods and the workload objects that make pods
(Jobs, Deployments, StatefulSets, ReplicaSets, and operators' PyTorchJobs, MPIJobs and Ray
objects), their scheduling fields (resources, affinity, tolerations, controller rules, admission
labels and annotations), the annotations and taints other Kubernetes components put on them (the
node agent's GPU inventory and the scheduler's device binding, both in :mod:`.annotations`, and
the binding's signature; MIG layouts, autoscalers' disruption marks), the autoscalers that
scale them (HorizontalPodAutoscalers, KEDA ScaledObjects), the NVIDIA device plugin's config, a
pod's process for the local machine, and the strict schema check every object passes first.

One object at a time: loading files is :mod:`gpufleet.io.manifests`', assembling a scenario is
:mod:`gpufleet.io.assembly`'.
"""
