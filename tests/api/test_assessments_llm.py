"""The LLM tier end to end: API -> cheap tier -> cascade -> GEMBA panel on a local OpenAI-protocol server -> final
risk. Checks what ran, what it cost, that judge scores are the judges' own, and the panel's red flag."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.core.settings import LLMSettings, Settings
from tests.conftest import issue_test_key, keyed
from tests.fakes.openai_server import FakeOpenAIServer, models_with_panel, openai_server  # noqa: F401
from tests.worker_support import run_worker_burst

SOURCE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."
CANDIDATES = [
    "Endowed with the seven treasures, trained in the three trainings, the great heroes wander, fearless.",
    "Possessed of the seven gems, trained in the three trainings, great heroes roam about, fear abandoned.",
    "Accomplished in seven jewels, trained in the threefold training, the mighty heroes wander, free of dread.",
    "With seven treasures and three trainings the heroes wander without fear or dread.",
    "The seven treasures are complete; the great heroes roam, having abandoned fear.",
]
PANEL = {
    "name": "e2e",
    "version": "t1",
    "description": "scripted judges on the local protocol server",
    "judges_per_candidate": 3,
    "judges": [
        {"id": "a", "model": "score-90", "family": "anthropic"},
        {"id": "b", "model": "score-55", "family": "openai"},
        {"id": "c", "model": "hash-score", "family": "google"},
    ],
}


@pytest.fixture()
def llm_settings(test_settings: Settings, tmp_path: Path, openai_server: FakeOpenAIServer) -> Settings:  # noqa: F811
    models = models_with_panel(tmp_path, PANEL)
    llm = LLMSettings(base_url=openai_server.base_url, api_key="test", panel="e2e", max_retries=0, review_budget=0.4)
    return replace(test_settings, llm=llm, risk=replace(test_settings.risk, models_dir=str(models)))


@pytest.fixture()
def llm_client(sn12_index: NoveltyIndex, llm_settings: Settings) -> Iterator[Any]:
    resources = Resources(settings=llm_settings, indexes={"pli": sn12_index})
    app = create_app(llm_settings, resources=resources)
    with TestClient(app=app) as tc:
        yield keyed(tc, issue_test_key(llm_settings))


def test_cascade_judges_the_riskiest_and_reports_cost(
    llm_client: Any,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    body = {
        # a fresh source each run: the judges' answers are cached in Redis by prompt, across runs too
        "source": {"text": f"{SOURCE} {uuid.uuid4().hex}", "lang": "pli"},
        "candidates": [{"id": f"c{i}", "text": t, "model": "vendor/model"} for i, t in enumerate(CANDIDATES)],
        "checks": ["peer_distance", "hard_flags", "gemba"],
        "review_budget": 0.4,
    }
    aid = llm_client.post("/v1/assessments", json=body).json()["id"]
    worker = run_worker_burst(llm_settings)
    assert worker.jobs_failed == 0
    done = llm_client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done", done
    judged = [c for c in done["candidates"] if c["signals"]["gemba_mean_risk"]["status"] == "value"]
    skipped = [c for c in done["candidates"] if c["signals"]["gemba_mean_risk"]["status"] == "skipped"]
    assert len(judged) == 2 and len(skipped) == 3  # ceil(0.4 * 5): only the costliest tail by routing score
    routing = {c["id"]: c["routing"]["score"] for c in done["candidates"]}
    assert min(routing[c["id"]] for c in judged) >= max(routing[c["id"]] for c in skipped)
    for c in judged:
        assert c["risk"]["rule"].startswith("gemba-mean-risk@")
        # one judge says 55 -> the panel's "any judge <= 60" red flag
        assert any(f["rule"].startswith("gemba") and f["severity"] == "major" for f in c["flags"]), c["flags"]
    for c in skipped:
        assert (
            "budget" in c["signals"]["gemba_mean_risk"]["reason"]
            or "routing" in c["signals"]["gemba_mean_risk"]["reason"]
        )
        assert not c["risk"]["rule"].startswith("gemba")
    assert done["llm"]["cost"]["calls"] == len(openai_server.requests) == 6  # 3 judges x 2 candidates
    assert done["signature"]["llm"]["gemba_prompt"]["hash"]

    # the same request again costs no upstream call: every answer comes from the response cache
    again = llm_client.post("/v1/assessments", json=body).json()["id"]
    run_worker_burst(llm_settings)
    second = llm_client.get(f"/v1/assessments/{again}").json()
    assert second["llm"]["cost"]["calls"] == 0 and second["llm"]["cost"]["cache_hits"] == 6
    assert len(openai_server.requests) == 6
    first_scores = {c["id"]: c["risk"]["score"] for c in done["candidates"]}
    assert {c["id"]: c["risk"]["score"] for c in second["candidates"]} == first_scores


def test_the_daily_llm_budget_skips_judges_and_the_cheap_tier_still_answers(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    tenant = f"test-spend-{uuid.uuid4().hex[:8]}"
    settings = replace(
        llm_settings,
        llm=replace(llm_settings.llm, calls_per_day=2, review_budget=1.0, max_concurrency=1),
        redis=replace(llm_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"),
    )
    body = {
        "source": {"text": f"{SOURCE} {uuid.uuid4().hex}", "lang": "pli"},
        "candidates": [{"id": f"c{i}", "text": t, "model": "vendor/model"} for i, t in enumerate(CANDIDATES)],
        "checks": ["peer_distance", "hard_flags", "gemba"],
    }
    with TestClient(
        app=create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    ) as tc:
        keyed(tc, issue_test_key(settings, tenant))
        aid = tc.post("/v1/assessments", json=body).json()["id"]
        assert run_worker_burst(settings).jobs_failed == 0
        done = tc.get(f"/v1/assessments/{aid}").json()
    assert len(openai_server.requests) == 2  # the budget, not one call more
    assert done["status"] == "done" and all(c["risk"] is not None for c in done["candidates"])
    gemba = [c["signals"]["gemba_mean_risk"] for c in done["candidates"]]
    spent = [g for g in gemba if g["status"] == "skipped" and "LLM budget" in g["reason"]]
    assert len(spent) >= len(CANDIDATES) - 1, gemba
    assert all(c["signals"]["peer_chrf_risk"]["status"] == "value" for c in done["candidates"])
