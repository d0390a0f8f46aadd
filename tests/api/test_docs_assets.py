"""/docs and /redoc load nothing from another host: every script, stylesheet and icon they name
is served by the app itself (issue 26: Swagger UI came from a CDN)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.docs import ASSET_PREFIX
from gpufleet.testing.service import ServiceHarness, make_harness

#: src= and href= attributes, and the URLs Swagger UI's and ReDoc's start-up scripts are given.
REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*['"]([^'"]+)['"]""")
ABSOLUTE = re.compile(r"(?:https?:)?//", re.IGNORECASE)
CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    harness: ServiceHarness = make_harness(tmp_path)
    return harness.client("nobody")


def references(html: str) -> list[str]:
    return [first or second for first, second in REFERENCE.findall(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_name_only_the_apps_own_urls(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    html = response.text
    found = references(html)
    assert any(url.startswith(ASSET_PREFIX) and url.endswith(".js") for url in found), found
    assert [url for url in found if ABSOLUTE.match(url)] == []
    assert not ABSOLUTE.search(html.replace("http://www.w3.org", "")), "a URL of another host"
    assert "fonts.googleapis.com" not in html


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_every_asset_a_docs_page_names_is_served(client: TestClient, page: str) -> None:
    assets = [url for url in references(client.get(page).text) if url.startswith(ASSET_PREFIX)]
    assert assets
    for url in assets:
        response = client.get(url)
        assert response.status_code == 200, url
        assert len(response.content) > 1000, url
        kind = CONTENT_TYPES[Path(url).suffix]
        assert kind in response.headers["content-type"], (url, response.headers["content-type"])


def test_swagger_ui_sends_the_schema_to_no_validator(client: TestClient) -> None:
    assert '"validatorUrl": null' in client.get("/docs").text


def test_the_schema_the_pages_load_is_served(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        assert "/openapi.json" in client.get(page).text
    assert client.get("/openapi.json").json()["info"]["title"] == "gpufleet"


@pytest.mark.parametrize(
    ("html", "absolute"),
    [
        pytest.param('<script src="https://cdn.example/x.js">', True, id="https"),
        pytest.param('<link href="//cdn.example/x.css">', True, id="scheme-relative"),
        pytest.param("url: 'http://elsewhere/openapi.json'", True, id="spec-url"),
        pytest.param(f'<script src="{ASSET_PREFIX}/x.js">', False, id="own"),
    ],
)
def test_the_check_sees_another_hosts_url(html: str, absolute: bool) -> None:
    assert any(ABSOLUTE.match(url) for url in references(html)) == absolute
