"""Fixtures for the workbench: a tenant of its own with the AN 4.1 example assessed through the API by a real burst
worker (one candidate says "three" where the Pali says four: a real critical.number flag), keys per role."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from service.platform.settings import Settings
from service.review import item_id_of
from service.state.durable import open_store
from service.state.durable.access import issue_key
from tests.worker_support import run_worker_burst

EXAMPLE = json.loads((Path(__file__).resolve().parents[2] / "openapi/examples/assessment-an4.1.json").read_text())


@dataclass
class Seeded:
    """A tenant's assessed example and batch, and a key per role (token, key id)."""

    settings: Settings
    tenant: str
    assessment_id: str
    batch_id: str
    batch_assessment_id: str
    keys: dict[str, tuple[str, str]]

    def item(self, candidate: str) -> str:
        return item_id_of(self.assessment_id, candidate)

    def key(self, role: str) -> str:
        return self.keys[role][0]


def make_settings(base: Settings, **api: Any) -> Settings:
    """The tests' settings with a queue of this module's own and no novelty index (novelty reads skipped)."""
    return replace(
        base,
        redis=replace(base.redis, queue_name=f"trisk:test:{uuid.uuid4().hex[:8]}:wb"),
        index=replace(base.index, path="/nonexistent/no-index.trisk"),
        api=replace(base.api, **api),
    )


def seed(settings: Settings, app_client: Any) -> Seeded:
    """The example once as an assessment and once as a one-item batch, assessed by a real burst worker."""
    tenant = f"test-wb-{uuid.uuid4().hex[:8]}"
    store = open_store(settings.durable)
    keys = {}
    for role, scopes in {"admin": ["admin"], "ana": ["review"], "ben": ["review"], "reader": ["read"]}.items():
        token, record = issue_key(store, tenant, role.capitalize(), scopes)
        keys[role] = (token, record.key_id)
    auth = {"Authorization": f"Bearer {keys['admin'][0]}"}
    aid = app_client.post("/v1/assessments", json=EXAMPLE, headers=auth).json()["id"]
    batch = app_client.post("/v1/batches", json={"items": [EXAMPLE]}, headers=auth).json()
    run_worker_burst(settings)
    assert app_client.get(f"/v1/assessments/{aid}", headers=auth).json()["status"] == "done"
    return Seeded(settings, tenant, aid, batch["id"], batch["assessment_ids"][0], keys)


def cleanup(settings: Settings, tenant: str, key_ids: list[str]) -> None:
    r = redis_sync.Redis.from_url(settings.redis.url)
    for pattern in (f"trisk:t:{tenant}:*", *(f"trisk:ws:key:{k}" for k in key_ids)):
        for key in r.scan_iter(match=pattern, count=1000):
            r.delete(key)
    r.close()


@pytest.fixture(scope="module")
def wb_settings(test_settings: Settings) -> Settings:
    return make_settings(test_settings)


def make_app(settings: Settings) -> Any:
    """A fresh app: its lifespan opens (and closes) its own connections, so an app serves one client's loop."""
    from service.app import create_app
    from service.app.resources import Resources

    return create_app(settings, resources=Resources(settings=settings))


@pytest.fixture()
def app(wb_settings: Settings) -> Any:
    return make_app(wb_settings)


@pytest.fixture(scope="module")
def seeded(wb_settings: Settings) -> Iterator[Seeded]:
    from litestar.testing import TestClient

    with TestClient(app=make_app(wb_settings)) as tc:
        s = seed(wb_settings, tc)
    yield s
    cleanup(wb_settings, s.tenant, [k for _, k in s.keys.values()])


def form_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]*)"', html)
    assert found, "no form token in the page"
    return found.group(1)


def sign_in(tc: Any, key: str) -> Any:
    """Sign a test client in through the form; returns the answer to the form's POST."""
    page = tc.get("/ui/signin")
    return tc.post("/ui/signin", data={"key": key, "csrf": form_token(page.text), "next": ""}, follow_redirects=False)
