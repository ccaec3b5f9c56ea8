"""The ARQ jobs: ``assess_cheap`` (embeddings, signals, flags), ``assess_llm`` (the judge cascade) and
``deliver_callback``; shared clients live in ``ctx``. Every job is idempotent: it reads what is already stored and
only does what is missing, so at-least-once delivery never double-counts."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
from arq import Retry
from redis.asyncio import Redis

from service.core.errors import NotFound, TriskError, UpstreamError
from service.core.pipeline import SeenScores, cheap_tier, check_embedding_models, final_part, final_risks
from service.core.records import LLM_CHECKS, CandidateOutcome, LLMPart
from service.core.risk import RiskRegistry
from service.core.settings import Settings, get_settings
from service.core.store import AssessmentState, Store
from service.core.types import SignalSkipped
from service.core.views import render_assessment

__all__ = ["assess_cheap", "assess_llm", "deliver_callback", "finalize", "shutdown", "startup"]

logger = logging.getLogger("trisk.workers")
NO_PROVIDER = "no LLM provider configured"


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


class _Embedders:
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


async def startup(ctx: dict[str, Any]) -> None:
    from service.core.critical import default_checker
    from service.core.llm import LLMClient, ResponseCache, load_panel

    settings: Settings = ctx.get("settings") or get_settings()  # tests pass their own settings in ctx
    if settings.jobs.worker_nice and not ctx.get("settings"):
        # the API answers in milliseconds and must not wait behind embedding batches on a shared machine
        os.nice(settings.jobs.worker_nice)
    redis = Redis.from_url(settings.redis.url)
    ctx["settings"] = settings
    ctx["redis_client"] = redis
    ctx["store"] = Store(redis, retention_seconds=settings.redis.retention_seconds)
    ctx["registry"] = RiskRegistry.load(settings.risk.models_dir)
    ctx["embedders"] = _Embedders(settings)
    check_embedding_models(
        ctx["registry"],
        [settings.risk.model, settings.risk.routing_model],
        ctx["embedders"].peer_signature.get("model_id"),
    )
    ctx["length_models"] = {}
    ctx["critical"] = default_checker()
    ctx["llm"] = LLMClient.from_settings(settings.llm, cache=ResponseCache(redis)) if settings.llm.configured else None
    ctx["llm_panel"] = load_panel(settings.llm.panel, panels_dir=Path(settings.risk.models_dir) / "panels")
    ctx["http"] = httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0), follow_redirects=False)
    logger.info(
        "worker ready: peer embedding %s, LLM %s", ctx["embedders"].peer_signature, "on" if ctx["llm"] else "off"
    )


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


async def _fail_or_retry(ctx: dict[str, Any], tenant: str, aid: str, exc: Exception, max_tries: int) -> None:
    """Transient upstream trouble is retried with a growing delay; the last try records the failure visibly."""
    tries = int(ctx.get("job_try", 1))
    if isinstance(exc, UpstreamError) and tries < max_tries:
        raise Retry(defer=min(60, 2**tries)) from exc
    reason = exc.detail if isinstance(exc, TriskError) else f"{type(exc).__name__}: {exc}"
    logger.error("assessment %s failed on try %s: %s", aid, tries, reason)
    await ctx["store"].mark_failed(tenant, aid, reason)


# ----------------------------------------------------------------------------------------------------------- jobs


async def assess_cheap(ctx: dict[str, Any], tenant: str, aid: str) -> str:
    store: Store = ctx["store"]
    try:
        state = await store.get(tenant, aid)
    except NotFound:
        return "gone"  # expired or rolled back before the job ran
    if state.final is not None or state.failed is not None:
        return "already finished"
    try:
        if state.cheap is None:
            await store.mark_started(tenant, aid)
            state.cheap = await asyncio.to_thread(_run_cheap, ctx, state)
            await store.put_cheap(tenant, aid, state.cheap)
        if "llm" in state.meta.parts:
            await ctx["redis"].enqueue_job("assess_llm", tenant, aid, _job_id=f"{aid}:llm")
            return "cheap done; llm queued"
        await finalize(ctx, state)
    except Retry:
        raise
    except Exception as exc:
        await _fail_or_retry(ctx, tenant, aid, exc, max_tries=3)
        return "failed"
    return "done"


def _run_cheap(ctx: dict[str, Any], state: AssessmentState) -> Any:
    req = state.meta.request
    embedders: _Embedders = ctx["embedders"]
    wants_source = "source_distance" in state.meta.checks
    part = cheap_tier(
        source_text=req.source.text,
        source_lang=req.source.lang,
        target_lang=req.target_lang,
        candidates=req.candidates,
        checks=state.meta.checks,
        novelty=state.meta.novelty,
        peer_embedder=embedders.peer,
        source_embedder=embedders.source() if wants_source else None,
        embedder_signature=embedders.signature(wants_source),
        length_model=_length_model(ctx, req.source.lang, req.target_lang),
        critical=ctx["critical"],
        registry=ctx["registry"],
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


async def assess_llm(ctx: dict[str, Any], tenant: str, aid: str) -> str:
    from service.core.llm import CascadeItem, run_cascade

    store: Store = ctx["store"]
    try:
        state = await store.get(tenant, aid)
    except NotFound:
        return "gone"
    if state.final is not None or state.failed is not None:
        return "already finished"
    if state.cheap is None:
        raise Retry(defer=2)  # the cheap part is not stored yet (should not happen: it enqueues us)
    try:
        if state.llm is None:
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
                ctx["llm"],
                items,
                ctx["llm_panel"],
                ctx["settings"].llm,
                budget_fraction=req.review_budget,
                max_calls=req.max_llm_calls,
                gemba="gemba" in state.meta.checks,
                backtranslation="backtranslation" in state.meta.checks,
            )
            state.llm = _llm_part(ctx, result)
            await store.put_llm(tenant, aid, state.llm)
        await finalize(ctx, state)
    except Retry:
        raise
    except Exception as exc:
        await _fail_or_retry(ctx, tenant, aid, exc, max_tries=3)
        return "failed"
    return "done"


def _llm_part(ctx: dict[str, Any], result: Any) -> LLMPart:
    candidates: dict[str, CandidateOutcome] = {}
    for c in result.candidates:
        flags = list(c.gemba_result.flags) if getattr(c, "gemba_result", None) is not None else []
        candidates[c.id] = CandidateOutcome(
            signals={"gemba_mean_risk": c.gemba, "backtranslation_chrf_risk": c.backtranslation}, flags=flags
        )
    panel = ctx["llm_panel"]
    from service.core.llm import BACKTRANSLATION_PROMPT_HASH, GEMBA_PROMPT_HASH, GEMBA_PROMPT_VERSION

    signature = {
        "panel": panel.name,
        "panel_version": panel.version,
        "judges": [j.model for j in panel.judges],
        "gemba_prompt": {"version": GEMBA_PROMPT_VERSION, "hash": GEMBA_PROMPT_HASH},
        "backtranslation_prompt_hash": BACKTRANSLATION_PROMPT_HASH,
        "temperature": ctx["settings"].llm.temperature,
    }
    details = {c.id: msgspec.to_builtins(c) for c in result.candidates}
    return LLMPart(
        finished_at=time.time(),
        candidates=candidates,
        signature=signature,
        cost=msgspec.to_builtins(result.cost),
        plan={"plan": msgspec.to_builtins(result.plan), "details": details},
    )


async def finalize(ctx: dict[str, Any], state: AssessmentState) -> None:
    """Risk, budget rank and flags, written once; then the review queue and the callback."""
    assert state.cheap is not None
    meta = state.meta
    store: Store = ctx["store"]
    model_name = await _active_model(ctx, meta.tenant)
    risks = final_risks(meta.request.candidates, state.cheap, state.llm, ctx["registry"], model_name)
    by_rule: dict[str, list[float]] = {}
    for c in meta.request.candidates:
        by_rule.setdefault(risks[c.id][1].rule, [])
    seen: dict[str, SeenScores] = {}
    for rule in by_rule:
        scores = [risks[c.id][1].score for c in meta.request.candidates]
        total, below = await store.seen_counts(meta.tenant, rule, scores)
        seen[rule] = SeenScores(total, below)
    part = final_part(meta.request.candidates, state.cheap, risks, seen)
    if not await store.put_final(meta.tenant, meta.id, part):
        return  # another delivery of this job finished first
    state.final = part
    members: dict[str, dict[str, float]] = {}
    for c in meta.request.candidates:
        _, result, _, _ = risks[c.id]
        if result.forced_by_flag is None:
            members.setdefault(result.rule, {})[f"{meta.id}:{c.id}"] = result.score
    for rule, m in members.items():
        await store.record_scores(meta.tenant, rule, m)
    await _after_final(ctx, state)


async def _active_model(ctx: dict[str, Any], tenant: str) -> str:
    """The tenant's activated risk model (calibration fits), else the configured default."""
    from service.core.calibration import active_model_name
    from service.core.review import get_review_settings, open_db

    default = str(ctx["settings"].risk.model)
    name = await asyncio.to_thread(active_model_name, open_db(get_review_settings().db_path), tenant, default)
    registry: RiskRegistry = ctx["registry"]
    if name not in registry.models and name not in registry.aliases:  # a model fitted after this worker started
        ctx["registry"] = RiskRegistry.load(ctx["settings"].risk.models_dir)
    return str(name)


async def _after_final(ctx: dict[str, Any], state: AssessmentState) -> None:
    from service.core.review import enqueue_for_review

    await enqueue_for_review(
        ctx["redis"], state.meta.tenant, state, retention_seconds=ctx["settings"].redis.retention_seconds
    )
    if state.meta.request.callback_url:
        await ctx["redis"].enqueue_job(
            "deliver_callback", state.meta.tenant, state.meta.id, _job_id=f"{state.meta.id}:callback"
        )


async def deliver_callback(ctx: dict[str, Any], tenant: str, aid: str) -> str:
    """POST the finished assessment to its callback URL; failures are recorded on the assessment, never silent."""
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
    try:
        resp = await ctx["http"].post(cb.url, json=render_assessment(state), headers={"User-Agent": "trisk-callback"})
        if resp.status_code >= 300:
            raise httpx.HTTPStatusError(f"callback answered {resp.status_code}", request=resp.request, response=resp)
    except httpx.HTTPError as exc:
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
