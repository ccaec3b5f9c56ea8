"""The ARQ jobs: ``assess_cheap`` (novelty for batch items, embeddings, signals, flags), ``assess_llm`` (the judge
cascade), ``deliver_callback`` and ``adjudicate``; shared clients live in ``ctx``.

Delivery is at least once, so every job is idempotent as a whole: it re-reads what is stored and does only what is
missing. Each part is written once (``part:cheap``, ``part:llm``, ``final``: HSETNX; a second delivery that loses the
race reads the winner's part). Whenever the final part exists, the tail runs (scores pooled for the budget rank,
review items, the callback job), each step safe to repeat, until ``tail`` is marked done; a failure after the final
write never marks the assessment failed.

Failures: transient ones (an upstream error, Redis or the network) are retried with a growing delay up to
``MAX_TRIES``; anything else, or the last try, marks the assessment failed with the reason. ARQ is given one spare
delivery beyond ``MAX_TRIES`` so that a worker lost during the last try still leaves a final state behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from service.core.judge_jobs import JobKind

import httpx
import redis.exceptions
from arq import Retry
from redis.asyncio import Redis

from service.core import lanes
from service.core.budget import SeenScores
from service.core.callbacks import CallbackRefused, post_callback
from service.core.durable.access import AccessStore
from service.core.errors import NotFound, TriskError, UpstreamError
from service.core.novelty_report import NoveltyPending, source_novelty
from service.core.pipeline import cheap_tier, check_embedding_models, final_part, final_risks
from service.core.ratelimit import charged_to
from service.core.records import (
    LLM_CHECKS,
    CandidateOutcome,
    CheapPart,
    LLMPart,
    LLMSignature,
    PromptVersion,
)
from service.core.risk import RiskRegistry
from service.core.risk_catalog import ModelCatalog
from service.core.settings import Settings, get_settings
from service.core.store import AssessmentState, Store
from service.core.telemetry import CHECK_FAILURES, log_context, timed_job
from service.core.types import SignalSkipped
from service.core.views import render_assessment

__all__ = [
    "MAX_TRIES",
    "adjudicate",
    "assess_cheap",
    "assess_llm",
    "deliver_callback",
    "finalize",
    "judge",
    "llm_for",
    "retry_delay",
    "shutdown",
    "startup",
]

logger = logging.getLogger("trisk.workers")
NO_PROVIDER = "no LLM provider configured"
MAX_TRIES = 3  # deliveries of an assessment job that may do work; ARQ's max_tries is one more (see the docstring)
TRANSIENT = (UpstreamError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def retry_delay(tries: int) -> float:
    """Seconds before the next try of a failed job: 2, 4, 8, ... capped at a minute."""
    return float(min(60, 2**tries))


# ------------------------------------------------------------------------------------------------------ lifecycle


def _open_embedder(settings: Settings, backend: str) -> tuple[Any, dict[str, Any], str | None]:
    """An embedder with its cache, its signature, and the reason it is unavailable (None when it works)."""
    try:
        from service.core.embeddings import open_embedder

        emb_settings = dataclasses.replace(settings.embedding, backend=backend)
        embedder = open_embedder(emb_settings, redis_url=settings.redis.url)
        return embedder, dict(embedder.signature), None
    except Exception as exc:  # signals that need it read skipped with this reason
        logger.error("no %s embedding backend: %s", backend, exc)
        return None, {"backend": backend, "error": str(exc)}, f"embedding backend {backend} unavailable: {exc}"


class Embedders:
    """The peer encoder (opened at start) and the multilingual source encoder (opened on first use)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        peer_backend = settings.embedding.peer_backend
        self.same = peer_backend in ("same", settings.embedding.backend)
        self.peer, self.peer_signature, self.peer_error = _open_embedder(
            settings, settings.embedding.backend if self.same else peer_backend
        )
        self._source: Any = self.peer if self.same else None
        self.source_signature: dict[str, Any] | None = self.peer_signature if self.same else None
        self.source_error: str | None = None

    def source(self) -> Any:
        if self._source is None and self.source_error is None:
            self._source, self.source_signature, self.source_error = _open_embedder(
                self.settings, self.settings.embedding.backend
            )
        return self._source

    def signature(self, used_source: bool) -> dict[str, Any]:
        sig: dict[str, Any] = {"peer": self.peer_signature}
        if used_source:
            sig["source"] = self.source_signature
        return sig


