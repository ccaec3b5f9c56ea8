"""Schemathesis against the committed OpenAPI document and a real server (uvicorn on a free port, its own queue, a
tenant of its own): every operation, schemathesis' default checks plus ``ignored_auth`` (requests without a key,
or with a made-up one, must be refused wherever the document says a key is needed), zero failures."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.config._checks import POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES
from schemathesis.generation.meta import ParameterLocation
from schemathesis.specs.openapi.checks import ignored_auth

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from tests.conftest import issue_test_key
from tests.support.evaluation import free_port
from tests.worker_support import live_worker_heartbeat

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(60)

DOC = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json").read_text())
# A schema-valid request may still be refused with a 422: the API answers semantic problems (an index not loaded
# for that language, a batch over its limit, too few labels to fit a model) with 422, malformed ones with 400.
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": [*POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES, "422"],
            }
        }
    }
)
schema = schemathesis.openapi.from_dict(DOC, config=CONFIG)


@pytest.fixture(scope="module")
def live_api(sn12_index: NoveltyIndex, test_settings: Settings) -> Iterator[tuple[str, str]]:
    settings = replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API did not start"
        time.sleep(0.05)
    # a live worker's heartbeat on this queue, so /health/workers answers as it does in service (200)
    with live_worker_heartbeat(settings, sn12_index):
        try:
            yield f"http://127.0.0.1:{port}", issue_test_key(settings, f"test-fuzz-{uuid.uuid4().hex[:8]}", ("admin",))
        finally:
            server.should_exit = True
            thread.join(timeout=10)


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation(case: Any, live_api: tuple[str, str]) -> None:
    url, token = live_api
    # the tenant's key on every request, except where schemathesis made the headers invalid on purpose: replacing
    # its broken Authorization with a valid one would turn a negative case into a valid request that rightly passes
    negative_headers = case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER)
    headers = None if negative_headers else {"Authorization": f"Bearer {token}"}
    response = case.call(base_url=url, headers=headers)
    assert response.status_code < 500, response.text
    case.validate_response(response, additional_checks=[ignored_auth])
