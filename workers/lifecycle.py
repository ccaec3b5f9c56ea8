"""The worker process: ``startup`` opens the shared clients into one ``WorkerContext``, ``shutdown`` closes them."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from typing import Any

import httpx
from redis.asyncio import Redis

from service import __version__
from service.core.embeddings import encoder_threads
from service.core.risk import RiskRegistry
from service.platform.errors import TriskError
from service.platform.redact import redact_url, remember
from service.platform.redis_client import REDIS_UNAVAILABLE, waiting_retry
from service.platform.settings import Settings, get_settings
from service.state.risk_catalog import ModelCatalog
from service.state.store import Store
from service.state.worker_registry import Capabilities, Heartbeat, IndexState, JudgeConfig
from workers.context import KEY, WorkerContext
from workers.embedders import Embedders
from workers.policy import CHEAP_JOB_TIMEOUT, llm_job_timeout, retry_delay

__all__ = ["Embedders", "Indexes", "PanelUnavailable", "capabilities", "shutdown", "startup"]

logger = logging.getLogger("trisk.workers")


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

                loaded, self.errors = await asyncio.to_thread(load_indexes, self.paths, self.expected)
                self._loaded = loaded
            return self._loaded


class PanelUnavailable(RuntimeError):
    """The worker's default judge panel cannot be loaded: the worker refuses to start (never judges without it)."""


def _default_panel(settings: Settings) -> Any:
    """The default judge panel (``TRISK_LLM_PANEL``); one that does not load stops the worker with the reason, so a
    broken panel shows as a worker that does not start, not as judges that silently never run."""
    from service.core.judges.llm import load_panel

    panels = settings.risk.panels_dir
    try:
        return load_panel(settings.llm.panel, panels_dir=panels)
    except TriskError as exc:
        logger.error("worker refuses to start: judge panel %r (%s): %s", settings.llm.panel, panels, exc.detail)
        raise PanelUnavailable(
            f"worker refuses to start: judge panel {settings.llm.panel!r} in {panels} cannot be loaded: {exc.detail}"
        ) from exc