class Indexes:
    """The novelty indexes, loaded on first use: only batch items leave their novelty to the workers."""

    def __init__(self, paths: str) -> None:
        self.paths = paths
        self._loaded: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> dict[str, Any]:
        async with self._lock:
            if self._loaded is None:
                from service.core.novelty import load_indexes

                self._loaded, errors = await asyncio.to_thread(load_indexes, self.paths)
                for path, error in errors.items():
                    logger.error("novelty index %s not loaded: %s", path, error)
            return self._loaded


async def startup(ctx: dict[str, Any]) -> None:
    """Open the shared clients; anything a test already put in ``ctx`` (settings, fakes) is kept."""
    from service.core.critical import default_checker
    from service.core.durable import open_store
    from service.core.llm import LLMClient, ResponseCache, load_panel

    settings: Settings = ctx.setdefault("settings", get_settings())
    if settings.jobs.worker_nice and ctx.get("nice", True):
        # the API answers in milliseconds and must not wait behind embedding batches on a shared machine
        os.nice(settings.jobs.worker_nice)
    client = ctx.setdefault("redis_client", Redis.from_url(settings.redis.url))
    ctx.setdefault("store", Store(client, retention_seconds=settings.redis.retention_seconds))
    if "catalog" not in ctx:
        shipped = RiskRegistry.load(settings.risk.models_dir)
        # migrates the schema first (idempotent; workers and API pods starting together wait for each other)
        store = await asyncio.to_thread(open_store, settings.durable)
        ctx["catalog"] = ModelCatalog(shipped, store, settings.risk.model)
    embedders: Embedders = ctx.setdefault("embedders", Embedders(settings))
    check_embedding_models(
        ctx["catalog"].shipped,
        [settings.risk.model, settings.risk.routing_model],
        embedders.peer_signature.get("model_id"),
    )
    ctx.setdefault("indexes", Indexes(settings.index.path))
    ctx.setdefault("length_models", {})
    ctx.setdefault("critical", default_checker())
    if "llm" not in ctx:
        ctx["llm"] = (
            LLMClient.from_settings(settings.llm, cache=ResponseCache(client)) if settings.llm.configured else None
        )
    ctx.setdefault("llm_panel", load_panel(settings.llm.panel, panels_dir=Path(settings.risk.models_dir) / "panels"))
    ctx.setdefault("http", httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0), follow_redirects=False))
    ctx.setdefault("retry_delay", retry_delay)
    logger.info("worker ready: peer embedding %s, LLM %s", embedders.peer_signature, "on" if ctx["llm"] else "off")


async def shutdown(ctx: dict[str, Any]) -> None:
    if ctx.get("llm") is not None:
        await ctx["llm"].aclose()
    if ctx.get("http") is not None:
        await ctx["http"].aclose()
    if ctx.get("redis_client") is not None:
        await ctx["redis_client"].aclose()


def _length_model(ctx: dict[str, Any], src: str, tgt: str) -> Any:
    from service.core.signals import load_length_model

    cache: dict[tuple[str, str], Any] = ctx["length_models"]
    if (src, tgt) not in cache:
        cache[(src, tgt)] = load_length_model(src, tgt, ctx["settings"].risk.models_dir)
    return cache[(src, tgt)]


def llm_for(ctx: dict[str, Any], tenant: str) -> Any:
    """The worker's LLM client charged to ``tenant``'s daily budget (None without a provider)."""
    return charged_to(ctx.get("llm"), ctx["redis_client"], tenant, ctx["settings"].llm)


