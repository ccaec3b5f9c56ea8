"""Review and calibration endpoints end to end: claims, verdicts kept as opinions, durability, 4xx, fits, activation."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from redis.asyncio import Redis

from service.core.types import Flag
from service.platform.settings import DurableSettings, get_settings
from service.review import MAX_OFFSET
from service.state.durable import DurableStore, database_url, make_engine, open_store
from service.state.durable.access import issue_key
from service.state.store import AssessmentState
from tests.review.conftest import make_client, make_settings
from tests.review.support import REDIS_URL, cleanup, iid, write_assessment


def seed(tenant: str, cands: list[dict[str, Any]], **kw: Any) -> AssessmentState:
    async def go() -> AssessmentState:
        r = Redis.from_url(REDIS_URL)
        try:
            return await write_assessment(r, tenant, cands, **kw)
        finally:
            await r.aclose()

    return asyncio.run(go())


def review_key(tenant: str, name: str, scopes: tuple[str, ...] = ("review",)) -> tuple[dict[str, str], str]:
    """Another key of a tenant (in the store the test's app reads): its request headers and the reviewer it names."""
    token, key = issue_key(open_store(get_settings().durable), tenant, name, list(scopes))
    return {"Authorization": f"Bearer {token}"}, f"{name} ({key.key_id})"


def reviewer_of_api(api: Any) -> str:
    """The reviewer the test client's own key names (what a claim by it answers)."""
    lease = api.post("/v1/review/claims", json={"n": 1, "tier": "no-such-tier"}).json()
    return str(lease["reviewer"])


def _store(db_path: Path) -> DurableStore:
    return DurableStore(make_engine(database_url(DurableSettings(db_path=str(db_path), database_url=""))))


CANDS = [
    {"id": "a", "model": "m1", "pct": 99.5, "signals": {"s": 3.0}, "text": "So I have heard."},
    {"id": "b", "model": "m2", "pct": 40.0, "signals": {"s": 0.0}, "text": "Thus have I heard."},
]


def test_claim_verdict_second_opinion_and_item_detail(api: Any, tenant: str) -> None:
    st = seed(tenant, CANDS, ref="sn12.1:1", gemba={"a": {"ja": 55.0, "jb": 80.0}})
    r = api.get("/v1/review/queue")
    assert r.status_code == 200, r.text
    assert [i["candidate_id"] for i in r.json()["items"]] == ["a"]
    assert api.get("/v1/review/queue", params={"scope": "all"}).json()["total"] == 2
    lease = api.post("/v1/review/claims", json={"n": 5})
    assert lease.status_code == 201, lease.text
    body = lease.json()
    assert [i["id"] for i in body["items"]] == [iid(st, "a")]
    item_id = body["items"][0]["id"]
    v1 = api.post(
        f"/v1/review/items/{item_id}/verdict",
        json={
            "label": "MAJOR",
            "note": "omits the agent",
            "error_category": "agency",
            "lease_id": body["lease_id"],
        },
    )
    assert v1.status_code == 201, v1.text
    bob, bob_name = review_key(tenant, "bob")
    v2 = api.post(f"/v1/review/items/{item_id}/verdict", json={"label": "MINOR"}, headers=bob)
    assert v2.status_code == 201 and v2.json()["opinion"] == 2
    verdicts = api.get(f"/v1/review/items/{item_id}/verdicts").json()
    me = reviewer_of_api(api)
    assert [(v["reviewer"], v["label"], v["opinion"]) for v in verdicts] == [(me, "MAJOR", 1), (bob_name, "MINOR", 2)]
    detail = api.get(f"/v1/review/items/{item_id}").json()
    assert detail["source"]["text"].startswith("Evaṃ") and detail["candidate"]["text"] == "So I have heard."
    assert [p["id"] for p in detail["peers"]] == ["b"]
    assert detail["judges"]["gemba_mean_risk"]["detail"]["scores"] == {"ja": 55.0, "jb": 80.0}
    assert detail["judge_scores"] == {"ja": 55.0, "jb": 80.0}
    assert detail["budget"]["tier"] == "top_1" and detail["risk"]["rule"] == "test-risk@1.0.0"
    assert detail["item"]["status"] == "reviewed" and len(detail["verdicts"]) == 2
    reviewed = api.get("/v1/review/queue", params={"status": "reviewed"}).json()
    assert [i["id"] for i in reviewed["items"]] == [item_id] and reviewed["items"][0]["status"] == "reviewed"
    assert api.delete(f"/v1/review/claims/{body['lease_id']}").json()["released"] == 0  # reviewed: not requeued
    assert api.get("/v1/review/queue").json()["total"] == 0


def test_renew_release_over_http(api: Any, tenant: str) -> None:
    seed(tenant, CANDS)
    lease = api.post("/v1/review/claims", json={"n": 1, "scope": "all"}).json()
    r = api.post(f"/v1/review/claims/{lease['lease_id']}/renew", json={"lease_seconds": 1200})
    assert r.status_code == 200 and r.json()["expires_at"] >= lease["expires_at"]
    assert r.json()["reviewer"] == lease["reviewer"] == reviewer_of_api(api)
    # a name the key does not carry is refused, not recorded
    assert api.post(f"/v1/review/claims/{lease['lease_id']}/renew", json={"reviewer": "eve"}).status_code == 403
    assert api.delete(f"/v1/review/claims/{lease['lease_id']}").json()["released"] == 1
    assert api.delete(f"/v1/review/claims/{lease['lease_id']}").status_code == 404


@pytest.mark.parametrize(
    ("path", "payload", "status"),
    [
        ("/v1/review/claims", {"n": 0}, 400),
        ("/v1/review/claims", {"n": -3}, 400),
        ("/v1/review/claims", {"reviewer": "", "n": 1}, 400),
        ("/v1/review/claims", {"reviewer": "alice", "n": 1}, 403),
        ("/v1/review/claims", {"n": 1, "colour": "red"}, 400),
        ("/v1/review/items/{item}/verdict", {"label": "GREAT"}, 400),
        ("/v1/review/items/{item}/verdict", {"reviewer": "alice", "label": "VALID"}, 403),
        ("/v1/review/items/nosuchitem-000000000000/verdict", {"label": "VALID"}, 404),
        ("/v1/calibration/fits", {"budget": 0}, 400),
        ("/v1/adjudications", {"reference": "x"}, 422),
    ],
)
def test_bad_input_is_4xx(api: Any, tenant: str, path: str, payload: dict[str, Any], status: int) -> None:
    st = seed(tenant, CANDS)
    r = api.post(path.replace("{item}", iid(st, "a")), json=payload)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


def test_the_verdicts_of_an_unknown_item_are_404(api: Any, tenant: str) -> None:
    """Issue 31: an item that never existed answered 200 [] (another tenant's likewise: tests/api/test_access.py)."""
    st = seed(tenant, CANDS)
    r = api.get("/v1/review/items/nosuchitem-000000000000/verdicts")
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert api.get(f"/v1/review/items/{iid(st, 'a')}/verdicts").json() == []  # a known item without verdicts


@pytest.mark.parametrize("offset", [-1, MAX_OFFSET + 1, 2**70], ids=["negative", "past-max", "beyond-int64"])
def test_a_listing_offset_out_of_range_is_400(api: Any, tenant: str, offset: int) -> None:
    # 2**70 was a 500 (the database driver cannot hold it); the deepest served page is MAX_OFFSET
    r = api.get("/v1/review/queue", params={"offset": offset})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert api.get("/v1/review/queue", params={"offset": MAX_OFFSET}).status_code == 200


def test_verdict_survives_restart_and_redis_loss(
    models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(models_dir)
    st = seed(tenant, CANDS)
    with make_client(settings, tenant, monkeypatch) as c1:
        assert c1.post(f"/v1/review/items/{iid(st, 'a')}/verdict", json={"label": "MAJOR"}).status_code == 201

    # Redis forgets everything (no persistence on this machine); the label store on disk does not
    async def wipe() -> None:
        r = Redis.from_url(REDIS_URL)
        await cleanup(r, tenant)
        await r.aclose()

    asyncio.run(wipe())
    fresh = _store(db_path)  # a new handle on the same file, as after a restart
    rows = fresh.verdicts(tenant)
    assert [(v.label, v.snapshot["signals"]["s"]["value"]) for v in rows] == [("MAJOR", 3.0)]
    with make_client(settings, tenant, monkeypatch) as c2:
        assert [v["label"] for v in c2.get(f"/v1/review/items/{iid(st, 'a')}/verdicts").json()] == ["MAJOR"]
        # the queue is in the store too: its items and their state outlive Redis
        queue = c2.get("/v1/review/queue", params={"status": "any", "scope": "all"}).json()["items"]
        assert [(i["candidate_id"], i["status"]) for i in queue] == [("a", "reviewed"), ("b", "open")]
        rep = c2.get("/v1/calibration/report").json()
        assert rep["labels"]["items"] == 1 and rep["labels"]["MAJOR"] == 1
        s = next(x for x in rep["scores"] if x["name"] == "signal:s")
        assert (
            s["auc"]["major_vs_nonmajor"]["value"] is None
            and "both classes" in s["auc"]["major_vs_nonmajor"]["refused"]
        )


def test_fit_refuses_few_labels_then_fits_and_activates(api: Any, tenant: str, db_path: Path) -> None:
    st = seed(tenant, CANDS)
    api.post(f"/v1/review/items/{iid(st, 'a')}/verdict", json={"label": "MAJOR"})
    r = api.post("/v1/calibration/fits", json={})
    assert r.status_code == 422, r.text
    assert "need 20" in r.json()["detail"] and r.json()["needed"]["items"] == 20
    rng = random.Random(7)
    for p in range(14):  # 14 passages x 3 candidates; "s" tracks the label, "noise" does not
        cands = []
        labels = []
        for k in range(3):
            lab = rng.choice(["MAJOR", "VALID", "VALID", "MINOR"])
            labels.append(lab)
            s = {"MAJOR": 2.0, "MINOR": 0.5, "VALID": 0.0}[lab] + rng.gauss(0, 0.4)
            cands.append({"id": f"c{k}", "pct": 50.0, "signals": {"s": s, "noise": rng.gauss(0, 1)}})
        state = seed(tenant, cands, ref=f"mn{p}:1")
        for k, lab in enumerate(labels):
            assert api.post(f"/v1/review/items/{iid(state, f'c{k}')}/verdict", json={"label": lab}).status_code == 201
    r = api.post("/v1/calibration/fits", json={"budget": 0.2, "folds": 4})
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["active"] is False and out["model"].startswith("calibrated-")
    assert next(s["name"] for s in out["signals"]) == "s"
    # fitted outside the held-apart suttas, from the active model (test-risk: z(s)), compared with it on them
    assert out["fit"]["tenant"] == tenant and out["fit"]["n_items"] + out["fit"]["validation"]["n_items"] == 43
    assert out["fit"]["started_from"]["model"] == "test-risk@1.0.0" and out["fit"]["validation"]["active"] == (
        "test-risk@1.0.0"
    )
    assert out["fit"]["folds"] == "4 folds grouped by source passage, seed 20260101"
    assert _store(db_path).active(tenant) is None
    models = {m["name"]: m for m in api.get("/v1/calibration/models").json()}
    assert models[out["model"]]["active"] is False and models["test-risk"]["active"] is True
    act = api.post(f"/v1/calibration/models/{out['model']}/activate")
    assert act.status_code == 200, act.text
    active = _store(db_path).active(tenant)
    assert active is not None and active.model_name == out["model"]
    assert api.post("/v1/calibration/models/nope/activate").status_code == 404
    assert api.post("/v1/calibration/models/test-risk/activate").status_code == 200
    assert api.post(f"/v1/calibration/models/{out['model']}/activate").status_code == 200
    history = api.get("/v1/calibration/activations").json()
    assert [h["model"] for h in history] == [out["model"], "test-risk", out["model"]]  # oldest first, the last active
    rep = api.get("/v1/calibration/report").json()
    assert rep["model"]["name"] == out["model"]
    aucs = [s["auc"]["major_vs_nonmajor"] for s in rep["scores"] if "refused" not in s]
    inside = [a for a in aucs if a["value"] is not None and 0 < a["value"] < 1]
    assert inside and all(a["ci"][0] < a["value"] < a["ci"][1] for a in inside)  # DeLong's interval around it
    assert all(a["ci"] == [None, None] for a in aucs if a["value"] in (0.0, 1.0))  # no zero-width certainty
    svg = api.get("/v1/calibration/report.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.startswith("<svg") and "<polyline" in svg.text


class Leased(NamedTuple):
    """Alice's lease on an item; Bob, another review key of the tenant; Eve's lease in another tenant."""

    item: str
    lease: dict[str, Any]
    alice: tuple[dict[str, str], str]
    bob: tuple[dict[str, str], str]
    theirs: dict[str, Any]


def leased(api: Any, tenant: str) -> Leased:
    seed(tenant, CANDS)
    alice, bob = review_key(tenant, "alice"), review_key(tenant, "bob")
    elsewhere = tenant + "-x"
    seed(elsewhere, CANDS)
    eve, eve_name = review_key(elsewhere, "eve")
    # requests name their key's reviewer, so that each of them is well-formed on every version of the API
    theirs = api.post("/v1/review/claims", json={"reviewer": eve_name, "n": 1}, headers=eve).json()
    lease = api.post("/v1/review/claims", json={"reviewer": alice[1], "n": 1}, headers=alice[0]).json()
    assert len(theirs["items"]) == len(lease["items"]) == 1 and lease["reviewer"] == alice[1]
    return Leased(lease["items"][0]["id"], lease, alice, bob, theirs)


@pytest.mark.parametrize("cited", ["bogus", "another tenant's", "none"])
def test_a_verdict_on_a_leased_item_needs_the_lease_that_holds_it(api: Any, tenant: str, cited: str) -> None:
    """Issue 20: a verdict on an item leased to Alice citing a bogus lease id, another tenant's lease id, or none
    answered 201; now 409, nothing recorded."""
    s = leased(api, tenant)
    lease_id = {"bogus": "0" * 32, "another tenant's": s.theirs["lease_id"], "none": None}[cited]
    bob, bob_name = s.bob
    body = {"reviewer": bob_name, "label": "VALID", "lease_id": lease_id}
    r = api.post(f"/v1/review/items/{s.item}/verdict", json=body, headers=bob)
    assert r.status_code == 409, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert api.get(f"/v1/review/items/{s.item}/verdicts").json() == []
    assert api.get(f"/v1/review/items/{s.item}").json()["item"]["status"] == "leased"


def test_a_verdict_under_another_reviewers_lease_is_403(api: Any, tenant: str) -> None:
    s = leased(api, tenant)
    bob, bob_name = s.bob
    body = {"reviewer": bob_name, "label": "VALID", "lease_id": s.lease["lease_id"]}
    r = api.post(f"/v1/review/items/{s.item}/verdict", json=body, headers=bob)
    assert r.status_code == 403, r.text
    assert api.get(f"/v1/review/items/{s.item}/verdicts").json() == []


def test_only_the_holder_or_an_admin_ends_or_renews_a_lease(api: Any, tenant: str) -> None:
    """Issue 20: Bob released Alice's lease (200); now 403 for release and renewal, while an admin key may."""
    s = leased(api, tenant)
    bob, bob_name = s.bob
    lid = s.lease["lease_id"]
    assert api.delete(f"/v1/review/claims/{lid}", headers=bob).status_code == 403
    assert api.post(f"/v1/review/claims/{lid}/renew", json={"reviewer": bob_name}, headers=bob).status_code == 403
    assert api.get(f"/v1/review/items/{s.item}").json()["item"]["status"] == "leased"
    assert api.delete(f"/v1/review/claims/{lid}").json()["released"] == 1  # the test client's key is an admin's
    assert api.get(f"/v1/review/items/{s.item}").json()["item"]["status"] == "open"


def test_a_retried_verdict_is_recorded_once_and_further_opinions_stay_possible(api: Any, tenant: str) -> None:
    """The holder's verdict sent again after a lost acknowledgement is the same verdict (200), not a second one; a
    further opinion on the reviewed item needs no lease, and its retry with the same Idempotency-Key records nothing."""
    s = leased(api, tenant)
    (alice, alice_name), (bob, bob_name) = s.alice, s.bob
    url = f"/v1/review/items/{s.item}/verdict"
    mine = {"reviewer": alice_name, "label": "MAJOR", "lease_id": s.lease["lease_id"]}
    first = api.post(url, json=mine, headers=alice)
    assert first.status_code == 201, first.text
    again = api.post(url, json=mine, headers=alice)
    assert again.status_code == 200 and again.json() == first.json()
    keyed_bob = {**bob, "Idempotency-Key": "bob-1"}
    second = api.post(url, json={"reviewer": bob_name, "label": "MINOR"}, headers=keyed_bob)
    assert second.status_code == 201 and second.json()["opinion"] == 2
    assert api.post(url, json={"reviewer": bob_name, "label": "MINOR"}, headers=keyed_bob).json() == second.json()
    verdicts = api.get(f"/v1/review/items/{s.item}/verdicts").json()
    assert [(v["reviewer"], v["label"], v["lease_id"]) for v in verdicts] == [
        (alice_name, "MAJOR", s.lease["lease_id"]),
        (bob_name, "MINOR", None),
    ]


FLAGGED = [
    {
        "id": "a",
        "model": "m1",
        "pct": 99.5,
        "signals": {"s": 3.0},
        "text": "Rathapala heard five of the six.",
        "flags": [
            Flag(rule="critical.name", severity="major", detail="Rathapal"),
            Flag(rule="critical.list_size", severity="major", detail="six"),
        ],
    },
    CANDS[1],
]


def test_the_reviewers_word_on_each_finding_and_her_spans_are_kept_and_returned(api: Any, tenant: str) -> None:
    """Issue 36: a verdict carries judgements of the item's findings (by the ids the item lists) and error spans;
    GET of the item and of its verdicts return them; an unknown finding or a span past its text is a 422."""
    st = seed(tenant, FLAGGED, ref="mn82:24")
    item = iid(st, "a")
    listed = api.get(f"/v1/review/items/{item}").json()["findings"]
    assert [(f["id"], f["category"]) for f in listed] == [
        ("critical.name", "accuracy/name"),
        ("critical.list_size", "accuracy/number"),
    ]
    url = f"/v1/review/items/{item}/verdict"
    said = [
        {"finding": "critical.name", "decision": "regrade", "severity": "minor"},
        {"finding": "critical.list_size", "decision": "reject"},
    ]
    marked = [{"side": "candidate", "start": 10, "end": 15, "severity": "major", "category": "accuracy/number"}]
    for findings, spans, words in (
        ([{"finding": "critical.number", "decision": "accept"}], [], "not a finding of this item"),
        ([{"finding": "critical.name", "decision": "regrade"}], [], "regrade"),
        (said, [{**marked[0], "end": 99}], "beyond the candidate's 32 characters"),
    ):
        bad = api.post(url, json={"label": "MINOR", "findings": findings, "spans": spans})
        assert bad.status_code == 422, bad.text
        assert bad.headers["content-type"].startswith("application/problem+json") and words in bad.json()["detail"]
    assert api.get(f"/v1/review/items/{item}/verdicts").json() == []  # nothing stored by a refused verdict
    bad_category = api.post(url, json={"label": "MINOR", "spans": [{**marked[0], "category": "vibes"}]})
    assert bad_category.status_code == 400, bad_category.text
    made = api.post(url, json={"label": "MINOR", "findings": said, "spans": marked})
    assert made.status_code == 201, made.text
    for v in (made.json(), api.get(f"/v1/review/items/{item}/verdicts").json()[0]):
        assert v["findings"] == [said[0], {**said[1], "severity": None}]
        assert v["spans"] == [{**marked[0], "note": None}]
    assert api.get(f"/v1/review/items/{item}").json()["verdicts"][0]["spans"] == [{**marked[0], "note": None}]
    exported = api.get("/v1/exports/verdicts")
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [(v["item_id"], v["findings"], v["spans"]) for v in lines] == [
        (item, made.json()["findings"], made.json()["spans"])
    ]
    assert api.get("/v1/exports/verdicts", params={"since": made.json()["created_at"] + 1}).text == ""
    assert api.get("/v1/exports/verdicts", params={"since": 5, "until": 1}).status_code == 422


def test_one_verdict_per_reviewer_replaced_within_the_window_and_timed(
    api: Any, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36 item 4: a reviewer gave a "second opinion" on her own item; now a second verdict of hers is a 409
    unless it replaces her last one within TRISK_REVIEW_REPLACE_SECONDS (both kept, the new one supersedes, only it
    counts); a verdict under a lease keeps the time from the claim, and the client's active time."""
    s = leased(api, tenant)
    (alice, alice_name), (bob, bob_name) = s.alice, s.bob
    url = f"/v1/review/items/{s.item}/verdict"
    first = api.post(
        url, json={"label": "MAJOR", "lease_id": s.lease["lease_id"], "active_seconds": 41.5}, headers=alice
    )
    assert first.status_code == 201, first.text
    assert first.json()["lease_seconds"] >= 0 and first.json()["active_seconds"] == 41.5
    again = api.post(url, json={"label": "MINOR"}, headers=alice)
    assert again.status_code == 409 and f"replaces={first.json()['id']}" in again.json()["detail"]
    assert api.post(url, json={"label": "MINOR", "replaces": 10**9}, headers=alice).status_code == 409
    fixed = api.post(url, json={"label": "MINOR", "replaces": first.json()["id"]}, headers=alice)
    assert fixed.status_code == 201, fixed.text
    assert fixed.json()["supersedes"] == first.json()["id"] and fixed.json()["lease_seconds"] is None
    # only her verdict in force is replaced: the first is superseded already
    assert api.post(url, json={"label": "VALID", "replaces": first.json()["id"]}, headers=alice).status_code == 409
    assert api.post(url, json={"label": "VALID"}, headers=bob).status_code == 201  # another reviewer's opinion
    kept = api.get(f"/v1/review/items/{s.item}/verdicts").json()
    assert [(v["reviewer"], v["label"], v["supersedes"]) for v in kept] == [
        (alice_name, "MAJOR", None),
        (alice_name, "MINOR", first.json()["id"]),
        (bob_name, "VALID", None),
    ]
    monkeypatch.setenv("TRISK_REVIEW_REPLACE_SECONDS", "0")
    get_settings.cache_clear()
    try:
        late = api.post(url, json={"label": "MAJOR", "replaces": fixed.json()["id"]}, headers=alice)
        assert late.status_code == 409 and "TRISK_REVIEW_REPLACE_SECONDS" in late.json()["detail"]
    finally:
        get_settings.cache_clear()


def test_a_replaced_verdict_does_not_count_for_calibration() -> None:
    from service.state.durable import Verdict, in_force

    def v(i: int, label: str, supersedes: int | None = None) -> Verdict:
        return Verdict(i, "t", "item", "a", "c", "alice", label, None, None, None, 0.0, {}, supersedes=supersedes)

    assert [x.id for x in in_force([v(1, "MAJOR"), v(2, "VALID"), v(3, "MINOR", supersedes=1)])] == [2, 3]
