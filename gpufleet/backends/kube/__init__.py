"""A Kubernetes cluster as a world: informers, binds and evictions through the API, status and
Events, leader election, and the ``gpufleet scheduler`` process (:mod:`.scheduler`). The only
place that imports the ``kubernetes`` client."""
