"""The ``kube`` suite's run on a real API server: CRDs, a namespace of its own, a cleanup."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.e2e.kube_cluster import KUBECONFIG_ENV, Cluster


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    found = Cluster(os.environ[KUBECONFIG_ENV])
    try:
        # Inside: a setup that fails half-way must not leave its Queue, which would change
        # how every later run's quota is counted.
        found.install_crds()
        found.create_namespace()
        yield found
    finally:
        found.cleanup()