# --------------------------------------------------------------------------------------------------- failures


def _reason(exc: BaseException) -> str:
    return exc.detail if isinstance(exc, TriskError) else f"{type(exc).__name__}: {exc}"


async def _on_failure(ctx: dict[str, Any], state: AssessmentState, exc: Exception) -> str:
    """Retry what may pass (transient errors, or anything once the result is written: only the tail is left);
    otherwise, or on the last try, record the failure where the client sees it."""
    store: Store = ctx["store"]
    meta = state.meta
    tries = int(ctx.get("job_try", 1))
    final = state.final
    if final is None:
        try:
            final = await store.get_final(meta.tenant, meta.id)
        except Exception:  # Redis itself is failing: decide on what we know
            final = None
    CHECK_FAILURES.labels("tail" if final is not None else ("llm" if state.cheap is not None else "cheap")).inc()
    if final is not None:
        if tries < MAX_TRIES:
            logger.warning("assessment %s: tail failed on try %s, retrying: %s", meta.id, tries, _reason(exc))
            raise Retry(defer=ctx["retry_delay"](tries)) from exc
        logger.error("assessment %s: tail failed on the last try: %s", meta.id, _reason(exc))
        await store.mark_tail_failed(meta.tenant, meta.id, _reason(exc))
        return "done; tail failed"
    if isinstance(exc, TRANSIENT) and tries < MAX_TRIES:
        logger.warning("assessment %s: try %s failed, retrying: %s", meta.id, tries, _reason(exc))
        raise Retry(defer=ctx["retry_delay"](tries)) from exc
    logger.error("assessment %s failed on try %s: %s", meta.id, tries, _reason(exc))
    await store.mark_failed(meta.tenant, meta.id, _reason(exc))
    return "failed"


async def _load(ctx: dict[str, Any], tenant: str, aid: str) -> AssessmentState | None:
    try:
        return await ctx["store"].get(tenant, aid)
    except NotFound:
        return None  # expired or rolled back before the job ran


async def _gave_up(ctx: dict[str, Any], state: AssessmentState) -> bool:
    """A delivery beyond MAX_TRIES happens only when a worker was lost during the last try: record it and stop."""
    if int(ctx.get("job_try", 1)) <= MAX_TRIES:
        return False
    if state.final is None:
        await ctx["store"].mark_failed(
            state.meta.tenant, state.meta.id, f"gave up after {MAX_TRIES} tries: the worker running it was lost"
        )
    return True


# ----------------------------------------------------------------------------------------------------------- jobs


def _observed(job: str) -> Any:
    """Every job logs with its tenant and assessment id and is timed per outcome (its return value)."""

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        async def run(ctx: dict[str, Any], tenant: str, aid: str) -> str:
            with log_context(tenant=tenant, assessment_id=aid), timed_job(job) as timing:
                outcome: str = await fn(ctx, tenant, aid)
                timing["outcome"] = outcome.split(";")[0].split(" ")[0]
                logger.info("%s try %s: %s", job, ctx.get("job_try", 1), outcome)
                return outcome

        return run

    return wrap


@_observed("assess_cheap")
async def assess_cheap(ctx: dict[str, Any], tenant: str, aid: str) -> str:
    store: Store = ctx["store"]
    state = await _load(ctx, tenant, aid)
    if state is None:
        return "gone"
    if state.failed is not None:
        return "failed earlier"
    if state.tail_done:
        return "already finished"
    if await _gave_up(ctx, state):
        return "gave up"
    try:
        if state.final is None:
            if state.cheap is None:
                await store.mark_started(tenant, aid)
                part = await _run_cheap(ctx, state)
                if not await store.put_cheap(tenant, aid, part):
                    part = (await store.get(tenant, aid)).cheap or part  # another delivery wrote it first
                state.cheap = part
            if "llm" in state.meta.parts:
                await lanes.enqueue_follow_on(ctx["redis"], "assess_llm", state.meta, job_id=f"{aid}:llm")
                return "cheap done; llm queued"
        await finalize(ctx, state)
    except Retry:
        raise
    except Exception as exc:
        return await _on_failure(ctx, state, exc)
    return "done"