async def startup(ctx: dict[str, Any]) -> None:
    """Open the shared clients into ``ctx["worker"]``; anything a test already put in ``ctx`` under a field's name
    (settings, fakes) is taken instead."""
    from service.core.critical import default_checker
    from service.core.judges.llm import LLMClient, ResponseCache
    from service.state.durable import open_store

    given = {f.name: ctx.pop(f.name) for f in dataclasses.fields(WorkerContext) if f.name in ctx}

    def take(name: str, make: Any) -> Any:
        """The test's own (None included) when it gave one, else ``make()``."""
        return given[name] if name in given else make()

    settings: Settings = take("settings", get_settings)
    remember(settings)  # its credentials are masked in every log line from here on
    # first: a worker that cannot judge as configured stops before it opens anything
    panel = take("llm_panel", lambda: _default_panel(settings))
    if settings.jobs.worker_nice and ctx.get("nice", True):
        # the API answers in milliseconds and must not wait behind embedding batches on a shared machine
        os.nice(settings.jobs.worker_nice)
    # commands wait for a Redis that restarts or refuses writes, as arq's pool does (workers/settings.py)
    client = take(
        "redis_client",
        lambda: Redis.from_url(settings.redis.url, retry=waiting_retry(), retry_on_error=list(REDIS_UNAVAILABLE)),
    )
    catalog = given.get("catalog")
    if catalog is None:
        shipped = RiskRegistry.load(settings.risk.models_dir)
        # migrates the schema first (idempotent; workers and API pods starting together wait for each other)
        store = await asyncio.to_thread(open_store, settings.durable)
        catalog = ModelCatalog(shipped, store, settings.risk.model)
    embedders: Embedders = take("embedders", lambda: Embedders(settings))
    _check_models(settings, catalog, embedders)
    indexes = take("indexes", lambda: Indexes(settings.index.path, settings.index.signature))

    def open_llm() -> Any:
        return LLMClient.from_settings(settings.llm, cache=ResponseCache(client)) if settings.llm.configured else None

    llm = take("llm", open_llm)
    worker = WorkerContext(
        settings=settings,
        redis_client=client,
        pool=ctx.get("redis"),
        catalog=catalog,
        # the records live in the durable store the catalog reads (one store per process)
        store=take("store", lambda: Store(client, retention_seconds=settings.redis.retention_seconds, db=catalog.db)),
        embedders=embedders,
        indexes=indexes,
        critical=take("critical", default_checker),
        llm=llm,
        llm_panel=panel,
        http=take("http", _callback_client),
        retry_delay=take("retry_delay", lambda: retry_delay),
        cheap_job_timeout=float(given.get("cheap_job_timeout") or CHEAP_JOB_TIMEOUT),
        llm_job_timeout=float(given.get("llm_job_timeout") or llm_job_timeout(settings)),
        length_models=take("length_models", dict),
    )
    ctx[KEY] = worker
    # loaded now: the first batch item waits for no load, and the heartbeat says which index this worker has
    loaded = await indexes.get()
    worker.heartbeat = given.get("heartbeat")
    if worker.heartbeat is None:
        # arq's pool waits out a full Redis inside its health record's write: the heartbeat keeps that record alive
        # meanwhile, so the liveness probe (`arq --check`) does not restart a worker that only waits
        pool_retry = getattr(getattr(worker.pool, "connection_pool", None), "connection_kwargs", {}).get("retry")
        worker.heartbeat = Heartbeat(
            client,
            settings.redis.queue_name,
            __version__,
            capabilities(worker, loaded),
            pool_waiting=(lambda: getattr(getattr(pool_retry, "state", None), "waiting", 0) > 0),
        )
        await worker.heartbeat.start()
    jobs = settings.jobs
    if worker.pool is not None and (jobs.reconcile_seconds or jobs.purge_seconds):
        from workers.reconcile import run_periodic

        # Redis holds only work in flight: the store's unfinished records are queued again when Redis lost them
        worker.periodic = asyncio.create_task(run_periodic(worker))
    logger.info("worker ready: peer embedding %s, LLM %s", embedders.peer_signature, "on" if llm else "off")


def _callback_client() -> httpx.AsyncClient:
    # callbacks go straight to the address the policy checked, never through HTTPS_PROXY (the LLM client's egress
    # route in a cluster, k8s/components/llm-egress-proxy): a proxy would resolve the name again, past the check
    return httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=3.0), follow_redirects=False, trust_env=False)


def _check_models(settings: Settings, catalog: ModelCatalog, embedders: Embedders) -> None:
    from service.core.pipeline import check_embedding_models

    check_embedding_models(
        catalog.shipped, [settings.risk.model, settings.risk.routing_model], embedders.peer_signature.get("model_id")
    )


def capabilities(worker: WorkerContext, indexes: dict[str, Any]) -> Capabilities:
    """What this worker publishes about itself (service.state.worker_registry): its judges, the indexes it loaded
    (and those it could not), its encoders."""
    settings = worker.settings
    panel = worker.llm_panel
    errors = dict(getattr(worker.indexes, "errors", {}))
    return Capabilities(
        judges=JudgeConfig(
            llm_configured=worker.llm is not None,
            provider=redact_url(settings.llm.base_url) if settings.llm.base_url else None,
            panel=panel.name if panel is not None else settings.llm.panel,
            judge_models=[j.model for j in panel.judges] if panel is not None else [],
        ),
        index=IndexState(signatures={lang: ix.signature_id for lang, ix in indexes.items()}, errors=errors),
        embedding={k: str(v) for k, v in (("peer", worker.embedders.peer_signature.get("model_id")),) if v is not None},
        encoder_threads=encoder_threads(settings.embedding),
    )


async def shutdown(ctx: dict[str, Any]) -> None:
    worker: WorkerContext | None = ctx.get(KEY)
    if worker is None:
        return  # startup stopped before it opened anything
    if worker.periodic is not None:
        worker.periodic.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker.periodic
    if worker.heartbeat is not None:
        await worker.heartbeat.stop()
    if worker.llm is not None:
        await worker.llm.aclose()
    await worker.http.aclose()
    await worker.redis_client.aclose()
