"""The Kubernetes mode's telemetry: window queries read from a Prometheus server's HTTP API
(the DCGM-named series of gpufleet's node agent or of dcgm-exporter, kube-state-metrics' pod
starts), with no store of gpufleet's own. :class:`PrometheusSeries` answers what the embedded
mode's ``SeriesStore`` answers; :mod:`.promql` says how each query is written.
"""

from gpufleet.backends.prometheus.series import PrometheusSeries, PrometheusUnavailableError

__all__ = ["PrometheusSeries", "PrometheusUnavailableError"]
