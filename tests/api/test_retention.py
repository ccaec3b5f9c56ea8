"""A tenant removes its texts: DELETE of an assessment or a batch (204; another tenant's is a 404 and stays), a
streaming NDJSON export of its results for a time range; the store's purge deletes what is past retention in batches,
on both engines."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from service.platform.settings import Settings
from service.state.durable import DurableStore
from service.state.durable.records_store import RecordStore
from service.state.store import Store
from tests.api.test_assessments import GOOD, _assessment
from tests.conftest import TEST_TENANT, issue_test_key
from tests.worker_support import run_worker_burst


def _other_tenant(client: Any, settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_test_key(settings, tenant=f'{TEST_TENANT}-b')}"}


def test_an_assessment_is_deleted_by_its_tenant_only(client: Any, test_settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_assessment(GOOD[:2])).json()["id"]
    other = _other_tenant(client, test_settings)
    r = client.delete(f"/v1/assessments/{aid}", headers=other)
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")
    assert client.get(f"/v1/assessments/{aid}").status_code == 200  # still there for its tenant
    r = client.delete(f"/v1/assessments/{aid}")
    assert r.status_code == 204 and r.content == b""
    assert client.get(f"/v1/assessments/{aid}").status_code == 404
    assert client.delete(f"/v1/assessments/{aid}").status_code == 404
    run_worker_burst(test_settings)  # its queued job finds nothing and writes nothing back
    assert client.get(f"/v1/assessments/{aid}").status_code == 404


def test_a_deleted_idempotency_key_creates_anew(client: Any) -> None:
    headers = {"Idempotency-Key": f"del-{time.time()}"}
    first = client.post("/v1/assessments", json=_assessment(GOOD[:2]), headers=headers).json()["id"]
    assert client.delete(f"/v1/assessments/{first}").status_code == 204
    again = client.post("/v1/assessments", json=_assessment(GOOD[:2]), headers=headers)
    assert again.status_code == 202 and again.json()["id"] != first  # the key went with the assessment


def test_a_batch_is_deleted_with_its_assessments(client: Any, test_settings: Settings) -> None:
    b = client.post("/v1/batches", json={"items": [_assessment(GOOD[:2]), _assessment(GOOD[1:3])]})
    assert b.status_code == 202, b.text
    bid = b.json()["id"]
    lines = client.get(f"/v1/batches/{bid}/results").text.splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    assert client.delete(f"/v1/batches/{bid}", headers=_other_tenant(client, test_settings)).status_code == 404
    assert client.get(f"/v1/batches/{bid}").status_code == 200
    assert client.delete(f"/v1/batches/{bid}").status_code == 204
    assert client.get(f"/v1/batches/{bid}").status_code == 404
    assert all(client.get(f"/v1/assessments/{aid}").status_code == 404 for aid in ids)


def test_the_export_streams_a_tenants_results_in_a_time_range(client: Any, test_settings: Settings) -> None:
    start = time.time()
    first = client.post("/v1/assessments", json=_assessment(GOOD[:2])).json()["id"]
    time.sleep(0.05)
    middle = time.time()
    second = client.post("/v1/assessments", json=_assessment(GOOD[1:3])).json()["id"]
    run_worker_burst(test_settings)
    r = client.get("/v1/exports/assessments", params={"since": start})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert [row["id"] for row in rows] == [first, second]  # oldest first
    assert all(row["status"] == "done" and row["candidates"][0]["risk"] is not None for row in rows)
    later = client.get("/v1/exports/assessments", params={"since": middle}).text.splitlines()
    assert [json.loads(line)["id"] for line in later] == [second]
    until = client.get("/v1/exports/assessments", params={"since": start, "until": middle}).text.splitlines()
    assert [json.loads(line)["id"] for line in until] == [first]
    theirs = client.get(
        "/v1/exports/assessments", params={"since": start}, headers=_other_tenant(client, test_settings)
    )
    assert theirs.status_code == 200 and theirs.text == ""  # another tenant's export holds none of them
    bad = client.get("/v1/exports/assessments", params={"since": middle, "until": start})
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")


def test_the_purge_deletes_records_past_retention_in_batches(durable_store: DurableStore) -> None:
    from tests.core.test_store import _meta

    store = Store(None, retention_seconds=600, db=durable_store)
    tenant = f"test-purge-{uuid.uuid4().hex[:8]}"  # the session's PostgreSQL database holds other tests' rows
    old = [_meta() for _ in range(5)]
    for m in old:
        m.created_at = time.time() - 10_000
    fresh = _meta()
    for m in (*old, fresh):
        m.tenant = tenant
    asyncio.run(store.create_many([*old, fresh]))
    asyncio.run(store.record_scores(fresh.tenant, fresh.id, {"m@1": [1.0]}))
    gone = RecordStore(durable_store).purge(time.time() - 5_000, chunk=2)  # three rounds of at most two rows
    assert sorted(gone.assessments[tenant]) == sorted(m.id for m in old)
    states = asyncio.run(store.get_many(fresh.tenant, [fresh.id, *(m.id for m in old)]))
    assert states[0] is not None and states[1:] == [None] * 5
    assert asyncio.run(store.seen_counts(fresh.tenant, "m@1", [1.0])) == (1, [1])  # the pool is recent: kept
    RecordStore(durable_store).purge(time.time() + 1)
    assert asyncio.run(store.seen_counts(fresh.tenant, "m@1", [1.0])) == (0, [0])


def test_quotas_of_stored_assessments_and_queued_candidates_are_429s(sn12_index: Any, test_settings: Settings) -> None:
    """Past a quota a submission is a 429 problem+json naming it, and writes nothing; a deletion makes room."""
    from dataclasses import replace

    from litestar.testing import TestClient

    from service.app import create_app
    from service.app.resources import Resources
    from tests.conftest import keyed

    tenant = f"{TEST_TENANT}-quota"
    for limits, quota in (
        (replace(test_settings.limits, max_stored_assessments=2), "TRISK_MAX_STORED_ASSESSMENTS"),
        (replace(test_settings.limits, max_queued_candidates=5), "TRISK_MAX_QUEUED_CANDIDATES"),
    ):
        settings = replace(test_settings, limits=limits)
        app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
        with TestClient(app=app) as tc:
            api = keyed(tc, issue_test_key(settings, tenant=f"{tenant}-{quota[-10:].lower()}"))
            ids = [api.post("/v1/assessments", json=_assessment(GOOD[:2])).json()["id"] for _ in range(2)]
            over = api.post("/v1/assessments", json=_assessment(GOOD[:2]))
            assert over.status_code == 429 and over.headers["content-type"].startswith("application/problem+json")
            assert over.json()["quota"] == quota and quota in over.json()["detail"], over.json()
            assert int(over.headers["retry-after"]) >= 1
            batch = api.post("/v1/batches", json={"items": [_assessment(GOOD[:2])]})
            assert batch.status_code == 429 and batch.json()["quota"] == quota  # a batch counts the same
            assert api.delete(f"/v1/assessments/{ids[0]}").status_code == 204  # room again (either quota)
            assert api.post("/v1/assessments", json=_assessment(GOOD[:2])).status_code == 202
