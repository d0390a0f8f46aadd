"""The node agent: device plugin (gRPC), PodResources client, DCGM-named /metrics, device
health and Node labels. The only place that imports ``grpc``."""
