"""An in-process fake Kubernetes API server for tests that drive the official python client.

Why hand-written: no maintained fake fits. No Python library fakes the Kubernetes *HTTP* API
(the python client's own tests mock at the function level, and mocks skip the real client code
paths: serialisation, watch streams, retries); client-go's fake clientset is Go, in process,
with no HTTP; envtest and kwok run a real ``kube-apiserver`` and ``etcd``, binaries that unit
tests and CI do not have (the end-to-end tests in ``tests/e2e`` use a real server when one is
given). It lives with the tests, not in the product package: nothing under ``gpufleet/`` or
``benchmarks/`` uses it (``benchmarks/kube_bind.py`` runs against a real API server). This
package is standard library only on the server side: ``http.server.ThreadingHTTPServer`` on
127.0.0.1 at a port the OS picks, HTTP/1.1, chunked watch streams, no TLS, no authentication
(the kubeconfig it writes carries a dummy bearer token, which may name a client identity the
server records but never checks). It records the identity each request impersonates
(``Impersonate-User``/``-Group``) and, once a test grants any, authorizes impersonated users'
writes per namespace (:mod:`.authz`).

It follows the real server where our scheduler backend can tell the difference: one global
resourceVersion, optimistic concurrency, 201/404/409/410/429 with ``Status`` bodies, status
subresources, merge / strategic merge / JSON patches, label and field selectors, watches from a
resourceVersion (410 as an ERROR event once history is compacted), pod binding, eviction
against PodDisruptionBudgets and graceful pod deletion, the ``scale`` subresource of the apps
kinds, and CRDs that register their resources.
It does not validate objects (custom objects are not checked against the CRD's OpenAPI schema,
which is accepted and stored as given), runs no controllers or admission beyond a few defaults
(pods get ``schedulerName``, ``spec.priority`` from their PriorityClass, phase Pending),
treats namespaces as implicit, and ignores ``limit``/``continue`` (lists are whole).

Modules:

* :mod:`.api` — :class:`FakeApiServer`, the public face.
* :mod:`.server` — HTTP handling, watch streaming, request log and fault injection.
* :mod:`.access` — each request's RBAC attributes (verb, group, resource, namespace), per
  client: the evidence tests/deploy checks the shipped roles against.
* :mod:`.endpoints` — verbs on routed requests (get, list, watch, create, update, patch, delete).
* :mod:`.routes` — URL paths to resources.
* :mod:`.authz` — who sent each request; impersonated users' write grants and RBAC's 403.
* :mod:`.resources` — built-in resource types and those a CRD registers.
* :mod:`.store` — objects, resourceVersions, history and watchers.
* :mod:`.pods` — binding, eviction and graceful deletion.
* :mod:`.scale` — the ``scale`` subresource of Deployments, StatefulSets and ReplicaSets.
* :mod:`.patch` — merge, strategic merge and JSON patch.
* :mod:`.selectors` — label and field selectors.
* :mod:`.errors` — ``Status`` bodies and :class:`ApiError`.

Usage::

    with FakeApiServer() as api:
        core = kubernetes.client.CoreV1Api(api.api_client())
        ...
"""

from tests.fakes.kube_api.api import FakeApiServer
from tests.fakes.kube_api.errors import ApiError

__all__ = ["ApiError", "FakeApiServer"]
