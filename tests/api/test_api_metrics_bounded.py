"""The API latency's labels stay bounded whatever callers send: made-up methods and paths
fold into ``other`` and ``unmatched`` (issue 26, item 11: 3,000 requests with random methods
grew ``/metrics`` from 0.26 to 6 MB)."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from gpufleet.api.metrics import request_labels
from gpufleet.testing.service import ServiceHarness, make_harness, queue_doc

SERIES = "gpufleet_api_request_seconds_count{"


@pytest.fixture
def harness(tmp_path: Path) -> ServiceHarness:
    return make_harness(tmp_path, queues=[queue_doc("team-a", 8, namespaces=["team-a"])])


def _series(metrics: str) -> set[str]:
    return {line.split(" ")[0] for line in metrics.splitlines() if line.startswith(SERIES)}


def _word(rng: random.Random, letters: str = string.ascii_letters) -> str:
    return "".join(rng.choice(letters) for _ in range(rng.randint(3, 12)))


@pytest.mark.parametrize(
    ("method", "route", "status", "labels"),
    [
        ("GET", "/api/v1/workloads/{namespace}/{name}", 200,
         ("GET", "/api/v1/workloads/{namespace}/{name}", "200")),
        ("DELETE", "/api/v1/queues/{name}", 403, ("DELETE", "/api/v1/queues/{name}", "403")),
        ("XKCDPOST", "/api/v1/workloads", 405, ("other", "/api/v1/workloads", "405")),
        ("get", None, 404, ("other", "unmatched", "404")),
        ("PATCH", None, 404, ("PATCH", "unmatched", "404")),
    ],
    ids=["known-route", "delete", "made-up-method", "lower-case-method", "no-route"],
)  # fmt: skip
def test_request_labels_keep_only_values_the_server_chose(
    method: str, route: str | None, status: int, labels: tuple[str, str, str]
) -> None:
    assert request_labels(method, route, status) == labels


def test_random_methods_and_paths_add_at_most_a_few_series(harness: ServiceHarness) -> None:
    client = harness.client("team-a")
    client.get("/api/v1/whoami")
    scraper = harness.client("metrics")
    before = _series(scraper.get("/metrics").text)
    rng = random.Random(26)
    for number in range(3000):
        method = _word(rng, string.ascii_uppercase) if number % 2 else "GET"
        path = rng.choice(
            [
                f"/api/v1/{_word(rng)}",
                f"/api/v1/{_word(rng)}/{_word(rng)}",
                f"/api/v1/workloads/{_word(rng)}/{_word(rng)}",
            ]
        )
        client.request(method, path)
    grown = _series(scraper.get("/metrics").text) - before
    # GET on no route (404); a made-up method on no route (404), and on the workload route (405);
    # GET of a workload that is not there (404)
    assert len(grown) <= 4, sorted(grown)
