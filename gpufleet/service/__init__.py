"""The control plane as a service: the scheduling loop over a live world, durable state
(SQLite), tenants and tokens, and the book of workloads the API reads. It owns its types
(:mod:`~gpufleet.service.states`, :mod:`~gpufleet.service.records`) and never imports the API,
which maps them to its shapes."""
