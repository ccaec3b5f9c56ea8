"""The committed OpenAPI document is the one the app serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service.app.openapi import openapi_document

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
