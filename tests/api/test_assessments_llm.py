"""The LLM tier end to end: API -> cheap tier -> cascade -> GEMBA panel on a local OpenAI-protocol server -> final
risk. Checks what ran, what it cost, that judge scores are the judges' own, and the panel's red flag."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import LLMSettings, Settings
from service.state.durable.records_store import RecordStore
from tests.conftest import issue_test_key, keyed
from tests.fakes.openai_server import FakeOpenAIServer, closed_port_url, models_with_panel, openai_server  # noqa: F401
from tests.records_support import store_of
from tests.worker_support import BrokenClient, CallbackReceiver, run_worker_burst
from workers.settings import WorkerSettings

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(65)

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
    # a queue of this test's own: a worker with a provider must not take judge jobs other tests left queued
    redis = replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q")
    return replace(test_settings, llm=llm, risk=replace(test_settings.risk, models_dir=str(models)), redis=redis)


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


# ------------------------------------------------------------------------------------- answers first, bounded judges


def _variant(settings: Settings, name: str, judges: list[dict[str, Any]], **llm: Any) -> Settings:
    """The e2e settings with a panel of these judges, LLM overrides, and a queue of this test's own."""
    panel = {"name": name, "version": "t1", "judges_per_candidate": len(judges), "judges": judges}
    (Path(settings.risk.models_dir) / "panels" / f"{name}.json").write_text(json.dumps(panel))
    return replace(
        settings,
        llm=replace(settings.llm, panel=name, **llm),
        redis=replace(settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"),
    )


def _body(checks: list[str], **extra: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex  # fresh texts: judges' answers are cached in Redis by prompt, across runs too
    return {
        "source": {"text": f"{SOURCE} {tag}", "lang": "pli"},
        "candidates": [
            {"id": f"c{i}", "text": f"{t} ({tag[:6]})", "model": "vendor/model"} for i, t in enumerate(CANDIDATES)
        ],
        "checks": checks,
        "review_budget": 1.0,
        **extra,
    }


@contextlib.contextmanager
def _api(settings: Settings, index: NoveltyIndex) -> Iterator[Any]:
    tenant = f"test-af-{uuid.uuid4().hex[:8]}"  # a queue of this test's own tenant
    with TestClient(app=create_app(settings, resources=Resources(settings=settings, indexes={"pli": index}))) as tc:
        tc.tenant = tenant
        yield keyed(tc, issue_test_key(settings, tenant))


def _poll(api: Any, aid: str, until: Callable[[dict[str, Any]], bool], timeout: float = 30.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        got: dict[str, Any] = api.get(f"/v1/assessments/{aid}").json()
        if until(got) or time.monotonic() > end:
            return got
        time.sleep(0.05)


def test_the_cheap_result_is_published_while_the_judges_work_and_the_final_one_refines_it(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    settings = _variant(
        llm_settings,
        "slowpanel",
        [
            {"id": "low", "model": "score-55", "family": "openai"},  # first: it backtranslates (and fails to parse)
            {"id": "slow", "model": "slow-4", "family": "anthropic"},
            {"id": "hash", "model": "hash-score", "family": "google", "max_tokens": 4096},  # a reasoning model
        ],
    )
    receiver = CallbackReceiver([200])
    body = _body(
        ["peer_distance", "hard_flags", "critical", "gemba", "backtranslation"],
        callback_url=receiver.url,
        callback_events=["cheap", "final"],
    )
    try:
        with _api(settings, sn12_index) as api:
            aid = api.post("/v1/assessments", json=body).json()["id"]
            worker = threading.Thread(target=run_worker_burst, args=(settings,))
            worker.start()
            partial = _poll(api, aid, lambda a: a["status"] != "pending" and a["status"] != "running")
            # the judges are still working (one takes 4 s): the cheap tier's answer is readable already
            assert partial["status"] == "partial", partial
            pending = {"status": "pending", "reason": None, "checks": {}, "judges": {}, "attempts": {}}
            assert partial["llm_tier"] == pending
            cheap = {c["id"]: c["risk"] for c in partial["candidates"]}
            assert all(r is not None and r["basis"] == "cheap" for r in cheap.values())
            assert all(c["budget"]["tier"] for c in partial["candidates"])
            queued = api.get("/v1/review/queue", params={"scope": "all"}).json()["items"]
            assert {q["candidate_id"]: q["priority"] for q in queued} == {k: r["priority"] for k, r in cheap.items()}
            worker.join(timeout=60)
            done = api.get(f"/v1/assessments/{aid}").json()
            queued_after = api.get("/v1/review/queue", params={"scope": "all"}).json()["items"]
    finally:
        receiver.close()
    assert done["status"] == "done" and done["llm_tier"]["status"] == "done", done["llm_tier"]
    # the backtranslating judge answers a number, not the JSON asked for: its answers do not parse
    assert done["llm_tier"]["checks"] == {"gemba": {"ran": 5}, "backtranslation": {"invalid": 5}}
    final = {c["id"]: c["risk"] for c in done["candidates"]}
    assert all(r["basis"] == "cheap+llm" and r["rule"].startswith("gemba-mean-risk@") for r in final.values())
    # the review queue holds each candidate once, now in the final ranking
    assert {q["candidate_id"]: q["priority"] for q in queued_after} == {k: r["priority"] for k, r in final.items()}
    assert {q["candidate_id"]: q["risk"]["basis"] for q in queued_after} == dict.fromkeys(final, "cheap+llm")
    # a callback at each stage: the cheap one carries the partial result, the last one the final result
    statuses = sorted(b["status"] for b in receiver.bodies)
    assert statuses == ["done", "partial"], statuses
    assert sorted(e or "" for e in receiver.events) == ["cheap", "final"]
    assert done["callback"]["status"] == done["cheap_callback"]["status"] == "delivered"
    # call sizes: a GEMBA answer is a number, a backtranslation about the source's length, the reasoning judge its own
    gemba = [r for r in openai_server.requests if '"pali"' not in r.user_text]
    back = [r for r in openai_server.requests if '"pali"' in r.user_text]
    assert {r.max_tokens for r in gemba if r.model != "hash-score"} == {16}
    assert {r.max_tokens for r in openai_server.requests if r.model == "hash-score"} == {4096}
    assert len(back) >= 5 and {r.max_tokens for r in back} == {64 + len(body["source"]["text"])}
    judges = done["llm"]["judges"]
    assert judges["slow"]["seconds"] >= 4 * 5 * 0.9 and judges["low"]["timeouts"] == 0, judges


def test_the_llm_deadline_holds_and_a_judge_that_keeps_timing_out_is_benched(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    settings = _variant(
        llm_settings,
        "stuckpanel",
        [
            {"id": "stuck", "model": "slow-30", "family": "anthropic"},
            {"id": "fine", "model": "score-80", "family": "openai"},
        ],
        read_timeout=1.0,
        deadline_seconds=6.0,
        max_retries=3,  # a timeout under a deadline is not retried all the same
        max_concurrency=1,  # calls queue for one connection: a benched judge's queued calls are never sent
    )
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        started = time.monotonic()
        run_worker_burst(settings)
        elapsed = time.monotonic() - started
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done", done
    assert elapsed < 6.0 + 10, elapsed  # the deadline, not 5 candidates x 30 s x 4 tries
    assert len(openai_server.requests_for("slow-30")) == 2  # two timeouts, then benched for the rest
    assert done["llm"]["timed_out"] == ["stuck"]
    assert done["llm"]["judges"]["stuck"]["timeouts"] == 2 and done["llm"]["judges"]["fine"]["timeouts"] == 0
    for c in done["candidates"]:
        detail = done["llm"]["details"][c["id"]]["gemba_result"]
        statuses = {j["judge_id"]: j["status"] for j in detail["judges"]}
        assert statuses == {"stuck": "timed_out", "fine": "valid"}, statuses
        assert detail["stats"]["n_valid"] == 1 and detail["stats"]["n_judges"] == 2  # how many answered
        assert c["risk"]["basis"] == "cheap+llm"


@pytest.mark.parametrize(
    ("model", "reason"), [("error-500", "HTTP 500"), ("ratelimited", "rate limited"), (None, "ConnectError")]
)
def test_an_upstream_outage_leaves_the_cheap_result_with_the_reason(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
    model: str | None,
    reason: str,
) -> None:
    # a judge answering 500 or 429 for the whole run, or a provider that is down (nothing listens)
    judges = [{"id": "down", "model": model or "score-80", "family": "anthropic"}]
    llm: dict[str, Any] = {"max_retries": 1}
    if model is None:
        llm["base_url"] = closed_port_url()
    settings = _variant(llm_settings, "outage", judges, **llm)
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        assert run_worker_burst(settings).jobs_failed == 0
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["error"] is None
    assert done["llm_tier"]["status"] == "failed" and reason in done["llm_tier"]["reason"], done["llm_tier"]
    assert done["llm_tier"]["checks"] == {"gemba": {"failed": 5}}
    for c in done["candidates"]:
        assert c["risk"]["basis"] == "cheap" and c["budget"]["tier"]
        assert c["signals"]["peer_chrf_risk"]["status"] == "value"  # the cheap tier intact
        assert reason in c["signals"]["gemba_mean_risk"]["reason"]


def test_an_llm_job_past_arqs_timeout_still_ends_with_the_cheap_result(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    settings = _variant(llm_settings, "pastarq", [{"id": "slow", "model": "slow-20", "family": "anthropic"}])
    # ARQ gives up on the job long before the judge (and the LLM deadline) would end it
    functions = [replace(f, timeout_s=2.0) if f.name == "assess_llm" else f for f in WorkerSettings.functions]
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        started = time.monotonic()
        worker = run_worker_burst(settings, functions=functions, ctx={"llm_job_timeout": 2.0})
        done = api.get(f"/v1/assessments/{aid}").json()
    assert time.monotonic() - started < 15 and worker.jobs_failed == 1  # ARQ counted its timeout
    assert done["status"] == "done", done
    assert done["llm_tier"]["status"] == "timed_out" and "job timeout" in done["llm_tier"]["reason"]
    assert all(c["risk"] is not None and c["risk"]["basis"] == "cheap" for c in done["candidates"])
    assert all("job timeout" in c["signals"]["gemba_mean_risk"]["reason"] for c in done["candidates"])


def test_a_worker_shutdown_during_the_llm_tier_leaves_the_job_to_run_again(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    from workers.assessment_jobs import assess_cheap, assess_llm

    settings = _variant(llm_settings, "shutdown", [{"id": "slow", "model": "slow-3", "family": "anthropic"}])
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]

        async def cancelled_llm(ctx: dict[str, Any]) -> None:
            task = asyncio.create_task(assess_llm(ctx, api.tenant, aid))
            await asyncio.sleep(1.0)  # the judge is answering (3 s): the worker is told to stop
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        with _worker_ctx(settings) as run:
            assert run(lambda ctx: assess_cheap(ctx, api.tenant, aid)) == "cheap done; llm queued"
            run(cancelled_llm)
        interrupted = api.get(f"/v1/assessments/{aid}").json()
        # nothing was thrown away: the cheap result stands and the LLM tier is still to come
        assert interrupted["status"] == "partial" and interrupted["llm_tier"]["status"] == "pending"
        run_worker_burst(settings)  # ARQ's redelivery of the cancelled job
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["llm_tier"]["status"] == "done", done["llm_tier"]
    assert all(c["risk"]["basis"] == "cheap+llm" for c in done["candidates"])


def test_an_llm_tier_that_fails_outright_ends_with_the_cheap_result_and_the_reason(
    sn12_index: NoveltyIndex, llm_settings: Settings
) -> None:
    settings = _variant(llm_settings, "broken", [{"id": "a", "model": "score-80", "family": "anthropic"}])
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        run_worker_burst(settings, ctx={"llm": BrokenClient()})
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["error"] is None, done
    assert done["llm_tier"]["status"] == "failed" and "the judge client is broken" in done["llm_tier"]["reason"]
    assert all(c["risk"] is not None and c["risk"]["basis"] == "cheap" for c in done["candidates"])


def test_an_llm_job_delivered_beyond_its_last_try_ends_with_the_cheap_result(
    sn12_index: NoveltyIndex, llm_settings: Settings
) -> None:
    from workers.assessment_jobs import assess_cheap, assess_llm
    from workers.policy import MAX_TRIES

    settings = _variant(llm_settings, "lost", [{"id": "a", "model": "score-80", "family": "anthropic"}])
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        with _worker_ctx(settings) as run:
            assert run(lambda ctx: assess_cheap(ctx, api.tenant, aid)) == "cheap done; llm queued"
        with _worker_ctx(settings, job_try=MAX_TRIES + 1) as run:  # every try so far lost its worker
            assert run(lambda ctx: assess_llm(ctx, api.tenant, aid)) == "gave up"
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["error"] is None, done
    assert done["llm_tier"]["status"] == "failed" and "gave up after" in done["llm_tier"]["reason"]
    assert all(c["risk"]["basis"] == "cheap" for c in done["candidates"])


@contextlib.contextmanager
def _worker_ctx(settings: Settings, **extra: Any) -> Iterator[Callable[[Any], Any]]:
    """Run job functions directly with a worker's shared clients (what ARQ would pass them), one event loop."""
    from arq import create_pool
    from arq.connections import RedisSettings

    from workers.context import WorkerContext
    from workers.lifecycle import shutdown, startup

    loop = asyncio.new_event_loop()
    ctx: dict[str, Any] = {"settings": settings, "nice": False, "job_try": 1, **extra}

    async def open_() -> None:
        await startup(ctx)
        ctx["redis"] = await create_pool(
            RedisSettings.from_dsn(settings.redis.url), default_queue_name=settings.redis.queue_name
        )
        WorkerContext.of(ctx).pool = ctx["redis"]  # after startup: no reconcile loop beside the jobs run here

    loop.run_until_complete(open_())
    try:
        yield lambda make: loop.run_until_complete(make(ctx))
    finally:

        async def close() -> None:
            await ctx["redis"].aclose()
            await shutdown(ctx)

        loop.run_until_complete(close())
        loop.close()


class SlowChecker:
    """The real critical checker, taking its time (a cold encoder, a huge passage)."""

    def __init__(self, seconds: float) -> None:
        from service.core.critical import default_checker

        self.inner = default_checker()
        self.signature = self.inner.signature
        self.seconds = seconds

    def check_passage(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.seconds)
        return self.inner.check_passage(*args, **kwargs)


def test_a_cheap_job_past_arqs_timeout_reads_failed_with_the_reason(
    sn12_index: NoveltyIndex, llm_settings: Settings
) -> None:
    settings = _variant(llm_settings, "slowcheap", [{"id": "a", "model": "score-80", "family": "anthropic"}])
    functions = [replace(f, timeout_s=1.0) if f.name == "assess_cheap" else f for f in WorkerSettings.functions]
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "critical"])).json()["id"]
        run_worker_burst(settings, functions=functions, ctx={"critical": SlowChecker(3.0), "cheap_job_timeout": 1.0})
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "failed" and "job timeout" in done["error"], done


def test_a_cheap_only_callback_is_sent_when_there_is_no_llm_tier(
    sn12_index: NoveltyIndex, llm_settings: Settings
) -> None:
    settings = _variant(llm_settings, "nollm", [{"id": "a", "model": "score-80", "family": "anthropic"}])
    receiver = CallbackReceiver([200])
    try:
        with _api(settings, sn12_index) as api:
            body = _body(["peer_distance", "hard_flags"], callback_url=receiver.url, callback_events=["cheap"])
            aid = api.post("/v1/assessments", json=body).json()["id"]
            run_worker_burst(settings)
            done = api.get(f"/v1/assessments/{aid}").json()
    finally:
        receiver.close()
    assert [b["status"] for b in receiver.bodies] == ["done"] and receiver.events == ["cheap"]
    assert done["cheap_callback"]["status"] == "delivered" and done["callback"] is None


def test_a_retry_of_the_llm_tier_gets_what_is_left_of_its_deadline(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:

    from workers.assessment_jobs import assess_cheap

    openai_server.reset()
    settings = _variant(llm_settings, "late", [{"id": "a", "model": "score-81", "family": "anthropic"}])
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        with _worker_ctx(settings) as run:
            assert run(lambda ctx: assess_cheap(ctx, api.tenant, aid)) == "cheap done; llm queued"
        # an earlier try of the LLM tier started long ago (and was lost): its deadline is spent
        records = RecordStore(store_of(settings.durable))
        records.mark(api.tenant, aid, llm_started_at=time.time() - 1000)
        run_worker_burst(settings)
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["llm_tier"]["status"] == "timed_out", done["llm_tier"]
    assert "across tries" in done["llm_tier"]["reason"]
    assert openai_server.requests_for("score-81") == []  # nothing asked after the deadline


def test_a_late_cheap_delivery_hands_over_to_the_llm_job(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    from workers.assessment_jobs import assess_cheap
    from workers.policy import MAX_TRIES

    settings = _variant(llm_settings, "handover", [{"id": "a", "model": "score-82", "family": "anthropic"}])
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        with _worker_ctx(settings) as run:
            assert run(lambda ctx: assess_cheap(ctx, api.tenant, aid)) == "cheap done; llm queued"
        # ARQ's spare delivery of the cheap job (its worker was lost after queueing the LLM job)
        with _worker_ctx(settings, job_try=MAX_TRIES + 1) as run:
            assert run(lambda ctx: assess_cheap(ctx, api.tenant, aid)) == "gave up; llm queued"
        run_worker_burst(settings)
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["llm_tier"]["status"] == "done", done["llm_tier"]
    assert all(c["risk"]["basis"] == "cheap+llm" for c in done["candidates"])


def test_basis_is_cheap_when_no_llm_signal_scored_the_risk(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    # a backtranslation ran, but the risk model that scored has no term for it: the risk is the cheap tier's
    settings = _variant(llm_settings, "btonly", [{"id": "h", "model": "hash-score", "family": "google"}])
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "backtranslation"])).json()["id"]
        run_worker_burst(settings)
        done = api.get(f"/v1/assessments/{aid}").json()
    assert done["llm_tier"]["checks"] == {"backtranslation": {"ran": 5}}
    assert all(c["signals"]["backtranslation_chrf_risk"]["status"] == "value" for c in done["candidates"])
    assert all(c["risk"]["basis"] == "cheap" for c in done["candidates"])


def test_judges_whose_answers_do_not_parse_read_invalid_with_the_cause_not_as_timeouts(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    judges = [
        {"id": "cut", "model": "truncated", "family": "anthropic"},
        {"id": "cut2", "model": "truncated", "family": "openai"},
        {"id": "prose", "model": "junk", "family": "google"},
    ]
    settings = _variant(llm_settings, "unparseable", judges, parse_attempts=2, deadline_seconds=60.0)
    with _api(settings, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        assert run_worker_burst(settings).jobs_failed == 0
        done = api.get(f"/v1/assessments/{aid}").json()
    tier = done["llm_tier"]
    assert tier["status"] == "invalid", tier
    assert tier["reason"] == "15 of 15 judges gave answers that do not parse: truncated at max_tokens", tier
    assert tier["checks"] == {"gemba": {"invalid": 5}}
    assert tier["judges"] == {"gemba": {"invalid": 15}} and tier["attempts"] == {"gemba": 30}
    assert len(openai_server.requests) == 30  # 5 candidates x 3 judges x 2 attempts: bounded, not by the deadline
    for c in done["candidates"]:
        assert c["risk"]["basis"] == "cheap"
        check = done["llm"]["details"][c["id"]]["checks"][0]
        assert check["status"] == "invalid" and check["reason"].startswith("3 of 3 judges gave answers"), check
        for j in done["llm"]["details"][c["id"]]["gemba_result"]["judges"]:
            assert j["status"] == "invalid" and j["score"] is None and j["raw"] and j["parse_error"], j
            assert len(j["attempts"]) == 2


def test_the_worker_decides_whether_the_llm_tier_runs_not_the_api(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    openai_server.reset()
    worker = _variant(llm_settings, "decides", [{"id": "a", "model": "score-80", "family": "anthropic"}])
    no_provider = replace(worker, llm=replace(worker.llm, base_url=""))
    # TRISK_LLM_BASE_URL on the worker only: the judges run
    with _api(no_provider, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        assert run_worker_burst(worker).jobs_failed == 0
        judged = api.get(f"/v1/assessments/{aid}").json()
    assert judged["llm_tier"]["status"] == "done", judged["llm_tier"]
    assert all(c["risk"]["basis"] == "cheap+llm" for c in judged["candidates"])
    assert len(openai_server.requests_for("score-80")) == 5
    # on the API only: the worker cannot judge, so the tier reads skipped with the reason, and nothing is asked
    openai_server.reset()
    with _api(worker, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "gemba"])).json()["id"]
        assert run_worker_burst(no_provider).jobs_failed == 0
        skipped = api.get(f"/v1/assessments/{aid}").json()
    assert skipped["status"] == "done"
    assert skipped["llm_tier"]["status"] == "skipped" and skipped["llm_tier"]["reason"] == "no LLM provider configured"
    assert skipped["llm_tier"]["checks"] == {"gemba": {"skipped": 5}}
    for c in skipped["candidates"]:
        assert c["signals"]["gemba_mean_risk"] == {"status": "skipped", "reason": "no LLM provider configured"}
        assert c["risk"]["basis"] == "cheap"
    assert openai_server.requests == []


def test_judge_error_spans_end_to_end_become_findings_the_reviewer_judges(
    llm_client: Any,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    """Issue 33 item 4: asked for (``error_spans``), each judge quotes errors; the quotes found are merged with their
    agreement into findings of the result and of the review item, which a verdict accepts or rejects; a quote not in
    the candidate is reported with its judge; the panel's mean MQM penalty is the signal."""
    from service.review.queue import item_id_of
    from tests.fakes.openai_server import Reply

    openai_server.reset()
    good = {"span": "heroes", "category": "accuracy/terminology", "severity": "major"}
    normalised = {"span": "HEROES", "category": "accuracy/terminology", "severity": "minor"}
    hallucinated = {"span": "the lotus pond", "category": "accuracy/addition", "severity": "critical"}
    openai_server.script("score-90", [Reply(json.dumps({"errors": [good]}))])
    openai_server.script("score-55", [Reply(json.dumps({"errors": [normalised, hallucinated]}))])
    # hash-score answers a span prompt with no errors
    body = {
        "source": {"text": f"{SOURCE} {uuid.uuid4().hex}", "lang": "pli"},
        "candidates": [{"id": f"c{i}", "text": t, "model": "vendor/model"} for i, t in enumerate(CANDIDATES)],
        "checks": ["peer_distance", "hard_flags", "error_spans"],
        "review_budget": 1.0,
    }
    aid = llm_client.post("/v1/assessments", json=body).json()["id"]
    assert run_worker_burst(llm_settings).jobs_failed == 0
    done = llm_client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done", done
    assert len(openai_server.requests) == 3 * len(CANDIDATES)  # one span prompt per judge, no GEMBA asked
    assert done["signature"]["llm"]["spans_prompt"]["version"] == "gemba-mqm-spans/1"
    assert done["llm_tier"]["checks"]["error_spans"] == {"ran": len(CANDIDATES)}
    assert done["llm_tier"]["judges"]["error_spans"] == {"valid": 3 * len(CANDIDATES)}
    for c, text in zip(done["candidates"], CANDIDATES, strict=True):
        signal = c["signals"]["error_spans_mqm_risk"]
        assert signal["status"] == "value" and signal["value"] == pytest.approx((5 + 1 + 0) / 3), signal
        assert signal["detail"]["unlocated"] == {"b": ["the lotus pond"]}
        spans = [f for f in c["findings"] if f["rule"] == "judge_span"]
        start = text.find("heroes")
        assert [(f["id"], f["category"], f["severity"], f["spans"]) for f in spans] == [
            ("judge_span", "accuracy/terminology", "major", [{"start": start, "end": start + 6}])
        ]
        assert "marked by 2 of 3 judges" in spans[0]["detail"]
        assert not any(f["rule"] == "judge_span" for f in c["flags"])  # a finding, never a forcing flag
    detail = done["llm"]["details"]["c0"]["error_spans_result"]
    assert [j["status"] for j in detail["judges"]] == ["valid", "valid", "valid"]

    item = item_id_of(aid, "c0")
    listed = llm_client.get(f"/v1/review/items/{item}").json()["findings"]
    assert [f["id"] for f in listed if f["rule"] == "judge_span"] == ["judge_span"]
    said = [{"finding": "judge_span", "decision": "reject"}]
    made = llm_client.post(f"/v1/review/items/{item}/verdict", json={"label": "VALID", "findings": said})
    assert made.status_code == 201, made.text
    assert made.json()["findings"] == [{**said[0], "severity": None}]


def test_error_spans_without_a_provider_read_skipped_with_the_reason(
    sn12_index: NoveltyIndex,
    llm_settings: Settings,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    """Never a made-up span or number: a worker without a provider writes the error-span signal skipped."""
    openai_server.reset()
    worker = _variant(llm_settings, "nospans", [{"id": "a", "model": "score-80", "family": "anthropic"}])
    no_provider = replace(worker, llm=replace(worker.llm, base_url=""))
    with _api(worker, sn12_index) as api:
        aid = api.post("/v1/assessments", json=_body(["peer_distance", "hard_flags", "error_spans"])).json()["id"]
        assert run_worker_burst(no_provider).jobs_failed == 0
        skipped = api.get(f"/v1/assessments/{aid}").json()
    assert skipped["status"] == "done"
    assert skipped["llm_tier"]["checks"] == {"error_spans": {"skipped": 5}}
    for c in skipped["candidates"]:
        assert c["signals"]["error_spans_mqm_risk"] == {"status": "skipped", "reason": "no LLM provider configured"}
        assert not any(f["rule"] == "judge_span" for f in c["findings"])
    assert openai_server.requests == []