async def _run_cheap(ctx: dict[str, Any], state: AssessmentState) -> CheapPart:
    novelty, index_signature = state.meta.novelty, None
    if isinstance(novelty, NoveltyPending):
        req = state.meta.request
        indexes = await ctx["indexes"].get()
        novelty, index_signature = await asyncio.to_thread(source_novelty, indexes, req.source.text, req.source.lang)
    part = await asyncio.to_thread(_cheap_part, ctx, state, novelty)
    if isinstance(state.meta.novelty, NoveltyPending):
        part.novelty = novelty
        part.signature.index = index_signature
    return part


def _cheap_part(ctx: dict[str, Any], state: AssessmentState, novelty: Any) -> CheapPart:
    req = state.meta.request
    embedders: Embedders = ctx["embedders"]
    wants_source = "source_distance" in state.meta.checks
    part = cheap_tier(
        source_text=req.source.text,
        source_lang=req.source.lang,
        target_lang=req.target_lang,
        candidates=req.candidates,
        checks=state.meta.checks,
        novelty=novelty,
        peer_embedder=embedders.peer,
        source_embedder=embedders.source() if wants_source else None,
        embedder_signature=embedders.signature(wants_source),
        length_model=_length_model(ctx, req.source.lang, req.target_lang),
        critical=ctx["critical"],
        registry=ctx["catalog"].shipped,
        routing_model=ctx["settings"].risk.routing_model,
    )
    for outcome in part.candidates.values():  # say why an encoder was missing, not just that it was
        for name, error in (
            ("peer_centroid_distance", embedders.peer_error),
            ("source_distance", embedders.source_error),
        ):
            sig = outcome.signals.get(name)
            if error and isinstance(sig, SignalSkipped) and "backend" in sig.reason:
                outcome.signals[name] = SignalSkipped(reason=error)
    wanted_llm = [c for c in state.meta.checks if c in LLM_CHECKS]
    if wanted_llm and "llm" not in state.meta.parts:
        names = {"gemba": "gemba_mean_risk", "backtranslation": "backtranslation_chrf_risk"}
        for outcome in part.candidates.values():
            for check in wanted_llm:
                outcome.signals[names[check]] = SignalSkipped(reason=NO_PROVIDER)
    return part


@_observed("assess_llm")
async def assess_llm(ctx: dict[str, Any], tenant: str, aid: str) -> str:
    from service.core.llm import CascadeItem, run_cascade

    store: Store = ctx["store"]
    state = await _load(ctx, tenant, aid)
    if state is None:
        return "gone"
    if state.failed is not None:
        return "failed earlier"
    if state.tail_done:
        return "already finished"
    if state.cheap is None:
        raise Retry(defer=2)  # the cheap part is not stored yet (should not happen: it enqueues us)
    if await _gave_up(ctx, state):
        return "gave up"
    try:
        if state.final is None and state.llm is None:
            req = state.meta.request
            items = [
                CascadeItem(
                    id=c.id,
                    source=req.source.text,
                    candidate=c.text,
                    model=c.model,
                    routing_score=state.cheap.routing.get(c.id, float("nan")),
                )
                for c in req.candidates
            ]
            result = await run_cascade(
                llm_for(ctx, tenant),
                items,
                ctx["llm_panel"],
                ctx["settings"].llm,
                budget_fraction=req.review_budget,
                max_calls=req.max_llm_calls,
                gemba="gemba" in state.meta.checks,
                backtranslation="backtranslation" in state.meta.checks,
            )
            part = _llm_part(ctx, result)
            if not await store.put_llm(tenant, aid, part):
                part = (await store.get(tenant, aid)).llm or part
            state.llm = part
        await finalize(ctx, state)
    except Retry:
        raise
    except Exception as exc:
        return await _on_failure(ctx, state, exc)
    return "done"


