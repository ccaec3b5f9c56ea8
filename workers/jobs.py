"""The ARQ jobs: ``assess_cheap`` (novelty for batch items, embeddings, signals, flags), ``assess_llm`` (the judge
cascade), ``deliver_callback`` and ``adjudicate``; shared clients live in ``ctx``.

Delivery is at least once, so every job is idempotent as a whole: it re-reads what is stored and does only what is
missing. Each part is written once (``part:cheap``, ``provisional``, ``part:llm``, ``final``: HSETNX; a second
delivery that loses the race reads the winner's part). Whenever the final part exists, the tail runs (scores pooled
for the budget rank, review items, the callback job), each step safe to repeat, until ``tail`` is marked done; a
failure after the final write never marks the assessment failed.

Answers first: when the LLM tier is to run, the cheap job publishes the cheap tier's result at once (``provisional``:
risk, flags, budget rank; status ``partial``), puts its candidates in the review queue and queues the cheap callback
when asked for. The LLM job is bounded by ``TRISK_LLM_DEADLINE_SECONDS`` (every judge call shares it) and whatever
ends it (the deadline, ARQ's job timeout, a cancellation, a failure on the last try, a lost worker) leaves a final
result: the cheap tier's risk with the reason the LLM tier stopped (``part:llm`` with status timed_out or failed).

Failures: transient ones (an upstream error, Redis or the network) are retried with a growing delay up to
``MAX_TRIES``; anything else, or the last try, marks the assessment failed with the reason. ARQ is given one spare
delivery beyond ``MAX_TRIES`` so that a worker lost during the last try still leaves a final state behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:
    from service.core.judge_jobs import JobKind

import httpx
from arq import Retry
from redis.asyncio import Redis

from service import __version__
from service.core import lanes
from service.core.budget import SeenScores
from service.core.callbacks import CallbackRefused, post_callback
from service.core.durable.access import AccessStore
from service.core.embeddings import encoder_threads
from service.core.embeddings._cache import for_tenant
from service.core.errors import NotFound, TriskError, Unavailable, UpstreamError
from service.core.llm import NO_PROVIDER
from service.core.novelty_report import NoveltyPending, source_novelty
from service.core.pipeline import cheap_tier, check_embedding_models, final_part, final_risks
from service.core.ratelimit import charged_to
from service.core.records import (
    LLM_CHECKS,
    LLM_SIGNALS,
    CallbackEvent,
    CandidateOutcome,
    CheapPart,
    FinalPart,
    LLMPart,
    LLMSignature,
    PromptVersion,
    callback_events,
)
from service.core.redact import redact_url, remember
from service.core.redis_client import REDIS_UNAVAILABLE, waiting_retry
from service.core.retry import callback_retry_delay, job_retry_delay
from service.core.risk import RiskRegistry
from service.core.risk_catalog import ModelCatalog
from service.core.sealing import Sealer
from service.core.settings import Settings, get_settings
from service.core.store import AssessmentState, Store
from service.core.telemetry import CHECK_FAILURES, log_context, timed_job
from service.core.types import SignalSkipped
from service.core.views import render_assessment
from service.core.worker_registry import Capabilities, Heartbeat, IndexState, JudgeConfig

__all__ = [
    "MAX_TRIES",
    "PanelUnavailable",
    "adjudicate",
    "assess_cheap",
    "assess_llm",
    "deliver_callback",
    "finalize",
    "judge",
    "llm_for",
    "llm_job_timeout",
    "publish_cheap",
    "retry_delay",
    "shutdown",
    "startup",
]

logger = logging.getLogger("trisk.workers")
MAX_TRIES = 3  # deliveries of an assessment job that may do work; ARQ's max_tries is one more (see the docstring)
# the LLM job's own backstop beyond its deadline (every call is already cut to the deadline; this catches the rest),
# and ARQ's job timeout beyond that (workers/settings.py): the job's own handling always runs before ARQ's
LLM_GRACE_SECONDS = 10.0
LLM_JOB_MARGIN_SECONDS = 60.0
# ARQ's timeout of the cheap job (a cold encoder and a first index load included) and of the SIGTERM drain
CHEAP_JOB_TIMEOUT = 120


def llm_job_timeout(settings: Settings) -> int:
    """ARQ's timeout of an LLM-tier job (assess_llm, judge): beyond the job's own deadline and backstop, so the job
    ends itself first (without a deadline, the longest an LLM job may run: 15 minutes)."""
    deadline = settings.llm.deadline_seconds
    return int(deadline + LLM_GRACE_SECONDS + LLM_JOB_MARGIN_SECONDS) if deadline > 0 else 900


def _stopped_by_timeout(ctx: dict[str, Any], started: float, *, cheap: bool = False) -> bool:
    """Whether a cancelled job ran into ARQ's job timeout (``ctx["cheap_job_timeout"]``/``ctx["llm_job_timeout"]``
    when a worker sets other ones) or, for an LLM job, its deadline, rather than a worker shutdown, after which ARQ
    runs the job again."""
    elapsed = time.monotonic() - started
    if cheap:
        return elapsed >= float(ctx.get("cheap_job_timeout") or CHEAP_JOB_TIMEOUT) - 1.0
    deadline = ctx["settings"].llm.deadline_seconds
    limit = float(ctx.get("llm_job_timeout") or llm_job_timeout(ctx["settings"]))
    return (deadline > 0 and elapsed >= deadline) or elapsed >= limit - 1.0


# a dependency away for a moment (Redis, the network, the provider, and the durable store: a database that fails over
# or a partition that heals) is retried; tests/deploy/test_rehearsal.py cuts a worker off mid-job
TRANSIENT = (UpstreamError, Unavailable, *REDIS_UNAVAILABLE, OSError)


def retry_delay(tries: int) -> float:
    """Seconds before the next try of a failed job (``service.core.retry``; a test's ctx may replace it)."""
    return job_retry_delay(tries)


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
    """The novelty indexes of ``TRISK_INDEX_PATH``, the same files the API loads (and verifies alike), read once when
    the worker starts."""

    def __init__(self, paths: str, expected: str = "") -> None:
        self.paths = paths
        self.expected = expected
        self._loaded: dict[str, Any] | None = None
        self.errors: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def get(self) -> dict[str, Any]:
        async with self._lock:
            if self._loaded is None:
                from service.core.novelty import load_indexes

                self._loaded, self.errors = await asyncio.to_thread(load_indexes, self.paths, self.expected)
            return self._loaded


async def startup(ctx: dict[str, Any]) -> None:
    """Open the shared clients; anything a test already put in ``ctx`` (settings, fakes) is kept."""
    from service.core.critical import default_checker
    from service.core.durable import open_store
    from service.core.llm import LLMClient, ResponseCache

    settings: Settings = ctx.setdefault("settings", get_settings())
    remember(settings)  # its credentials are masked in every log line from here on
    if "llm_panel" not in ctx:  # first: a worker that cannot judge as configured stops before it opens anything
        ctx["llm_panel"] = _default_panel(settings)
    if settings.jobs.worker_nice and ctx.get("nice", True):
        # the API answers in milliseconds and must not wait behind embedding batches on a shared machine
        os.nice(settings.jobs.worker_nice)
    # commands wait for a Redis that restarts or refuses writes, as arq's pool does (workers/settings.py)
    client = ctx.setdefault(
        "redis_client",
        Redis.from_url(settings.redis.url, retry=waiting_retry(), retry_on_error=list(REDIS_UNAVAILABLE)),
    )
    if "catalog" not in ctx:
        shipped = RiskRegistry.load(settings.risk.models_dir)
        # migrates the schema first (idempotent; workers and API pods starting together wait for each other)
        store = await asyncio.to_thread(open_store, settings.durable)
        ctx["catalog"] = ModelCatalog(shipped, store, settings.risk.model)
    # the records live in the durable store the catalog reads (one store per process)
    ctx.setdefault("store", Store(client, retention_seconds=settings.redis.retention_seconds, db=ctx["catalog"].db))
    embedders: Embedders = ctx.setdefault("embedders", Embedders(settings))
    check_embedding_models(
        ctx["catalog"].shipped,
        [settings.risk.model, settings.risk.routing_model],
        embedders.peer_signature.get("model_id"),
    )
    # loaded now: the first batch item waits for no load, and the heartbeat says which index this worker has
    loaded = await ctx.setdefault("indexes", Indexes(settings.index.path, settings.index.signature)).get()
    ctx.setdefault("length_models", {})
    ctx.setdefault("critical", default_checker())
    if "llm" not in ctx:
        ctx["llm"] = (
            LLMClient.from_settings(settings.llm, cache=ResponseCache(client)) if settings.llm.configured else None
        )
    # callbacks go straight to the address the policy checked, never through HTTPS_PROXY (the LLM client's egress
    # route in a cluster, k8s/components/llm-egress-proxy): a proxy would resolve the name again, past the check
    ctx.setdefault(
        "http",
        httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0), follow_redirects=False, trust_env=False),
    )
    ctx.setdefault("retry_delay", retry_delay)
    if "heartbeat" not in ctx:
        # arq's pool waits out a full Redis inside its health record's write: the heartbeat keeps that record alive
        # meanwhile, so the liveness probe (`arq --check`) does not restart a worker that only waits
        pool_retry = getattr(getattr(ctx.get("redis"), "connection_pool", None), "connection_kwargs", {}).get("retry")
        ctx["heartbeat"] = Heartbeat(
            client,
            settings.redis.queue_name,
            __version__,
            capabilities(ctx, loaded),
            pool_waiting=(lambda: getattr(getattr(pool_retry, "state", None), "waiting", 0) > 0),
        )
        await ctx["heartbeat"].start()
    if "periodic" not in ctx and "redis" in ctx and (settings.jobs.reconcile_seconds or settings.jobs.purge_seconds):
        from workers.reconcile import run_periodic

        # Redis holds only work in flight: the store's unfinished records are queued again when Redis lost them
        ctx["periodic"] = asyncio.create_task(run_periodic(ctx))
    logger.info("worker ready: peer embedding %s, LLM %s", embedders.peer_signature, "on" if ctx["llm"] else "off")


