"""The API's documentation page (``/schema``): Redoc vendored under ``docs_static/`` and served from this origin,
each script pinned by its sha384 (Subresource Integrity), under a Content-Security-Policy that lets the page load
nothing from anywhere else. The OpenAPI document itself is ``/schema/openapi.json`` (and ``.yaml``)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from litestar import Request
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin, RedocRenderPlugin, YamlRenderPlugin
from litestar.static_files import create_static_files_router
from litestar.types import ControllerRouterHandler

__all__ = ["ASSETS", "DOCS_CSP", "STATIC", "docs_assets", "integrity", "render_plugins"]

STATIC = Path(__file__).with_name("docs_static")
ASSET_PATH = "/schema/assets"
# redoc@2.5.0 from npm, unchanged (docs_static/README.md); a changed file must change its hash here
ASSETS: dict[str, str] = {
    "redoc.standalone.js": "sha384-4vOjrBu7SuDWXcAw1qFznVLA/sKL+0l4nn+J1HY8w7cpa6twQEYuh4b0Cwuo7CyX",
    "redoc-init.js": "sha384-HgZOSzCL3ycUVkZWfel2uTfmB7Q3Odune+pdIb5hjHTICcRvaciXhKH8lCrcfvtU",
}
# Redoc styles itself with inline <style> (styled-components) and runs its search in a blob: worker; scripts only
# from here and pinned, no fonts or images from elsewhere, nothing may frame the page
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def integrity(name: str) -> str:
    """The sha384 Subresource Integrity value of a vendored file, computed from its bytes."""
    return "sha384-" + base64.b64encode(hashlib.sha384((STATIC / name).read_bytes()).digest()).decode()


class PinnedRedoc(RedocRenderPlugin):
    """Redoc from this origin, each script with its pinned integrity; the spec is fetched, not inlined."""

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        title = str(openapi_schema["info"]["title"])
        scripts = "".join(
            f'<script src="{ASSET_PATH}/{name}" integrity="{ASSETS[name]}" crossorigin="anonymous" defer></script>'
            for name in ("redoc.standalone.js", "redoc-init.js")
        )
        return (
            "<!DOCTYPE html><html><head>"
            f'<title>{title}</title><meta charset="utf-8"/>'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"{scripts}</head><body><div id='redoc-container'></div></body></html>"
        ).encode()


def render_plugins() -> list[OpenAPIRenderPlugin]:
    """What ``/schema`` serves: the pinned Redoc (its root and ``/redoc``), the document as JSON and YAML."""
    return [PinnedRedoc(path=["/", "/redoc"]), JsonRenderPlugin(), YamlRenderPlugin()]


def docs_assets() -> ControllerRouterHandler:
    """The vendored files, without a key like the rest of ``/schema``."""
    return create_static_files_router(
        path=ASSET_PATH, directories=[STATIC], include_in_schema=False, opt={"public": True}
    )
