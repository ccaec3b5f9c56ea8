"""Schemathesis against the committed OpenAPI document: generated requests never get a 5xx, and every 4xx is
problem+json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

DOC = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json").read_text())
schema = schemathesis.openapi.from_dict(DOC)


def _check(client: Any, case: Any) -> None:
    kwargs = case.as_transport_kwargs(base_url="http://testserver.local")
    kwargs.pop("cookies", None)
    response = client.request(**kwargs)
    assert response.status_code < 500, (kwargs, response.text)
    if 400 <= response.status_code < 500:
        assert response.headers["content-type"].startswith("application/problem+json"), response.text
        assert response.json()["detail"]


@schema.include(path_regex="^/v1/novelty").parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_novelty_never_5xx(client: Any, case: Any) -> None:
    _check(client, case)


@schema.include(path_regex="^/v1/(assessments|batches)", method="POST").parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_assessments_never_5xx(client: Any, case: Any) -> None:
    _check(client, case)
