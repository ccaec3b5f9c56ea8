"""Panel adjudication: the majority table, strict parsing, no provider -> skipped, judges on the fake server; its job
is a judge job like a MATA grade's (one deadline, one failure policy)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.platform.settings import LLMSettings, Settings
from service.review import majority_label, parse_adjudication
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.review.conftest import make_client, make_settings
from tests.worker_support import BrokenClient, run_job, run_worker_burst

NO, MI, MA = (
    '{"error": "no", "severity": "none"}',
    '{"error": "yes", "severity": "minor"}',
    '{"error": "yes", "severity": "major"}',
)


@pytest.mark.parametrize(
    ("votes", "label"),
    [
        (("none", "none", "none"), "VALID"),
        (("minor", "none", "none"), "VALID"),
        (("major", "none", "none"), "VALID"),
        (("minor", "minor", "none"), "MINOR"),
        (("major", "minor", "none"), "MINOR"),
        (("major", "minor", "minor"), "MINOR"),
        (("major", "major", "none"), "MAJOR"),
        (("major", "major", "minor"), "MAJOR"),
        (("major", "major", "major"), "MAJOR"),
        ((None, "none", "none"), "VALID"),  # the missing vote cannot reach 2 errors
        ((None, "major", "major"), "MAJOR"),
        ((None, "minor", "none"), None),  # could be VALID or MINOR: inconclusive, never guessed
        ((None, "minor", "major"), None),
        ((None, None, "none"), None),
    ],
)
def test_majority_table(votes: tuple[Any, ...], label: str | None) -> None:
    assert majority_label(list(votes)) == label


@pytest.mark.parametrize(
    ("text", "vote", "error"),
    [
        (NO, "none", None),
        (MI, "minor", None),
        (f"  {MA}\n", "major", None),
        (f"```json\n{MA}\n```", "major", None),
        ('{"error": "no", "severity": "major"}', None, "inconsistent_values"),
        ('{"error": "yes", "severity": "none"}', None, "inconsistent_values"),
        ('{"error": true, "severity": "major"}', None, "inconsistent_values"),
        ('{"error": "yes", "severity": "major", "why": "x"}', None, "wrong_keys"),
        (f"Here you go: {MA}", None, "not_json"),
        ("MAJOR", None, "not_json"),
        ("", None, "empty"),
    ],
)
def test_parse_table(text: str, vote: str | None, error: str | None) -> None:
    assert parse_adjudication(text) == (vote, error)


def test_truncated_answer_is_invalid() -> None:
    assert parse_adjudication(MA, "length") == (None, "truncated")


def test_without_a_provider_on_the_worker_the_record_reads_skipped(
    models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(models_dir, LLMSettings(panel="adj"))  # no provider
    with make_client(settings, tenant, monkeypatch) as api:
        r = api.post(
            "/v1/adjudications",
            json={
                "source": "Evaṃ me sutaṃ.",
                "candidate": "Thus I heard.",
                "reference": "So I have heard.",
                "panel": "adj",
            },
        )
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["status"] == "pending"  # whether judges can run is the worker's to say
        assert run_worker_burst(settings).jobs_failed == 0
        stored = api.get(f"/v1/adjudications/{body['id']}").json()
        assert stored["status"] == "skipped" and stored["label"] is None and "no LLM provider" in stored["reason"]
        assert [a["id"] for a in api.get("/v1/adjudications").json()] == [body["id"]]


def test_panel_on_fake_server(
    fake: FakeOpenAIServer, models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = LLMSettings(base_url=fake.base_url, api_key="k", max_retries=0, panel="adj")
    fake.script("adj-a", [Reply(MA)])
    fake.script("adj-b", [Reply(f"```json\n{MA}\n```")])
    fake.script("adj-c", [Reply("I think it is fine.")])  # never valid: recorded as invalid
    settings = make_settings(models_dir, llm)
    # a source of this run's own: the worker's response cache keeps answers across runs, keyed by prompt
    source = f"Evaṃ me sutaṃ {uuid.uuid4().hex}."
    with make_client(settings, tenant, monkeypatch) as api:
        r = api.post(
            "/v1/adjudications",
            json={"source": source, "candidate": "Thus I did not hear.", "reference": "So I have heard."},
        )
        assert r.status_code == 202, r.text
        aid = r.json()["id"]
        # the panel runs on a worker, not in the request: nothing was asked yet
        assert r.json()["status"] == "pending" and fake.requests == []
        assert api.get(f"/v1/adjudications/{aid}").json()["status"] == "pending"
        assert api.get("/v1/adjudications").json() == []  # only stored records are listed
        assert run_worker_burst(settings).jobs_failed == 0
        body = api.get(f"/v1/adjudications/{aid}").json()
        assert body["status"] == "done" and body["label"] == "MAJOR"
        statuses = {j["judge_id"]: (j["status"], j["vote"]) for j in body["judges"]}
        assert statuses == {"ja": ("valid", "major"), "jb": ("valid", "major"), "jc": ("invalid", None)}
        prompt = fake.requests_for("adj-a")[0].user_text
        assert "So I have heard." in prompt and "REFERENCE TRANSLATION (aid only)" in prompt
        fake.script("adj-a", [Reply(MI)])
        fake.script("adj-b", [Reply(NO)])
        r2 = api.post(
            "/v1/adjudications",
            json={"source": source, "candidate": "Thus.", "reference": "So I have heard."},
        ).json()
        run_worker_burst(settings)
        r2 = api.get(f"/v1/adjudications/{r2['id']}").json()
        assert r2["status"] == "inconclusive" and r2["label"] is None and "could change" in r2["reason"]
        # panel labels are stored apart from human verdicts
        assert api.get("/v1/calibration/report").json()["labels"]["items"] == 0
        assert len(api.get("/v1/adjudications").json()) == 2


ADJ = {"source": "Evaṃ me sutaṃ.", "candidate": "Thus I heard.", "reference": "So I have heard.", "panel": "adj"}


def _grade(judge_model: str) -> dict[str, Any]:
    return {"question": f"q {uuid.uuid4().hex}", "answer": "a", "response": "r",
            "judges": [{"model": judge_model, "family": "openai"}]}  # fmt: skip


@contextlib.contextmanager
def _adjudication_and_grade(
    fake: FakeOpenAIServer, models_dir: Path, tenant: str, monkeypatch: pytest.MonkeyPatch, grader: str, **llm: Any
) -> Iterator[tuple[Settings, Any, str, str]]:
    """The settings, the API, and the ids of a queued adjudication and a queued MATA grade (judged by ``grader``)."""
    llm_settings = LLMSettings(base_url=fake.base_url, api_key="k", max_retries=0, panel="adj", **llm)
    settings = make_settings(models_dir, llm_settings)
    with make_client(settings, tenant, monkeypatch) as api:
        # a source of this run's own: the worker's response cache keeps answers across runs
        adj = api.post("/v1/adjudications", json={**ADJ, "source": f"Evaṃ {uuid.uuid4().hex}."}).json()
        grade = api.post("/v1/mata/grades", json=_grade(grader)).json()
        yield settings, api, adj["id"], grade["id"]


def test_a_failing_adjudication_reads_failed_like_a_mata_job(
    fake: FakeOpenAIServer, models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _adjudication_and_grade(fake, models_dir, tenant, monkeypatch, "grader-x") as (settings, api, adj, grade):
        # a judge client that fails outright: the job ends, with the reason, instead of failing in ARQ for good
        assert run_worker_burst(settings, ctx={"llm": BrokenClient()}).jobs_failed == 0
        failed_adj = api.get(f"/v1/adjudications/{adj}").json()
        failed_grade = api.get(f"/v1/mata/grades/{grade}").json()
        assert failed_grade["status"] == "failed" and "the judge client is broken" in failed_grade["error"]
        assert failed_adj["status"] == "failed" and "the judge client is broken" in failed_adj["reason"]
        assert api.get("/v1/adjudications").json() == []  # no label was stored
        # a redelivery finds it finished and asks nobody
        run_worker_burst(settings)
        assert fake.requests == [] and api.get(f"/v1/adjudications/{adj}").json()["status"] == "failed"


def test_an_adjudication_lost_too_often_reads_failed_like_a_mata_job(
    fake: FakeOpenAIServer, models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.judge_jobs import adjudicate, judge
    from workers.policy import MAX_TRIES

    with _adjudication_and_grade(fake, models_dir, tenant, monkeypatch, "grader-x") as (settings, api, adj, grade):
        # ARQ's spare delivery: every try so far lost its worker
        assert run_job(settings, adjudicate, tenant, adj, job_try=MAX_TRIES + 1) == "gave up"
        assert run_job(settings, judge, tenant, "grades", grade, job_try=MAX_TRIES + 1) == "gave up"
        assert "gave up" in api.get(f"/v1/adjudications/{adj}").json()["reason"]
        assert "gave up" in api.get(f"/v1/mata/grades/{grade}").json()["error"]
        run_worker_burst(settings)  # the queued deliveries find them finished
        assert fake.requests == [] and api.get(f"/v1/adjudications/{adj}").json()["status"] == "failed"


def test_an_adjudication_past_the_llm_deadline_reads_its_judges_timed_out_like_a_mata_job(
    fake: FakeOpenAIServer, models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for model in ("adj-a", "adj-b", "adj-c"):
        fake.script(model, [Reply(MA, delay=6.0)])  # each judge answers long after the deadline
    judged = _adjudication_and_grade(fake, models_dir, tenant, monkeypatch, "slow-6", deadline_seconds=1.0)
    with judged as (settings, api, adj, grade):
        started = time.monotonic()
        assert run_worker_burst(settings).jobs_failed == 0
        assert time.monotonic() - started < 5.0  # nobody waited for the answers
        body = api.get(f"/v1/adjudications/{adj}").json()
        graded = api.get(f"/v1/mata/grades/{grade}").json()
    assert [j["status"] for j in graded["results"][0]["judges"]] == ["timed_out"], graded
    assert body["status"] == "inconclusive" and body["label"] is None
    assert [j["status"] for j in body["judges"]] == ["timed_out"] * 3