def _llm_part(ctx: dict[str, Any], result: Any) -> LLMPart:
    from service.core.llm import (
        BACKTRANSLATION_PROMPT_HASH,
        BACKTRANSLATION_PROMPT_VERSION,
        GEMBA_PROMPT_HASH,
        GEMBA_PROMPT_VERSION,
    )

    candidates: dict[str, CandidateOutcome] = {}
    for c in result.candidates:
        flags = list(c.gemba_result.flags) if c.gemba_result is not None else []
        candidates[c.id] = CandidateOutcome(
            signals={"gemba_mean_risk": c.gemba, "backtranslation_chrf_risk": c.backtranslation}, flags=flags
        )
    panel = ctx["llm_panel"]
    signature = LLMSignature(
        panel=panel.name,
        panel_version=panel.version,
        judges=[j.model for j in panel.judges],
        gemba_prompt=PromptVersion(GEMBA_PROMPT_VERSION, GEMBA_PROMPT_HASH),
        backtranslation_prompt=PromptVersion(BACKTRANSLATION_PROMPT_VERSION, BACKTRANSLATION_PROMPT_HASH),
        temperature=ctx["settings"].llm.temperature,
    )
    return LLMPart(
        finished_at=time.time(),
        candidates=candidates,
        signature=signature,
        cost=result.cost,
        plan=result.plan,
        details={c.id: c for c in result.candidates},
    )


async def finalize(ctx: dict[str, Any], state: AssessmentState) -> None:
    """The final part (risk, budget rank, flags), written once; then the tail, which any delivery may repeat."""
    assert state.cheap is not None
    meta = state.meta
    store: Store = ctx["store"]
    if state.final is None:
        registry, model_name = await asyncio.to_thread(ctx["catalog"].active_model, meta.tenant)
        scored = final_risks(meta.request.candidates, state.cheap, state.llm, registry, model_name)
        seen: dict[str, SeenScores] = {}
        for rule in sorted({sc.result.rule for sc in scored.values()}):
            scores = [scored[c.id].result.score for c in meta.request.candidates]
            total, below = await store.seen_counts(meta.tenant, rule, scores)
            seen[rule] = SeenScores(total, below)
        part = final_part(meta.request.candidates, state.cheap, scored, seen)
        if not await store.put_final(meta.tenant, meta.id, part):
            part = await store.get_final(meta.tenant, meta.id) or part  # another delivery finished first
        state.final = part
    if not state.tail_done:
        await _tail(ctx, state)
        await store.mark_tail_done(meta.tenant, meta.id)
        state.tail_done = True


async def _tail(ctx: dict[str, Any], state: AssessmentState) -> None:
    """Everything after the final write, each step idempotent: the unforced scores join the tenant's pool (ZADD of
    fixed members), the candidates join the review queue (HSETNX), the callback job is queued (a fixed job id)."""
    from service.core.review import enqueue_for_review

    assert state.final is not None
    meta = state.meta
    members: dict[str, dict[str, float]] = {}
    for cid, row in state.final.candidates.items():
        if row.risk.forced_severity is None:
            members.setdefault(row.risk.rule, {})[f"{meta.id}:{cid}"] = row.risk.score
    for rule, m in sorted(members.items()):
        await ctx["store"].record_scores(meta.tenant, rule, m)
    await enqueue_for_review(
        ctx["redis"], meta.tenant, state, retention_seconds=ctx["settings"].redis.retention_seconds
    )
    if meta.request.callback_url:
        await lanes.enqueue_follow_on(ctx["redis"], "deliver_callback", meta, job_id=f"{meta.id}:callback")


