"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, with every asset they
load served by the app itself.

FastAPI's own pages load Swagger UI and ReDoc from cdn.jsdelivr.net, ReDoc's fonts from Google
and the favicon from fastapi.tiangolo.com: a browser opening a control plane's docs would run
whatever those hosts served that day, and an offline cluster gets a blank page. Here the
JavaScript, CSS and favicon come from the fastapi-offline package (Swagger UI 5 and ReDoc 2,
MIT and Apache 2.0, pinned with its hash in requirements.lock), mounted under
:data:`ASSET_PREFIX`: FastAPI's "self-hosting JavaScript and CSS for docs" recipe. Swagger
UI's validator badge, which sends the schema's URL to validator.swagger.io, is turned off.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

#: swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js and favicon.png.
ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSET_PREFIX = "/static/vendor/api-docs"
SWAGGER_PARAMETERS = {"validatorUrl": None}


def install(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets on ``app``, made with ``docs_url=None`` and
    ``redoc_url=None``. Install it before any mount that would cover :data:`ASSET_PREFIX`."""
    openapi_url = app.openapi_url or "/openapi.json"
    favicon = f"{ASSET_PREFIX}/favicon.png"
    app.mount(ASSET_PREFIX, StaticFiles(directory=ASSETS), name="api-docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSET_PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSET_PREFIX}/swagger-ui.css",
            swagger_favicon_url=favicon,
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSET_PREFIX}/redoc.standalone.js",
            redoc_favicon_url=favicon,
            with_google_fonts=False,
        )
