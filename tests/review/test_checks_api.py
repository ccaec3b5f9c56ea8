"""Checks earn their forcing, through the API: per-check precision, reviewer agreement and a demotion in the
calibration report; the demotion made and activated like a fit; a model that loses refused unless forced (recorded)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from service.core.types import Flag
from service.platform.settings import get_settings
from service.state.durable import open_store
from service.state.durable.access import issue_key
from tests.review.support import REDIS_URL, iid, write_assessment

pytestmark = pytest.mark.long(25)


@pytest.fixture
def demote_after_ten(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The demotion bar of this test: forcing precision below 0.5 on at least 10 judged findings."""
    monkeypatch.setenv("TRISK_DEMOTE_MIN_JUDGED", "10")
    monkeypatch.setenv("TRISK_DEMOTE_BELOW_PRECISION", "0.5")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def seed(tenant: str, cands: list[dict[str, Any]], ref: str) -> Any:
    async def go() -> Any:
        r = Redis.from_url(REDIS_URL)
        try:
            return await write_assessment(r, tenant, cands, ref=ref)
        finally:
            await r.aclose()

    return asyncio.run(go())


LIST = Flag(rule="critical.list_size", severity="major", detail="candidate does not say six")


def test_checks_agreement_demotion_and_guarded_activation(api: Any, tenant: str, demote_after_ten: None) -> None:
    token, key = issue_key(open_store(get_settings().durable), tenant, "bea", ["review"])
    bea = {"Authorization": f"Bearer {token}"}
    flagged = []
    for p in range(6):  # six suttas: "a" flagged by list_size (wrongly), "b" a MAJOR error that s ranks
        st = seed(
            tenant,
            [
                {"id": "a", "pct": 50.0, "signals": {"s": 0.0}, "flags": [LIST]},
                {"id": "b", "pct": 50.0, "signals": {"s": 1.0 + p}},
            ],
            ref=f"sn{p + 1}.1:1",
        )
        flagged.append(iid(st, "a"))
        ok = api.post(f"/v1/review/items/{iid(st, 'b')}/verdict", json={"label": "MAJOR"})
        assert ok.status_code == 201, ok.text
    # the admin rejects all six list-size findings; Bea rejects five and accepts one (and calls that item MINOR)
    for k, item in enumerate(flagged):
        no = {"finding": "critical.list_size", "decision": "reject"}
        r = api.post(f"/v1/review/items/{item}/verdict", json={"label": "VALID", "findings": [no]})
        assert r.status_code == 201, r.text
        mine = {"label": "MINOR", "findings": [{**no, "decision": "accept"}]} if k == 0 else {"label": "VALID"}
        mine.setdefault("findings", [no])
        r = api.post(f"/v1/review/items/{item}/verdict", json=mine, headers=bea)
        assert r.status_code == 201, r.text

    rep = api.get("/v1/calibration/report").json()
    checks = rep["checks"]
    row = next(r for r in checks["precision"] if r["check"] == "critical.list_size" and r["model"] is None)
    assert (row["judged"], row["accepted"], row["rejected"]) == (12, 1, 11)
    assert row["forcing_precision"]["value"] == pytest.approx(1 / 12, abs=1e-6)
    assert [d["check"] for d in checks["demotions"]] == ["critical.list_size"]
    assert checks["active_model"] == "test-risk@1.0.0"
    # agreement on the six items both judged: admin V x6, Bea V x5 + m x1: p_o = p_e = 5/6, kappa 0;
    # alpha: 12 values, V11 m1, one disagreeing unit: 1 - 11 * 2 / (144 - 121 - 1) = 0
    (pair,) = rep["agreement"]["pairs"]
    assert pair["n"] == 6 and pair["kappa"] == pytest.approx(0.0, abs=1e-9)
    assert rep["agreement"]["alpha"]["value"] == pytest.approx(0.0, abs=1e-9)

    made = api.post("/v1/calibration/demotions", json={"check": "critical.list_size"})
    assert made.status_code == 201, made.text
    demoted = made.json()
    assert demoted["fit"]["kind"] == "demotion" and demoted["fit"]["proposal"]["check"] == "critical.list_size"
    assert demoted["active"] is False
    act = api.post(demoted["activate_url"])
    assert act.status_code == 200, act.text
    assert act.json()["kind"] == "demotion" and act.json()["forced"] is False
    assert act.json()["comparison"]["loses"] is False

    # going back to the model that forces the wrong flag loses (its top items are the six VALID ones)
    back = api.post("/v1/calibration/models/test-risk/activate")
    assert back.status_code == 409, back.text
    assert back.headers["content-type"].startswith("application/problem+json")
    assert back.json()["comparison"]["loses"] is True and back.json()["comparison"]["losses"]
    assert api.post("/v1/calibration/models/test-risk/activate", json={"force": True}).status_code == 422
    forced = api.post(
        "/v1/calibration/models/test-risk/activate", json={"force": True, "reason": "compare in production"}
    )
    assert forced.status_code == 200, forced.text
    history = api.get("/v1/calibration/activations").json()
    assert [(h["model"], h["forced"], h["reason"]) for h in history] == [
        (demoted["model"], False, None),
        ("test-risk", True, "compare in production"),
    ]
    assert history[-1]["comparison"]["loses"] is True and history[-1]["activated_by"]
    assert key.key_id not in history[-1]["activated_by"]  # the admin's key activated it, not Bea's