@_observed("deliver_callback")
async def deliver_callback(ctx: dict[str, Any], tenant: str, aid: str) -> str:
    """POST the finished assessment to its callback URL; failures are recorded on the assessment, never silent."""
    import msgspec

    store: Store = ctx["store"]
    try:
        state = await store.get(tenant, aid)
    except NotFound:
        return "gone"
    cb = state.callback
    if cb is None or cb.status == "delivered":
        return "nothing to do"
    tries = int(ctx.get("job_try", 1))
    max_tries = ctx["settings"].jobs.callback_max_tries
    backoff = ctx["settings"].jobs.callback_backoff_seconds
    cb.attempts += 1
    body = msgspec.json.encode(render_assessment(state))
    try:
        secret = await asyncio.to_thread(AccessStore(ctx["catalog"].db).callback_secret, tenant)
        resp = await post_callback(
            ctx["http"], cb.url, body, secret=secret, policy=ctx["settings"].jobs.callback_policy
        )
        if resp.status_code >= 300:
            raise httpx.HTTPStatusError(f"callback answered {resp.status_code}", request=resp.request, response=resp)
    except CallbackRefused as exc:
        # the name resolves to an address the policy refuses: trying again would not change that
        CHECK_FAILURES.labels("callback").inc()
        cb.last_error, cb.status = f"refused: {exc.detail}", "failed"
        await store.put_callback(tenant, aid, cb)
        return "refused"
    except httpx.HTTPError as exc:
        CHECK_FAILURES.labels("callback").inc()
        cb.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        cb.status = "failed" if tries >= max_tries else "pending"
        await store.put_callback(tenant, aid, cb)
        if tries < max_tries:
            raise Retry(defer=min(300.0, backoff * 2 ** (tries - 1))) from exc
        return "failed"
    cb.status = "delivered"
    cb.delivered_at = time.time()
    cb.last_error = None
    await store.put_callback(tenant, aid, cb)
    return "delivered"


async def judge(ctx: dict[str, Any], tenant: str, kind: str, jid: str) -> str:
    """A companion judge job (Poller evaluation, MATA grades, multiple-choice run): run its plan, store the result
    once; transient failures are retried like the assessment jobs', the last try records the failure."""
    from service.core.judge_jobs import JudgeJobStore, run_judge_job

    store = JudgeJobStore(ctx["redis_client"], retention_seconds=ctx["settings"].redis.retention_seconds)
    kind_ = cast("JobKind", kind)
    with log_context(tenant=tenant, assessment_id=jid), timed_job(f"judge_{kind}") as timing:
        try:
            job = await store.get(tenant, kind_, jid)
        except NotFound:
            timing["outcome"] = "gone"
            return "gone"
        if job.result is not None or job.failed is not None:
            timing["outcome"] = "already"
            return "already finished"
        tries = int(ctx.get("job_try", 1))
        if tries > MAX_TRIES:
            await store.mark_failed(tenant, kind_, jid, f"gave up after {MAX_TRIES} tries: the worker was lost")
            timing["outcome"] = "gave"
            return "gave up"
        await store.mark_started(tenant, kind_, jid)
        try:
            result = await run_judge_job(kind, llm_for(ctx, tenant), job.plan, ctx["settings"].llm)
            await store.put_result(tenant, kind_, jid, result)
        except Exception as exc:
            CHECK_FAILURES.labels(f"judge_{kind}").inc()
            if isinstance(exc, TRANSIENT) and tries < MAX_TRIES:
                raise Retry(defer=ctx["retry_delay"](tries)) from exc
            await store.mark_failed(tenant, kind_, jid, _reason(exc))
            timing["outcome"] = "failed"
            return "failed"
        timing["outcome"] = "done"
        logger.info("judge_%s try %s: done", kind, tries)
        return "done"


@_observed("adjudicate")
async def adjudicate(ctx: dict[str, Any], tenant: str, adjudication_id: str) -> str:
    """Run a queued reference-aided adjudication with the shared (cached) LLM client and store its record once."""
    from service.core.review.adjudication_jobs import run_adjudication

    return await run_adjudication(ctx, tenant, adjudication_id)