class PanelUnavailable(RuntimeError):
    """The worker's default judge panel cannot be loaded: the worker refuses to start (never judges without it)."""


def _default_panel(settings: Settings) -> Any:
    """The default judge panel (``TRISK_LLM_PANEL``); one that does not load stops the worker with the reason, so a
    broken panel shows as a worker that does not start, not as judges that silently never run."""
    from service.core.llm import load_panel

    panels = settings.risk.panels_dir
    try:
        return load_panel(settings.llm.panel, panels_dir=panels)
    except TriskError as exc:
        logger.error("worker refuses to start: judge panel %r (%s): %s", settings.llm.panel, panels, exc.detail)
        raise PanelUnavailable(
            f"worker refuses to start: judge panel {settings.llm.panel!r} in {panels} cannot be loaded: {exc.detail}"
        ) from exc


def capabilities(ctx: dict[str, Any], indexes: dict[str, Any]) -> Capabilities:
    """What this worker publishes about itself (service.core.worker_registry): its judges, the indexes it loaded
    (and those it could not), its encoders."""
    settings: Settings = ctx["settings"]
    panel = ctx.get("llm_panel")
    embedders: Embedders = ctx["embedders"]
    errors = dict(getattr(ctx["indexes"], "errors", {}))
    return Capabilities(
        judges=JudgeConfig(
            llm_configured=ctx.get("llm") is not None,
            provider=redact_url(settings.llm.base_url) if settings.llm.base_url else None,
            panel=panel.name if panel is not None else settings.llm.panel,
            judge_models=[j.model for j in panel.judges] if panel is not None else [],
        ),
        index=IndexState(signatures={lang: ix.signature_id for lang, ix in indexes.items()}, errors=errors),
        embedding={k: str(v) for k, v in (("peer", embedders.peer_signature.get("model_id")),) if v is not None},
        encoder_threads=encoder_threads(settings.embedding),
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    task = ctx.get("periodic")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if ctx.get("heartbeat") is not None:
        await ctx["heartbeat"].stop()
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
    if await _stop_llm_tier(ctx, state, "failed", _reason(exc)):
        logger.error("assessment %s: LLM tier failed on try %s, cheap result final: %s", meta.id, tries, _reason(exc))
        return "done; llm tier failed"
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
    reason = f"gave up after {MAX_TRIES} tries: the worker running it was lost"
    if state.final is None and not await _stop_llm_tier(ctx, state, "failed", reason):
        await ctx["store"].mark_failed(state.meta.tenant, state.meta.id, reason)
    return True


# ----------------------------------------------------------------------------------------------------------- jobs


def _observed(job: str) -> Any:
    """Every job logs with its tenant and assessment id and is timed per outcome (its return value)."""

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        async def run(ctx: dict[str, Any], tenant: str, aid: str, *args: Any) -> str:
            with log_context(tenant=tenant, assessment_id=aid), timed_job(job) as timing:
                outcome: str = await fn(ctx, tenant, aid, *args)
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
    if state.cheap is not None and "llm" in state.meta.parts and int(ctx.get("job_try", 1)) > MAX_TRIES:
        # the cheap part is stored and the LLM job may be healthy: hand over to it (it ends the assessment either way)
        await _queue_llm(ctx, state.meta)
        return "gave up; llm queued"
    if await _gave_up(ctx, state):
        return "gave up"
    started = time.monotonic()
    try:
        if state.final is None:
            if state.cheap is None:
                await store.mark_started(tenant, aid)
                part = await _run_cheap(ctx, state)
                if not await store.put_cheap(tenant, aid, part):
                    part = (await store.get(tenant, aid)).cheap or part  # another delivery wrote it first
                state.cheap = part
            if "llm" in state.meta.parts:
                if ctx.get("llm") is None:
                    # this worker holds no provider (the one place that decides): the tier reads skipped, and the
                    # cheap result is the final one
                    await _end_with_cheap(ctx, state, "skipped", NO_PROVIDER)
                    return "done; llm skipped"
                await publish_cheap(ctx, state)
                await _queue_llm(ctx, state.meta)
                return "cheap done; llm queued"
        await finalize(ctx, state)
    except asyncio.CancelledError:
        # ARQ's job timeout (a shutdown leaves the job to ARQ, which runs it again): never running for good
        if _stopped_by_timeout(ctx, started, cheap=True):
            await _cheap_timed_out(ctx, state)
        raise
    except Retry:
        raise
    except Exception as exc:
        return await _on_failure(ctx, state, exc)
    return "done"


async def _queue_llm(ctx: dict[str, Any], meta: Any) -> None:
    """Queue the assessment's LLM job (one fixed job id: queueing it again while it waits or runs adds nothing)."""
    await lanes.enqueue_follow_on(ctx["redis"], "assess_llm", meta, job_id=f"{meta.id}:llm")


async def _cheap_timed_out(ctx: dict[str, Any], state: AssessmentState) -> None:
    """A cheap job stopped by ARQ's timeout: failed with the reason before the cheap part exists; after it, the rest
    is handed on (the LLM job, or the final write), since ARQ does not run a timed-out job again."""
    meta = state.meta
    try:
        if state.cheap is None:
            reason = "the cheap tier was stopped by its job timeout"
            await ctx["store"].mark_failed(meta.tenant, meta.id, reason)
        elif "llm" in meta.parts:
            await _queue_llm(ctx, meta)
        else:
            await finalize(ctx, state)
    except Exception as exc:
        logger.error("assessment %s: could not record the cheap job's timeout: %s", meta.id, _reason(exc))


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
        # vectors are cached per tenant: no tenant learns from the cache what another submitted
        peer_embedder=for_tenant(embedders.peer, state.meta.tenant),
        source_embedder=for_tenant(embedders.source(), state.meta.tenant) if wants_source else None,
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
        for outcome in part.candidates.values():
            for check in wanted_llm:
                outcome.signals[LLM_SIGNALS[check]] = SignalSkipped(reason=NO_PROVIDER)
    return part


@_observed("assess_llm")
async def assess_llm(ctx: dict[str, Any], tenant: str, aid: str) -> str:
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
    started = time.monotonic()
    guard: Any = None
    try:
        if ctx.get("llm") is None and state.final is None and state.llm is None:
            # queued by a worker with a provider, taken by one without: this one cannot judge, so the tier reads
            # skipped (a store or Redis that fails meanwhile is retried like any other failure)
            await _end_with_cheap(ctx, state, "skipped", NO_PROVIDER)
            return "done; llm skipped"
        if state.final is None and state.llm is None:
            guard = await _llm_guard(ctx, state)
            part = await _run_llm_tier(ctx, state, guard)
            if not await store.put_llm(tenant, aid, part):
                part = (await store.get(tenant, aid)).llm or part
            state.llm = part
        await finalize(ctx, state)
    except asyncio.CancelledError:
        # ARQ's job timeout: end with the cheap result and the reason, never running for good. A worker shutdown
        # instead leaves the job to ARQ, which runs it again (a worker lost too often ends in _gave_up).
        if _stopped_by_timeout(ctx, started):
            await _stop_llm_tier(ctx, state, "timed_out", "the LLM job was stopped by its job timeout", guard)
        raise
    except Retry:
        raise
    except Exception as exc:
        return await _on_failure(ctx, state, exc)
    return "done"


def _cascade_items(state: AssessmentState) -> list[Any]:
    from service.core.llm import CascadeItem

    assert state.cheap is not None
    req = state.meta.request
    return [
        CascadeItem(
            id=c.id,
            source=req.source.text,
            candidate=c.text,
            model=c.model,
            routing_score=state.cheap.routing.get(c.id, float("nan")),
        )
        for c in req.candidates
    ]


def _cascade_asked(state: AssessmentState) -> dict[str, Any]:
    """What the request asked of the cascade: its budget and call cap (None: the settings'), and which checks."""
    req = state.meta.request
    return {
        "budget_fraction": req.review_budget,
        "max_calls": req.max_llm_calls,
        "gemba": "gemba" in state.meta.checks,
        "backtranslation": "backtranslation" in state.meta.checks,
    }


async def _llm_guard(ctx: dict[str, Any], state: AssessmentState) -> Any:
    """The LLM deadline of this assessment, counted from the first try's start (stored once): a retry or a
    redelivery after a lost worker gets what is left of it, not a fresh deadline."""
    from service.core.llm import CallGuard

    deadline = ctx["settings"].llm.deadline_seconds
    if deadline <= 0:
        return CallGuard(0)
    first = await ctx["store"].llm_started_at(state.meta.tenant, state.meta.id)
    guard = CallGuard(deadline)
    guard.deadline -= max(0.0, time.time() - first)
    return guard


async def _run_llm_tier(ctx: dict[str, Any], state: AssessmentState, guard: Any) -> LLMPart:
    """The judge cascade within the LLM deadline; a tier that outlives it (plus a grace) stops as timed_out."""
    from service.core.llm import run_cascade

    settings: Settings = ctx["settings"]
    deadline = settings.llm.deadline_seconds
    if deadline > 0 and guard.remaining() <= 0:
        return _stopped_part(ctx, state, "timed_out", f"the LLM deadline of {deadline:g} s passed across tries", guard)
    try:
        async with asyncio.timeout(guard.remaining() + LLM_GRACE_SECONDS if deadline > 0 else None):
            result = await run_cascade(
                llm_for(ctx, state.meta.tenant),
                _cascade_items(state),
                ctx["llm_panel"],
                settings.llm,
                guard=guard,
                **_cascade_asked(state),
            )
    except TimeoutError:
        return _stopped_part(ctx, state, "timed_out", f"the LLM tier ran past its deadline of {deadline:g} s", guard)
    return _llm_part(ctx, result)


def _llm_signature(ctx: dict[str, Any]) -> LLMSignature:
    from service.core.llm import (
        BACKTRANSLATION_PROMPT_HASH,
        BACKTRANSLATION_PROMPT_VERSION,
        GEMBA_PROMPT_HASH,
        GEMBA_PROMPT_VERSION,
    )

    panel = ctx["llm_panel"]
    return LLMSignature(
        panel=panel.name,
        panel_version=panel.version,
        judges=[j.model for j in panel.judges],
        gemba_prompt=PromptVersion(GEMBA_PROMPT_VERSION, GEMBA_PROMPT_HASH),
        backtranslation_prompt=PromptVersion(BACKTRANSLATION_PROMPT_VERSION, BACKTRANSLATION_PROMPT_HASH),
        temperature=ctx["settings"].llm.temperature,
    )


def _llm_part(ctx: dict[str, Any], result: Any) -> LLMPart:
    candidates: dict[str, CandidateOutcome] = {}
    for c in result.candidates:
        flags = list(c.gemba_result.flags) if c.gemba_result is not None else []
        candidates[c.id] = CandidateOutcome(
            signals={LLM_SIGNALS["gemba"]: c.gemba, LLM_SIGNALS["backtranslation"]: c.backtranslation}, flags=flags
        )
    return LLMPart(
        finished_at=time.time(),
        candidates=candidates,
        signature=_llm_signature(ctx),
        cost=result.cost,
        plan=result.plan,
        details={c.id: c for c in result.candidates},
        judges=result.judges,
        timed_out=result.timed_out,
        deadline_seconds=result.deadline_seconds,
    )


LLMStop = Literal["skipped", "timed_out", "failed"]


def _stopped_part(
    ctx: dict[str, Any], state: AssessmentState, status: LLMStop, reason: str, guard: Any = None
) -> LLMPart:
    """The LLM part of a tier that stopped (or never ran: skipped, no provider on this worker): no judge results, the
    reason on every LLM signal, what was planned and what the judges had cost so far."""
    from service.core.llm import Cost, planned_with

    req = state.meta.request
    settings: Settings = ctx["settings"]
    wanted = [c for c in state.meta.checks if c in LLM_CHECKS]
    skipped = SignalSkipped(reason=reason if status == "skipped" else f"LLM tier {status.replace('_', ' ')}: {reason}")
    plan = planned_with(
        _cascade_items(state), ctx["llm_panel"], settings.llm, configured=status != "skipped", **_cascade_asked(state)
    )
    judges = dict(sorted(guard.costs.items())) if guard is not None else {}
    return LLMPart(
        finished_at=time.time(),
        candidates={
            c.id: CandidateOutcome(signals={LLM_SIGNALS[w]: skipped for w in wanted}, flags=[]) for c in req.candidates
        },
        signature=_llm_signature(ctx),
        cost=Cost.total(judges.values()),
        plan=plan,
        details={},
        status=status,
        reason=reason,
        judges=judges,
        timed_out=sorted(guard.benched) if guard is not None else [],
        deadline_seconds=settings.llm.deadline_seconds,
    )


async def _stop_llm_tier(
    ctx: dict[str, Any],
    state: AssessmentState,
    status: LLMStop,
    reason: str,
    guard: Any = None,
) -> bool:
    """End an assessment whose LLM tier cannot finish with its cheap-tier result and the reason; False when there
    is no cheap result to end with (or Redis refuses even that: then the caller records the failure)."""
    if state.cheap is None or "llm" not in state.meta.parts:
        return False
    try:
        await _end_with_cheap(ctx, state, status, reason, guard)
    except Exception as exc:
        logger.error("assessment %s: could not end with the cheap result: %s", state.meta.id, _reason(exc))
        return False
    return True


async def _end_with_cheap(
    ctx: dict[str, Any], state: AssessmentState, status: LLMStop, reason: str, guard: Any = None
) -> None:
    """Write the stopped LLM part (once) and finalize from the cheap tier; raises what fails, for the caller to retry
    or record (``_stop_llm_tier`` is the form that never raises)."""
    store: Store = ctx["store"]
    meta = state.meta
    if state.final is None and state.llm is None:
        part = _stopped_part(ctx, state, status, reason, guard)
        if not await store.put_llm(meta.tenant, meta.id, part):
            part = (await store.get(meta.tenant, meta.id)).llm or part
        state.llm = part
    await finalize(ctx, state)


async def _scored(ctx: dict[str, Any], state: AssessmentState) -> FinalPart:
    """Risk, budget rank and flags of every candidate from what is stored (the cheap tier, and the LLM tier when
    it is there), ranked against the tenant's pool of scores (read, not added to)."""
    assert state.cheap is not None
    meta = state.meta
    registry, model_name = await asyncio.to_thread(ctx["catalog"].active_model, meta.tenant)
    scored = final_risks(meta.request.candidates, state.cheap, state.llm, registry, model_name)
    seen: dict[str, SeenScores] = {}
    for rule in sorted({sc.result.rule for sc in scored.values()}):
        scores = [scored[c.id].result.score for c in meta.request.candidates]
        total, below = await ctx["store"].seen_counts(meta.tenant, rule, scores)
        seen[rule] = SeenScores(total, below)
    return final_part(meta.request.candidates, state.cheap, scored, seen)


async def publish_cheap(ctx: dict[str, Any], state: AssessmentState) -> None:
    """Publish the cheap tier's result while the LLM tier works (status partial): written once, then its candidates
    join the review queue (kept as they are when already there) and the cheap callback is queued when asked for."""
    from service.core.review import enqueue_for_review

    meta = state.meta
    store: Store = ctx["store"]
    if state.final is not None:
        return
    if state.provisional is None:
        part = await _scored(ctx, state)
        if not await store.put_provisional(meta.tenant, meta.id, part):
            part = (await store.get(meta.tenant, meta.id)).provisional or part
        state.provisional = part
    await enqueue_for_review(
        ctx["catalog"].db, meta.tenant, state, retention_seconds=ctx["settings"].redis.retention_seconds
    )
    await _queue_callback(ctx, state, "cheap")


async def _queue_callback(ctx: dict[str, Any], state: AssessmentState, event: CallbackEvent) -> None:
    """Queue one callback event when the request asked for it (a fixed job id: a re-run queues nothing new)."""
    meta = state.meta
    if event not in callback_events(meta.request):
        return
    if event == "final":  # its state is written with the assessment; its job keeps the arguments it always had
        await lanes.enqueue_follow_on(ctx["redis"], "deliver_callback", meta, job_id=f"{meta.id}:callback")
        return
    await ctx["store"].open_callback(meta.tenant, meta.id, str(meta.request.callback_url), event)
    await lanes.enqueue_follow_on(ctx["redis"], "deliver_callback", meta, event, job_id=f"{meta.id}:callback:{event}")


async def finalize(ctx: dict[str, Any], state: AssessmentState) -> None:
    """The final part (risk, budget rank, flags), written once; then the tail, which any delivery may repeat."""
    assert state.cheap is not None
    meta = state.meta
    store: Store = ctx["store"]
    if state.final is None:
        part = await _scored(ctx, state)
        if not await store.put_final(meta.tenant, meta.id, part):
            part = await store.get_final(meta.tenant, meta.id) or part  # another delivery finished first
        state.final = part
    if not state.tail_done:
        await _tail(ctx, state)
        await store.mark_tail_done(meta.tenant, meta.id)
        state.tail_done = True


async def _tail(ctx: dict[str, Any], state: AssessmentState) -> None:
    """Everything after the final write, each step idempotent: the unforced scores join the tenant's pool (once per
    assessment, marked in its row), the candidates join the review queue (HSETNX), the callback job is queued (a fixed
    job id)."""
    from service.core.review import enqueue_for_review

    assert state.final is not None
    meta = state.meta
    unforced: dict[str, list[float]] = {}
    for row in state.final.candidates.values():
        if row.risk.forced_severity is None:
            unforced.setdefault(row.risk.rule, []).append(row.risk.score)
    await ctx["store"].record_scores(meta.tenant, meta.id, unforced)
    # the final result replaces what the cheap tier put in the queue (priority, snapshot); verdicts stay
    await enqueue_for_review(
        ctx["catalog"].db, meta.tenant, state, retention_seconds=ctx["settings"].redis.retention_seconds, refresh=True
    )
    await _queue_callback(ctx, state, "final")
    if state.llm is None or state.llm.status == "skipped":
        # no LLM tier ran, so no cheap result was published before: a caller who asked for it gets it now
        await _queue_callback(ctx, state, "cheap")


@_observed("deliver_callback")
async def deliver_callback(ctx: dict[str, Any], tenant: str, aid: str, event: CallbackEvent = "final") -> str:
    """POST the assessment to its callback URL (``event``: its cheap-tier result or its final one); failures are
    recorded on the assessment, never silent."""
    import msgspec

    store: Store = ctx["store"]
    try:
        state = await store.get(tenant, aid)
    except NotFound:
        return "gone"
    cb = state.callback_of(event)
    if cb is None or cb.status == "delivered":
        return "nothing to do"
    tries = int(ctx.get("job_try", 1))
    max_tries = ctx["settings"].jobs.callback_max_tries
    backoff = ctx["settings"].jobs.callback_backoff_seconds
    cb.attempts += 1
    body = msgspec.json.encode(render_assessment(state))
    try:
        sealer = Sealer.from_setting(ctx["settings"].durable.secret_keys)
        secret = await asyncio.to_thread(AccessStore(ctx["catalog"].db, sealer).callback_secret, tenant)
        resp = await post_callback(
            ctx["http"],
            cb.url,
            body,
            secret=secret,
            policy=ctx["settings"].jobs.callback_policy,
            extra_headers=[("Trisk-Event", event)],  # the body's status says which result it is: done supersedes
        )
        if resp.status_code >= 300:
            answer = httpx.Response(resp.status_code, request=resp.request)  # its status: the body is not kept
            raise httpx.HTTPStatusError(f"callback answered {resp.status_code}", request=resp.request, response=answer)
    except CallbackRefused as exc:
        # the name resolves to an address the policy refuses: trying again would not change that
        CHECK_FAILURES.labels("callback").inc()
        cb.last_error, cb.status = f"refused: {exc.detail}", "failed"
        await store.put_callback(tenant, aid, cb, event)
        return "refused"
    except httpx.HTTPError as exc:
        CHECK_FAILURES.labels("callback").inc()
        cb.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        cb.status = "failed" if tries >= max_tries else "pending"
        await store.put_callback(tenant, aid, cb, event)
        if tries < max_tries:
            raise Retry(defer=callback_retry_delay(tries, backoff)) from exc
        return "failed"
    cb.status = "delivered"
    cb.delivered_at = time.time()
    cb.last_error = None
    await store.put_callback(tenant, aid, cb, event)
    return "delivered"


async def judge(ctx: dict[str, Any], tenant: str, kind: str, jid: str) -> str:
    """A companion judge job (Poller evaluation, MATA grades, multiple-choice run): run its plan, store the result
    once; transient failures are retried like the assessment jobs', the last try records the failure."""
    from service.core.judge_jobs import JudgeJobStore, run_judge_job

    db = getattr(ctx.get("store"), "db", None)  # the assessments' durable store (None: the settings' one)
    store = JudgeJobStore(ctx["redis_client"], retention_seconds=ctx["settings"].redis.retention_seconds, db=db)
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
        started = time.monotonic()
        try:
            result = await run_judge_job(kind, llm_for(ctx, tenant), job.plan, ctx["settings"].llm)
            await store.put_result(tenant, kind_, jid, result)
        except asyncio.CancelledError:
            # ARQ's job timeout: failed with the reason, never running for good; a shutdown leaves it to be re-run
            if _stopped_by_timeout(ctx, started):
                await store.mark_failed(tenant, kind_, jid, "the judge job was stopped by its job timeout")
            raise
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
