"""The control plane as a service: the scheduling loop over a live world, durable state
(SQLite), tenants and tokens, and read-only views for the API."""
