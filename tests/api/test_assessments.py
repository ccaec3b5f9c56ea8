"""Assessments end to end: the API accepts and validates, a real ARQ worker computes, the API reads back."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings, get_settings
from tests.conftest import TEST_TENANT
from tests.records_support import store_of, stored_ids
from tests.worker_support import StaticIndexes, run_worker_burst

SOURCE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."
GOOD = [
    "Endowed with the seven treasures, trained in the three trainings, the great heroes wander, having given up fear "
    "and dread.",
    "Possessed of the seven gems, trained in the three trainings, great heroes roam about, fear and terror abandoned.",
    "Accomplished in seven jewels, trained in the threefold training, the mighty heroes wander, free of fear "
    "and dread.",
]


def _assessment(cands: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "source": {"text": SOURCE, "lang": "pli", "ref": "sn22.76:7"},
        "candidates": [{"id": f"c{i}", "text": t, "model": f"vendor/model-{i}"} for i, t in enumerate(cands)],
        **extra,
    }


def _keys() -> int:
    return len(stored_ids(store_of(), TEST_TENANT))


def test_assessment_lifecycle(client: Any, test_settings: Settings) -> None:
    r = client.post("/v1/assessments", json=_assessment([*GOOD, SOURCE]))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "pending"
    assert body["source"]["novelty"]["status"] == "value"
    assert body["source"]["novelty"]["passage_id"] == "sn22.76:7"
    assert r.headers["location"] == f"/v1/assessments/{body['id']}"
    assert client.get(f"/v1/assessments/{body['id']}").json()["status"] == "pending"

    worker = run_worker_burst(test_settings)
    assert worker.jobs_failed == 0

    done = client.get(f"/v1/assessments/{body['id']}").json()
    assert done["status"] == "done", done
    by_id = {c["id"]: c for c in done["candidates"]}
    for cid in ("c0", "c1", "c2"):
        c = by_id[cid]
        assert c["signals"]["peer_centroid_distance"]["status"] == "value"
        assert c["signals"]["peer_chrf_risk"]["status"] == "value"
        # the multilingual source distance is opt-in (it costs an encoder pass per candidate)
        assert c["signals"]["source_distance"]["status"] == "skipped"
        assert isinstance(c["risk"]["score"], float) and c["risk"]["rule"]
        assert c["budget"]["tier"] in {"top_1", "top_5", "top_10", "top_20", "rest"}
        assert 0 <= c["budget"]["percentile"] <= 100
    copy = by_id["c3"]
    assert any(f["rule"].startswith("source_copy") for f in copy["flags"]), copy["flags"]
    assert copy["risk"]["forced_by_flag"]
    assert copy["budget"] == {**copy["budget"], "percentile": 100.0, "tier": "top_1"}
    # LLM checks were asked for by default but no provider is configured here: visible skip, never a number
    assert by_id["c0"]["signals"]["gemba_mean_risk"] == {"status": "skipped", "reason": "no LLM provider configured"}
    sig = done["signature"]
    assert sig["index"] and sig["embedding"]["peer"]["model_id"] and sig["risk_models"]
    assert "source" not in sig["embedding"]
    # the finished assessment reaches the review queue, the hard-flagged copy first
    page = client.get("/v1/review/queue", params={"scope": "all", "status": "any", "limit": 200}).json()
    mine = [i for i in page["items"] if i["assessment_id"] == body["id"]]
    assert {i["candidate_id"] for i in mine} == {"c0", "c1", "c2", "c3"}
    assert next(i for i in mine if i["candidate_id"] == "c3")["forced"] is True
    claim = client.post("/v1/review/claims", json={"n": 1})
    assert claim.status_code == 201 and len(claim.json()["items"]) == 1


def test_source_distance_on_request(client: Any, test_settings: Settings) -> None:
    r = client.post("/v1/assessments", json=_assessment(GOOD, checks=["source_distance", "peer_distance"]))
    aid = r.json()["id"]
    run_worker_burst(test_settings)
    done = client.get(f"/v1/assessments/{aid}").json()
    assert done["checks"] == ["source_distance", "peer_distance"]
    for c in done["candidates"]:
        assert 0 <= c["signals"]["source_distance"]["value"] <= 2
        assert "critical_score" not in c["signals"]  # not asked for
    assert done["signature"]["embedding"]["source"]["model_id"].startswith("multilingual-e5-small")


def test_single_candidate_skips_peer_signals(client: Any, test_settings: Settings) -> None:
    r = client.post("/v1/assessments", json=_assessment(GOOD[:1]))
    aid = r.json()["id"]
    run_worker_burst(test_settings)
    c = client.get(f"/v1/assessments/{aid}").json()["candidates"][0]
    assert c["signals"]["peer_centroid_distance"]["status"] == "skipped"
    assert "candidate" in c["signals"]["peer_centroid_distance"]["reason"]
    assert c["risk"]["score"] is not None
    # the default model's model for one candidate scored (issue 34: a model per candidate-count band), with the
    # source-side signals it reads, not a fallback
    from service.core.risk import RiskRegistry

    reg = RiskRegistry.load(test_settings.risk.models_dir)
    one = reg.for_candidates(test_settings.risk.model, 1)
    assert one.name != reg.get(test_settings.risk.model).name
    assert c["risk"]["rule"] == one.rule and not c["risk"]["fallback_from"]


def test_idempotency_key(client: Any) -> None:
    key = uuid.uuid4().hex
    first = client.post("/v1/assessments", json=_assessment(GOOD), headers={"Idempotency-Key": key})
    again = client.post("/v1/assessments", json=_assessment(GOOD), headers={"Idempotency-Key": key})
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    other = client.post("/v1/assessments", json=_assessment(GOOD[:2]), headers={"Idempotency-Key": key})
    assert other.status_code == 409
    assert other.json()["assessment_id"] == first.json()["id"]


@pytest.mark.parametrize(
    ("payload", "status", "needle"),
    [
        (_assessment([]), 422, "candidates is empty"),
        ({**_assessment(GOOD), "candidates": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, 422, "duplicate"),
        (_assessment(["one"] * 33), 422, "limit"),
        (_assessment(["fine", "  "]), 422, "candidates[1].text is empty"),
        (_assessment(["x" * (get_settings().limits.max_text_chars + 1)]), 422, "limit"),
        ({**_assessment(GOOD), "source": {"text": "", "lang": "pli"}}, 422, "source.text is empty"),
        (_assessment(GOOD, checks=["peer_distance", "telepathy"]), 422, "telepathy"),
        (_assessment(GOOD, callback_url="ftp://example.org/x"), 422, "callback_url"),
        (_assessment(GOOD, review_budget=1.5), 422, "review_budget"),
        (_assessment(GOOD, callback_events=["cheap"]), 422, "callback_events needs a callback_url"),
        (_assessment(GOOD, callback_url="https://example.org/x", callback_events=[]), 422, "callback_events"),
        (_assessment(GOOD, callback_url="https://example.org/x", callback_events=["early"]), 400, "callback_events"),
        ({**_assessment(GOOD), "source": {"text": SOURCE, "lang": "??"}}, 422, "ISO 639"),
        ({**_assessment(GOOD), "extra": 1}, 400, "extra"),
        ({"source": {"text": SOURCE}, "candidates": "c0"}, 400, ""),
        ({"candidates": []}, 400, "source"),
    ],
)
def test_bad_input_writes_nothing(client: Any, payload: dict[str, Any], status: int, needle: str) -> None:
    before = _keys()
    r = client.post("/v1/assessments", json=payload)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert needle in r.json()["detail"]
    assert _keys() == before


def test_unknown_assessment_is_404(client: Any) -> None:
    r = client.get("/v1/assessments/doesnotexist")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("application/problem+json")


def test_unreachable_callback_is_recorded(client: Any, test_settings: Settings) -> None:
    r = client.post("/v1/assessments", json=_assessment(GOOD, callback_url="http://127.0.0.1:1/hook"))
    aid = r.json()["id"]
    run_worker_burst(test_settings)
    body = client.get(f"/v1/assessments/{aid}").json()
    assert body["status"] == "done"
    assert body["callback"]["status"] == "failed"
    assert body["callback"]["attempts"] == test_settings.jobs.callback_max_tries
    assert "Connect" in body["callback"]["last_error"]


def test_batches_json_and_ndjson(client: Any, test_settings: Settings, sn12_index: NoveltyIndex) -> None:
    r = client.post("/v1/batches", json={"items": [_assessment(GOOD), _assessment(GOOD[:2])]})
    assert r.status_code == 202, r.text
    bid = r.json()["id"]
    progress = client.get(f"/v1/batches/{bid}").json()
    assert progress["total"] == 2 and progress["counts"]["pending"] == 2
    # a batch item's novelty is the worker's job (the API answered without computing it)
    first = client.get(f"/v1/assessments/{r.json()['assessment_ids'][0]}").json()
    assert first["source"]["novelty"] == {"status": "pending"}
    run_worker_burst(test_settings, ctx={"indexes": StaticIndexes({"pli": sn12_index})})
    progress = client.get(f"/v1/batches/{bid}").json()
    assert progress["status"] == "done" and progress["counts"]["done"] == 2
    lines = client.get(f"/v1/batches/{bid}/results").text.strip().splitlines()
    assert len(lines) == 2
    row = json.loads(lines[0])
    single = client.post("/v1/assessments", json=_assessment(GOOD)).json()  # novelty computed in the request
    assert row["source"]["novelty"] == single["source"]["novelty"] and row["source"]["novelty"]["status"] == "value"
    assert row["signature"]["index"] == single["signature"]["index"] == sn12_index.signature_id
    assert row["candidates"][0]["signals"]["novelty"]["value"] == row["source"]["novelty"]["index"]

    good = json.dumps(_assessment(GOOD))
    before = _keys()
    bad = client.post(
        "/v1/batches/ndjson",
        content=f'{good}\n{{"source": 1}}\n'.encode(),
        headers={"content-type": "application/x-ndjson"},
    )
    assert bad.status_code == 422 and "line 2" in bad.json()["detail"]
    invalid_item = client.post("/v1/batches", json={"items": [_assessment(GOOD), _assessment([])]})
    assert invalid_item.status_code == 422 and "items[1]" in invalid_item.json()["detail"]
    assert _keys() == before
    ok = client.post(
        "/v1/batches/ndjson", content=f"{good}\n\n{good}\n".encode(), headers={"content-type": "application/x-ndjson"}
    )
    assert ok.status_code == 202 and ok.json()["total"] == 2
