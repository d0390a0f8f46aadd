"""The control plane's HTTP API (FastAPI): routes, authentication, the dashboard's files.

Routes (JSON shapes in :mod:`gpufleet.api.schemas`; errors are :class:`ErrorBody` with the
right 4xx code). Everything under ``/api/v1`` needs ``Authorization: Bearer <token>`` (only the
event stream takes ``?token=`` instead, as the dashboard's EventSource cannot set headers), and
so does ``/metrics``, from an admin or a metrics token only (it names every tenant's pods); a
metrics token reads nothing else.
Every response carries the security headers and every request passes the Host check of
:mod:`gpufleet.api.front_door`; :mod:`gpufleet.api.http_server` runs the app under uvicorn:

==========  ===================================================  =========================
GET         /healthz, /readyz                                     no token
GET         /metrics  (Prometheus text)                           admin or metrics token
GET         /, /static/...                                        the dashboard, no token
GET         /openapi.json, /docs, /redoc                          no token
GET         /static/vendor/api-docs/...  (the docs' own assets)   no token
GET         /api/v1/whoami                                        WhoAmI
GET         /api/v1/cluster                                       ClusterSummary
GET         /api/v1/history                                       History
POST        /api/v1/workloads  (YAML or JSON, one or more docs)  201 SubmitResult
GET         /api/v1/workloads?state=&queue=&namespace=           list[WorkloadSummary]
GET         /api/v1/workloads/{namespace}/{name}                  WorkloadDetail
GET         /api/v1/workloads/{namespace}/{name}/explain          Explanation
DELETE      /api/v1/workloads/{namespace}/{name}                  WorkloadSummary
POST        /api/v1/workloads/{namespace}/{name}/ungate           WorkloadSummary
            (body {"gates": [...]} optional: default all)
POST        /api/v1/workloads/{namespace}/{name}/resume|suspend   WorkloadSummary
GET         /api/v1/queues, /api/v1/queues/{name}                 list[QueueView], QueueView
PUT         /api/v1/queues  (admin; a Queue object)               QueueView
DELETE      /api/v1/queues/{name}  (admin)                        204
GET         /api/v1/priorityclasses                               list[PriorityClassView]
PUT         /api/v1/priorityclasses  (admin; a PriorityClass)    PriorityClassView
GET         /api/v1/nodes, /api/v1/nodes/{name}                   list[NodeView], NodeView
GET         /api/v1/events?workload=                              list[EventView]
WebSocket   /api/v1/workloads/{namespace}/{name}/attach           a run's terminal
            (serve --local; its own tenant: gpufleet.api.attach)
GET         /api/v1/cost?by=namespace&window=7d                   CostReport
GET         /api/v1/stream                                        text/event-stream of Change
POST        /api/v1/tokens?tenant=&role=&name=&expires_in=30d    TokenCreated
            (admin; expires_in default 90d, or never)
GET         /api/v1/tokens  (admin)                               list[TokenView]
DELETE      /api/v1/tokens/{id}  (admin; revokes it)              TokenView
==========  ===================================================  =========================
"""
