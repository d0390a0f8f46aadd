"""A Kubernetes cluster as a world, as the scheduler sees it: informers' objects told to the
core, binds and evictions through the API, status and Events, leader election, and the
``gpufleet scheduler`` process (:mod:`.scheduler`). The API client is
:mod:`gpufleet.kube_client`'s; the node agent's Kubernetes side is :mod:`gpufleet.agent.kube`'s."""
