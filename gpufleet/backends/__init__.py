"""The worlds: a backend observes a cluster and carries the core's actions out (the simulated
cluster, Kubernetes, this machine), and the Prometheus reader of the Kubernetes mode's telemetry.
None imports another. Kept free of imports: see :mod:`gpufleet.backends.local`."""
