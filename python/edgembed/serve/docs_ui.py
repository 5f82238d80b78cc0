"""Swagger UI at ``/docs`` and ReDoc at ``/redoc``, from files installed with the package.

FastAPI's own pages load their JavaScript and CSS from a CDN, which a server on a closed network
(or a browser without internet) cannot reach. The same pages are served here with the assets of
the ``fastapi-offline`` package (Swagger UI's bundle and CSS, ReDoc's standalone bundle; part of
the ``serve`` extra) under ``/docs/assets/``, and ReDoc without Google Fonts, so opening the
docs makes no request to any other host (ReDoc's bundle fetches its makers' logo from their
CDN; that one URL is pointed at the local favicon when the bundle is served). Like
``/openapi.json`` they need no API key; the Swagger page's "Authorize" button takes one for
trying requests.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from ..errors import BackendUnavailable
from .auth import PUBLIC_PREFIX

__all__ = ["ASSETS", "DOCS_ROUTES", "PUBLIC_PREFIX", "assets_dir", "install_docs"]

DOCS_ROUTES = ("/docs", "/redoc", "/docs/assets/{name}")
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}

_REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"


def assets_dir() -> Path:
    """The folder holding the Swagger UI and ReDoc files (the ``fastapi-offline`` package's)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise BackendUnavailable("the API docs pages need the fastapi-offline package: "
                                 "pip install 'edgembed[serve]'")
    return Path(spec.origin).parent / "static"


def install_docs(app: FastAPI) -> None:
    """Add ``/docs``, ``/redoc`` and their assets to ``app``."""
    folder = assets_dir()
    loaded: dict[str, bytes] = {}

    def prefix(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        root = prefix(request)
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json", title=f"{app.title} — Swagger UI",
            swagger_js_url=f"{root}{PUBLIC_PREFIX}swagger-ui-bundle.js",
            swagger_css_url=f"{root}{PUBLIC_PREFIX}swagger-ui.css",
            swagger_favicon_url=f"{root}{PUBLIC_PREFIX}favicon.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = prefix(request)
        return get_redoc_html(
            openapi_url=f"{root}/openapi.json", title=f"{app.title} — ReDoc",
            redoc_js_url=f"{root}{PUBLIC_PREFIX}redoc.standalone.js",
            redoc_favicon_url=f"{root}{PUBLIC_PREFIX}favicon.png", with_google_fonts=False,
        )

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        media = ASSETS.get(name)
        if media is None:
            return Response(b'{"error": "no such file", "error_type": "validation"}',
                            status_code=404, media_type="application/json")
        if name not in loaded:
            data = (folder / name).read_bytes()
            if name == "redoc.standalone.js":
                data = data.replace(_REDOC_LOGO, f"{PUBLIC_PREFIX}favicon.png".encode())
            loaded[name] = data
        return Response(loaded[name], media_type=media,
                        headers={"Cache-Control": "public, max-age=86400"})
