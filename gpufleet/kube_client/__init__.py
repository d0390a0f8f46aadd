"""The Kubernetes API client that gpufleet's three Kubernetes programs share: the scheduler's
backend (:mod:`gpufleet.backends.kube`), the node agent's Kubernetes side
(:mod:`gpufleet.agent.kube`) and the control plane's writes (:mod:`gpufleet.service`).

Two transports (:mod:`.api` over the ``kubernetes`` client, :mod:`.light_api` over the standard
library, with its kubeconfig reading in :mod:`.light_config`), the types and errors they share
(:mod:`.api_types`), the retry policy of a POST whose answer may be lost (:mod:`.retry_policy`),
the reachability warnings (:mod:`.reachability`), informers (:mod:`.informer`), the writer of the
objects users submit (:mod:`.writer`) and the field tables of the kinds gpufleet reads
(:mod:`.field_tables`). The only place that imports the ``kubernetes`` client. Decides nothing
about scheduling.
"""
