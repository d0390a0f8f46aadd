"""gpufleet's own kinds (``gpufleet.dev/v1alpha1``) read into the model, and the files that go
with them: Queues with PriorityClasses, PodGroups and ResourceQuotas (and the catalog that checks
them together), ClusterSpecs (and their writer), NodePools and the price list, GpuFaults,
SpotInterruptions and NodeFailures, SimulatedTelemetry, IdlePolicies, InferenceLoads,
GPUAlertRules (and the Prometheus rules and Alertmanager routing that go with them).

One object or file at a time: loading files is :mod:`gpufleet.io.manifests`', assembling a
scenario is :mod:`gpufleet.io.assembly`'.
"""
