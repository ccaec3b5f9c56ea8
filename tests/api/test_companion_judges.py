"""The companion judges end to end: personas in the durable store, Poller evaluations and MATA grades and
multiple-choice runs through the API and a real worker against the local OpenAI-protocol server; what a user reads
when no provider is configured; bad input as problem responses."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.companions.poller import POLLER_PROMPT_HASHES
from service.core.novelty import NoveltyIndex
from service.platform.settings import LLMSettings, Settings
from tests.conftest import TEST_TENANT, issue_test_key, keyed
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake, openai_server  # noqa: F401
from tests.worker_support import run_job, run_worker_burst

PERSONA = {
    "author": "北岛",
    "aliases": ["Bei Dao"],
    "basic_information": "Born in Beijing in 1949; a founder of the magazine Today.",
    "experience_and_views": "I distrust grand words; a poem should refuse the language of the crowd.",
    "critics_comments": "Critics call his early poems the voice of the Misty poets.",
}
SCORES_A = """Role: I am Bei Dao, and this is my poem.
Content: 80 - sees the era
Language: 70 - notes the plain words
Imagery: 75 - the epitaph
Rhetorical techniques: 60 - misses the antithesis
Rhythm: 65 - ok
Defamiliarization: 50 - little
Thought and emotion: 85 - right
Modernity: 70 - fair"""
SCORES_B = """| Dimension | Score | Reason |
|---|---|---|
| Content | 90 | yes |
| Language | 80 | yes |
| Imagery | 85 | yes |
| Rhetorical techniques | 70 | yes |
| Rhythm | 75 | yes |
| Defamiliarization | 60 | yes |
| Thought and emotion | 95 | yes |
| Modernity | 80 | yes |"""


@pytest.fixture()
def judge_settings(test_settings: Settings, fake: FakeOpenAIServer) -> Settings:  # noqa: F811
    # a queue of this test's own: a worker with a provider must not take judge jobs other tests left queued
    redis = replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q")
    return replace(test_settings, llm=LLMSettings(base_url=fake.base_url, api_key="test", max_retries=0), redis=redis)


@pytest.fixture()
def api(sn12_index: NoveltyIndex, judge_settings: Settings) -> Iterator[Any]:
    resources = Resources(settings=judge_settings, indexes={"pli": sn12_index})
    with TestClient(app=create_app(judge_settings, resources=resources)) as tc:
        yield keyed(tc, issue_test_key(judge_settings))


def _poem() -> dict[str, str]:
    # a fresh poem each run: judges' answers are cached in Redis by prompt, across runs too
    return {"title": "回答", "text": f"卑鄙是卑鄙者的通行证，\n高尚是高尚者的墓志铭。 {uuid.uuid4().hex[:6]}"}


def test_persona_versions_and_a_p3_evaluation_through_a_worker(
    api: Any,
    judge_settings: Settings,
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    created = api.post("/v1/personas", json=PERSONA)
    assert created.status_code == 201, created.text
    pid, first = created.json()["id"], created.json()["version"]
    changed = api.put(f"/v1/personas/{pid}", json={**PERSONA, "critics_comments": "A poet of refusal."}).json()
    assert changed["id"] == pid and changed["version"] != first
    versions = api.get(f"/v1/personas/{pid}/versions").json()
    assert [v["version"] for v in versions] == [first, changed["version"]]
    assert api.get(f"/v1/personas/{pid}").json()["persona"]["critics_comments"] == "A poet of refusal."
    assert pid in {p["id"] for p in api.get("/v1/personas").json()}

    fake.script("judge-a", [Reply(SCORES_A)])
    fake.script("judge-b", [Reply(SCORES_B)])
    body = {
        "poem": _poem(),
        "interpretations": [
            {"id": "r1", "text": "The poem answers an era of lies."},
            {"id": "r2", "text": "A love poem about the sea."},
        ],
        "persona_id": pid,
        "judges": [{"model": "judge-a", "family": "openai"}, {"model": "judge-b", "family": "qwen"}],
    }
    submitted = api.post("/v1/poller/evaluations", json=body)
    assert submitted.status_code == 202, submitted.text
    eid = submitted.json()["id"]
    assert submitted.headers["location"] == f"/v1/poller/evaluations/{eid}"
    assert submitted.json()["status"] == "pending" and submitted.json()["result"] is None

    worker = run_worker_burst(judge_settings)
    assert worker.jobs_complete >= 1 and worker.jobs_failed == 0
    done = api.get(f"/v1/poller/evaluations/{eid}").json()
    assert done["status"] == "done", done
    result = done["result"]
    # the evaluation names the persona version its prompt used, and the default strategy P3
    assert result["signature"]["persona_version"] == changed["version"]
    assert result["signature"]["strategy"] == "P3"
    assert result["signature"]["prompt_hash"] == POLLER_PROMPT_HASHES["en"]
    assert len(fake.requests) == 4  # two judges x two interpretations
    prompt = fake.requests[0].user_text + "\n".join(str(m["content"]) for m in fake.requests[0].messages)
    assert "A poet of refusal." in prompt and "Critics call" not in prompt
    r1 = next(i for i in result["items"] if i["interpretation_id"] == "r1")
    assert r1["status"] == "scored"
    judges = {j["judge_id"]: j for j in r1["judges"]}
    assert {d["dimension"]: d["score"] for d in judges["judge-a"]["dimensions"]}["content"] == 80
    assert judges["judge-a"]["role"]["names_author"] is True
    content = next(d for d in r1["dimensions"] if d["dimension"] == "content")
    assert content == {"dimension": "content", "n": 2, "mean": 85.0, "median": 85.0, "min": 80.0, "max": 90.0,
                       "spread": 10.0, "reason": None}  # fmt: skip
    assert r1["overall"] == pytest.approx((555 / 8 + 635 / 8) / 2)  # judge-a 69.375, judge-b 79.375

    # the agreement of the stored evaluation with the author's own scores
    human = [
        {"item_id": "r1", "scores": dict.fromkeys(("content", "language"), 75.0)},
        {"item_id": "r2", "scores": dict.fromkeys(("content", "language"), 75.0)},
    ]
    agreement = api.post(
        "/v1/poller/agreement/stored",
        json={
            "human": human,
            "evaluations": [{"evaluation_id": eid, "name": "P3"}],
            "dimensions": ["content", "language"],
            "bootstrap": {"resamples": 100},
        },
    )
    assert agreement.status_code == 200, agreement.text
    (row,) = agreement.json()["systems"]
    assert row["system"] == "P3"
    errors = {d["dimension"]: d["abs_mean_error"] for d in row["dimensions"]}
    assert errors == {"content": pytest.approx(10.0), "language": pytest.approx(0.0)}  # judges' 85 and 75

    # a redelivered job reads the stored result and asks no judge again
    from workers.judge_jobs import judge

    outcome = run_job(judge_settings, judge, TEST_TENANT, "poller", eid)
    assert outcome == "already finished" and len(fake.requests) == 4

    # deleting the persona leaves the evaluation (and its text) readable
    assert api.delete(f"/v1/personas/{pid}").json() == {"id": pid, "deleted": True}
    assert api.get(f"/v1/personas/{pid}").status_code == 404
    assert api.get(f"/v1/poller/evaluations/{eid}").json()["result"]["signature"]["persona_version"]


def test_mata_grades_in_english_and_telugu_through_a_worker(
    api: Any,
    judge_settings: Settings,
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    fake.script("grader-a", [Reply("The response names the same river.\nGRADE: C")])
    fake.script("grader-b", [Reply("**grade: c**")])
    fake.script("grader-c", [Reply("Wrong city.\nGRADE: I")])
    fake.script("telugu-a", [Reply("సమాధానం సరైనది. అవును")])
    fake.script("telugu-b", [Reply("అవును, లేదు")])  # both words: a format failure, not a vote
    tag = uuid.uuid4().hex[:6]
    english = {
        "question": f"Which river flows through Rajahmundry? ({tag})",
        "answer": "The Godavari",
        "response": "It is the Godavari river.",
        "response_model": "openai/gpt-4o",
        "judges": [{"model": "grader-a", "family": "anthropic"}, {"model": "grader-b", "family": "google"},
                   {"model": "grader-c", "family": "openai"}],
    }  # fmt: skip
    one = api.post("/v1/mata/grades", json=english)
    assert one.status_code == 202, one.text
    telugu = {
        "language": "te",
        "items": [{"id": "t1", "question": f"రాజమండ్రి గుండా ఏ నది ప్రవహిస్తుంది? ({tag})", "answer": "గోదావరి",
                   "response": "గోదావరి నది"}],
        "judges": [{"model": "telugu-a", "family": "anthropic"}, {"model": "telugu-b", "family": "google"}],
    }  # fmt: skip
    batch = api.post("/v1/mata/grades/batch", json=telugu)
    assert batch.status_code == 202, batch.text
    assert api.get(one.headers["location"]).json()["status"] == "pending"

    worker = run_worker_burst(judge_settings)
    assert worker.jobs_failed == 0
    (graded,) = api.get(one.headers["location"]).json()["results"]
    assert graded["status"] == "graded"
    assert graded["verdict"] == "correct" and graded["votes"]["correct"] == 2 and graded["votes"]["incorrect"] == 1
    judges = {j["judge_id"]: j for j in graded["judges"]}
    # the responding model's family is flagged (kept: the request did not ask to exclude it)
    assert judges["grader-c"]["same_family"] is True and judges["grader-a"]["same_family"] is False
    assert judges["grader-a"]["reasoning"] == "The response names the same river."
    assert judges["grader-b"]["raw"] == "**grade: c**"
    telugu_prompt = fake.requests_for("telugu-a")[0].user_text
    assert "అవును" in telugu_prompt and "గోదావరి" in telugu_prompt

    (te,) = api.get(batch.headers["location"]).json()["results"]
    assert te["item_id"] == "t1"
    tb = next(j for j in te["judges"] if j["judge_id"] == "telugu-b")
    assert tb["status"] == "invalid" and tb["parse_error"] and tb["verdict"] is None
    assert te["votes"]["format_failures"] == 1 and te["votes"]["correct"] == 1
    # one parsed vote of two judges is below the default quorum (a strict majority of the panel)
    assert te["verdict"] == "no_majority"


def test_mcq_answers_variants_and_a_run_through_a_worker(
    api: Any,
    judge_settings: Settings,
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    item = {
        "id": "q1",
        "question": f"Which river flows through Rajahmundry? {uuid.uuid4().hex[:6]}",
        "options": [{"text": "Krishna"}, {"text": "Kaveri"}, {"text": "Godavari", "correct": True}, {"text": "Ganga"}],
    }
    variants = api.post("/v1/mata/mcq-variants", json={"item": item, "language": "te"})
    assert variants.status_code == 200, variants.text
    by_name = {v["variant"]: v for v in variants.json()}
    assert list(by_name) == ["original", "A", "B", "C", "D", "NE", "NR"]
    assert by_name["A"]["answer"] == "A" and by_name["A"]["options"][0]["text"] == "Godavari"
    assert by_name["NR"]["options"][2]["text"] == by_name["NE"]["options"][3]["text"] != "Godavari"

    read = api.post("/v1/mata/mcq-answers", json={"text": "Answer: (B)", "answer": "C"}).json()
    assert read["choice"] == "B" and read["correct"] is False and read["status"] == "answered"
    unread = api.post("/v1/mata/mcq-answers", json={"text": "It is the Godavari.", "answer": "C"}).json()
    assert unread["status"] == "format_failure" and unread.get("correct") is None

    fake.script("always-a", [Reply("ANSWER: A")])
    run = api.post("/v1/mata/mcq-runs", json={"model": "always-a", "items": [item]})
    assert run.status_code == 202, run.text
    run_worker_burst(judge_settings)
    report = api.get(run.headers["location"]).json()
    assert report["status"] == "done", report
    accuracy = {v["variant"]: v["accuracy"] for v in report["result"]["variants"]}
    assert accuracy == {"original": 0.0, "A": 1.0, "B": 0.0, "C": 0.0, "D": 0.0, "NE": 0.0, "NR": 0.0}
    assert report["result"]["profile"]["position_spread"] == 1.0
    assert len(fake.requests_for("always-a")) == 7

    # a second delivery that finished later does not replace the stored result
    rid = run.json()["id"]
    assert _second_result_written(judge_settings, rid) is False
    assert api.get(run.headers["location"]).json()["result"] == report["result"]


def _second_result_written(settings: Settings, jid: str) -> bool:
    import asyncio

    import msgspec
    from redis.asyncio import Redis

    from service.companions.judge_jobs import JudgeJobStore
    from tests.conftest import TEST_TENANT

    async def go() -> bool:
        redis = Redis.from_url(settings.redis.url)
        try:
            store = JudgeJobStore(redis, retention_seconds=60)
            job = await store.get(TEST_TENANT, "mcq", jid)
            later = msgspec.structs.replace(job.result, variants=[])
            return await store.put_result(TEST_TENANT, "mcq", jid, later)
        finally:
            await redis.aclose()

    return asyncio.run(go())


def test_without_a_provider_on_the_worker_judge_work_reads_skipped_and_the_rest_works(
    sn12_index: NoveltyIndex, test_settings: Settings
) -> None:
    settings = replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))
    resources = Resources(settings=settings, indexes={"pli": sn12_index})
    with TestClient(app=create_app(settings, resources=resources)) as tc:
        client = keyed(tc, issue_test_key(settings))
        evaluation = client.post(
            "/v1/poller/evaluations",
            json={"poem": _poem(), "interpretation": "An answer to an era of lies.", "persona": PERSONA},
        )
        assert evaluation.status_code == 202, evaluation.text
        assert evaluation.json()["status"] == "pending"  # the worker decides, not the API
        grade = client.post("/v1/mata/grades", json={"question": "2 + 2?", "answer": "4", "response": "four"}).json()
        run = client.post("/v1/mata/mcq-runs", json={"model": "m", "items": [MCQ]}).json()
        assert run_worker_burst(settings).jobs_failed == 0
        (item,) = client.get(evaluation.headers["location"]).json()["result"]["items"]
        assert item["status"] == "skipped" and "provider" in item["reason"]
        (graded,) = client.get(f"/v1/mata/grades/{grade['id']}").json()["results"]
        assert graded["status"] == "skipped" and "provider" in graded["reason"]
        assert client.get(f"/v1/mata/mcq-runs/{run['id']}").json()["result"]["status"] == "skipped"
        _the_rest_works(client)


def test_judges_run_when_the_worker_has_a_provider_though_the_api_has_none(
    sn12_index: NoveltyIndex,
    judge_settings: Settings,
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    api_settings = replace(judge_settings, llm=LLMSettings())  # TRISK_LLM_BASE_URL set on the worker only
    fake.script("grader", [Reply("The submission says 4.\nGRADE: C")])
    resources = Resources(settings=api_settings, indexes={"pli": sn12_index})
    with TestClient(app=create_app(api_settings, resources=resources)) as tc:
        client = keyed(tc, issue_test_key(api_settings))
        judges = [{"model": "grader", "family": "openai"}]
        body = {"question": f"2 + 2? ({uuid.uuid4().hex[:6]})", "answer": "4", "response": "four", "judges": judges}
        grade = client.post("/v1/mata/grades", json=body).json()
        assert grade["status"] == "pending"
        assert run_worker_burst(judge_settings).jobs_failed == 0
        (graded,) = client.get(f"/v1/mata/grades/{grade['id']}").json()["results"]
    assert graded["status"] == "graded" and graded["verdict"] == "correct", graded
    assert len(fake.requests_for("grader")) == 1


def _the_rest_works(client: Any) -> None:
    assert client.post("/v1/mata/mcq-answers", json={"text": "ANSWER: B"}).json()["choice"] == "B"
    agreement = client.post(
        "/v1/mata/agreement",
        json={
            "judge": {"rater": "judge", "labels": _labels("correct", "incorrect")},
            "humans": [{"rater": "h1", "labels": _labels("correct", "correct")}],
            "bootstrap": {"resamples": 100},
        },
    )  # fmt: skip
    assert agreement.status_code == 200, agreement.text
    accuracy = {a["source"]: a["accuracy"] for a in agreement.json()["overall"]["accuracy"]}
    assert accuracy == {"judge": 0.5, "h1": 1.0}


def _labels(*labels: str) -> list[dict[str, str]]:
    return [{"item_id": str(i), "label": label} for i, label in enumerate(labels, 1)]


MCQ = {"id": "q", "question": "2 + 2?", "options": [{"text": "3"}, {"text": "4", "correct": True}, {"text": "5"}]}


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/v1/poller/evaluations", {"poem": {"text": "p"}, "interpretation": "i", "strategy": "P5"}, "strategy"),
        ("/v1/poller/evaluations", {"poem": {"text": "p"}, "interpretation": "i", "dimensions": ["colour"]}, "colour"),
        ("/v1/poller/evaluations", {"poem": {"text": "p"}, "interpretation": "i", "persona_id": "nope"}, "nope"),
        ("/v1/personas", {**PERSONA, "critics_comments": "x" * 20_001}, "critics_comments"),
        ("/v1/mata/mcq-variants", {"item": {**MCQ, "options": [{"text": "a"}, {"text": "b"}]}}, "correct"),
        ("/v1/mata/mcq-runs", {"model": "m", "items": [{**MCQ, "options": [{"text": "a", "correct": True},
                                                                         {"text": "b", "correct": True}]}]}, "correct"),
        # a run may not size its calls past TRISK_LLM_MAX_TOKENS (10**9 reached the provider)
        ("/v1/mata/mcq-runs", {"model": "m", "items": [MCQ], "max_tokens": 10**9}, "TRISK_LLM_MAX_TOKENS"),
        ("/v1/mata/grades", {"question": "q", "answer": "a", "response": "r", "language": "fr"}, "language"),
        ("/v1/mata/agreement", {"judge": {"rater": "j", "labels": [{"item_id": "1", "label": "correct"}]},
                                "humans": []}, "two raters"),
        ("/v1/mata/agreement", {"judge": {"rater": "j", "labels": [{"item_id": "1", "label": "correct"}]},
                                "humans": [{"rater": "h", "labels": [{"item_id": "2", "label": "correct"}]}]}, "item"),
        ("/v1/poller/agreement", {"human": [{"item_id": "1", "scores": {"content": 80}}],
                                  "systems": [{"name": "s", "items": [{"item_id": "9", "scores": {"content": 70}}]}]},
         "item"),
    ],
)  # fmt: skip
def test_bad_input_is_a_problem_naming_what_is_wrong(client: Any, path: str, body: dict[str, Any], needle: str) -> None:
    answer = client.post(path, json=body)
    # a value outside the schema is a 400 (with the field), a request the schema allows but that makes no sense a
    # 422, an unknown persona a 404
    schema = needle in {"strategy", "language"}
    assert answer.status_code == (404 if body.get("persona_id") else 400 if schema else 422), answer.text
    assert answer.headers["content-type"].startswith("application/problem+json"), answer.text
    assert needle in answer.text, answer.text


def test_a_judge_job_lost_too_often_reads_failed_with_the_reason(
    api: Any,
    judge_settings: Settings,
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    from workers.judge_jobs import judge
    from workers.policy import MAX_TRIES

    submitted = api.post("/v1/mata/grades", json={"question": "q", "answer": "a", "response": "r",
                                                  "judges": [{"model": "grader-x", "family": "openai"}]})  # fmt: skip
    assert submitted.status_code == 202, submitted.text
    submitted = submitted.json()
    outcome = run_job(judge_settings, judge, TEST_TENANT, "grades", submitted["id"], job_try=MAX_TRIES + 1)
    assert outcome == "gave up" and fake.requests == []
    failed = api.get(f"/v1/mata/grades/{submitted['id']}").json()
    assert failed["status"] == "failed" and "gave up" in failed["error"]
    # the queued delivery that finds it finished does nothing
    run_worker_burst(judge_settings)
    assert fake.requests == [] and api.get(f"/v1/mata/grades/{submitted['id']}").json()["status"] == "failed"
