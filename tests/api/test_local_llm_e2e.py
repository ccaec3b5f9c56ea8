"""The judge tier end to end against the real local model server (opt-in: `make test-llm`): an assessment with the LLM
tier on, a Poller evaluation and a MATA grade, each through the API and a real worker, with the settings README tells
a user to run (``scripts/local-llm.sh env``: the shipped `local` panel, its token caps, timeouts and deadline), no
overrides.

The small model's judgements are worth nothing, so these tests assert on behaviour: results arrive within the
deadline, GEMBA answers parse, every answer has a parse status, and no number exists that the model's own text does
not say.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.judges.llm import load_panel, parse_score
from service.core.novelty import NoveltyIndex
from service.platform.settings import LLMSettings, Settings
from tests.conftest import issue_test_key, keyed
from tests.support.local_llm import LocalLLM, profile_env
from tests.worker_support import run_worker_burst

pytestmark = pytest.mark.local_llm

SOURCE = "Evaṁ me sutaṁ—ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane anāthapiṇḍikassa ārāme."
CANDIDATES = [
    "So I have heard. At one time the Buddha was staying near Sāvatthī in Jeta's Grove, Anāthapiṇḍika's monastery.",
    "Thus have I heard. Once the Blessed One dwelt at Sāvatthī, in the Jeta Grove, the park of Anāthapiṇḍika.",
    "I heard this. The Buddha lived in Rājagaha at the Bamboo Grove.",
]


@pytest.fixture()
def local_settings(test_settings: Settings, local_llm_server: LocalLLM) -> Settings:
    # the LLM settings exactly as `scripts/local-llm.sh env` prints them (README "A local judge"); the test's own
    # Redis database and queue, the shipped models folder with its `local` panel
    llm = LLMSettings.from_env(profile_env(local_llm_server.base_url))
    assert llm.panel == "local" and llm.base_url == local_llm_server.base_url
    assert load_panel("local").judges[0].model == local_llm_server.model
    return replace(
        test_settings,
        llm=llm,
        redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"),
    )


@pytest.fixture()
def api(sn12_index: NoveltyIndex, local_settings: Settings) -> Iterator[Any]:
    resources = Resources(settings=local_settings, indexes={"pli": sn12_index})
    with TestClient(app=create_app(local_settings, resources=resources)) as tc:
        yield keyed(tc, issue_test_key(local_settings))


def test_an_assessment_gets_its_cheap_result_then_the_judges_within_the_deadline(
    api: Any, local_settings: Settings
) -> None:
    tag = uuid.uuid4().hex[:8]  # fresh prompts: answers are cached by prompt
    body = {
        "source": {"text": f"{SOURCE} {tag}", "lang": "pli"},
        "candidates": [{"id": f"c{i}", "text": f"{t} {tag}"} for i, t in enumerate(CANDIDATES)],
        "checks": ["peer_distance", "hard_flags", "critical", "gemba", "backtranslation"],
        "review_budget": 1.0,  # every candidate judged (a request's own budget, not a setting)
    }
    aid = api.post("/v1/assessments", json=body).json()["id"]
    started = time.monotonic()
    run_worker_burst(local_settings)
    elapsed = time.monotonic() - started
    done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done", done
    assert elapsed < local_settings.llm.deadline_seconds + 30, elapsed  # the deadline holds
    assert done["llm_tier"]["status"] == "done", done["llm_tier"]
    # the local profile's GEMBA answers parse: every candidate gets its judge's score
    assert done["llm_tier"]["checks"]["gemba"] == {"ran": 3}, done["llm_tier"]
    assert all(c["risk"] is not None for c in done["candidates"])
    for detail in done["llm"]["details"].values():
        for judge in (detail.get("gemba_result") or {}).get("judges", []):
            assert judge["status"] == "valid", judge
            # nothing fabricated: the score is what the model's own answer parses to
            assert parse_score(judge["raw"], "stop") == (judge["score"], None), judge
    assert done["llm"]["judges"]["local"]["calls"] >= 3


def test_a_poller_evaluation_and_a_mata_grade_come_back_with_parse_statuses(
    api: Any, local_settings: Settings, local_llm_server: LocalLLM
) -> None:
    tag = uuid.uuid4().hex[:8]
    poller = api.post(
        "/v1/poller/evaluations",
        json={
            "poem": {"text": f"Quiet pond; a frog leaps in. The sound of water. ({tag})"},
            "interpretation": "A moment of stillness broken, then stillness again.",
            "persona": {"author": "Matsuo Bashō", "basic_information": "A poet of the Edo period."},
        },
    )
    assert poller.status_code == 202, poller.text
    grade = api.post(
        "/v1/mata/grades",
        json={"question": f"What is 2 + 2? ({tag})", "answer": "4", "response": "Four."},
    )
    assert grade.status_code == 202, grade.text
    run_worker_burst(local_settings)

    evaluation = api.get(poller.headers["location"]).json()
    assert evaluation["status"] == "done", evaluation
    (item,) = evaluation["result"]["items"]
    assert item["status"] in {"scored", "unanswered"}, item
    for judge in item["judges"]:
        assert judge["status"] in {"valid", "invalid", "timed_out"}, judge
        for dim in judge["dimensions"]:
            # a score only where the answer gave one for that dimension; otherwise a recorded parse failure
            assert dim["status"] in {"scored", "parse_failure"}, dim
            assert ("score" in dim) == (dim["status"] == "scored"), dim

    graded = api.get(grade.headers["location"]).json()
    assert graded["status"] == "done", graded
    (result,) = graded["results"]
    for judge in result["judges"]:
        assert judge["status"] in {"valid", "invalid", "timed_out"}, judge
        assert (judge["verdict"] is None) == (judge["status"] != "valid"), judge
    assert result["verdict"] in {"correct", "incorrect", "no_majority"}
