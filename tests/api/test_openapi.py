"""The committed OpenAPI document is the one the app serves."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from service.app.factory import openapi_document

COMMITTED = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_committed_openapi_matches_the_app() -> None:
    assert COMMITTED.exists(), "run: trisk openapi --out openapi/openapi.json"
    assert json.loads(COMMITTED.read_text()) == json.loads(openapi_document()), (
        "openapi/openapi.json is stale; regenerate with: trisk openapi --out openapi/openapi.json"
    )


def test_served_document_matches(client: Any) -> None:
    served = client.get("/schema/openapi.json").json()
    assert served["paths"].keys() == json.loads(COMMITTED.read_text())["paths"].keys()


def test_every_route_has_operation_id_and_summary() -> None:
    doc = json.loads(COMMITTED.read_text())
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op.get("operationId"), f"{method} {path}"
            assert op.get("summary"), f"{method} {path}"


def test_the_docs_page_loads_only_pinned_scripts_from_this_origin(client: Any) -> None:
    """The finding: /schema loaded unpinned Redoc and Swagger UI from CDNs, without integrity hashes, and under no CSP.
    Now Redoc is vendored, each script pinned by its sha384, and the page may load nothing from elsewhere."""
    import re

    from service.app.docs import ASSETS, DOCS_CSP, integrity

    for path in ("/schema", "/schema/redoc"):
        page = client.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == DOCS_CSP
        assert "https://" not in page.text and "http://" not in page.text  # nothing from another origin
        scripts = re.findall(r'<script src="([^"]+)" integrity="([^"]+)"', page.text)
        assert [(src.rsplit("/", 1)[1], sri) for src, sri in scripts] == list(ASSETS.items())
        assert "<script>" not in page.text and "<script type" not in page.text  # no inline script to allow
    for name, pinned in ASSETS.items():
        asset = client.get(f"/schema/assets/{name}")  # no key, like the rest of the docs
        assert asset.status_code == 200 and integrity(name) == pinned
        assert hashlib.sha384(asset.content).digest() == base64.b64decode(pinned.removeprefix("sha384-"))
    for gone in ("/schema/swagger", "/schema/rapidoc", "/schema/elements"):
        assert client.get(gone).status_code == 404
    assert "script-src" not in client.get("/v1/novelty/sn22.76:7").headers["content-security-policy"]
