"""The cheap tier of an assessment on a worker: novelty of a batch item, embeddings, signals and flags
(``service.core.pipeline.cheap_tier``) with the worker's encoders, length models and critical checker."""

from __future__ import annotations

import asyncio
from typing import Any

from service.core.embeddings._cache import for_tenant
from service.core.judges.llm import NO_PROVIDER
from service.core.novelty_report import NoveltyPending, source_novelty
from service.core.pipeline import cheap_tier
from service.core.records import LLM_CHECKS, LLM_SIGNALS, CheapPart
from service.core.types import SignalSkipped
from service.state.store import AssessmentState
from workers.context import WorkerContext

__all__ = ["run_cheap"]


def _length_model(w: WorkerContext, src: str, tgt: str) -> Any:
    from service.core.signals import load_length_model

    if (src, tgt) not in w.length_models:
        w.length_models[(src, tgt)] = load_length_model(src, tgt, w.settings.risk.models_dir)
    return w.length_models[(src, tgt)]


async def run_cheap(w: WorkerContext, state: AssessmentState) -> CheapPart:
    """The cheap part of an assessment (the novelty of a batch item first: the API left it pending)."""
    novelty, index_signature = state.meta.novelty, None
    if isinstance(novelty, NoveltyPending):
        req = state.meta.request
        indexes = await w.indexes.get()
        novelty, index_signature = await asyncio.to_thread(source_novelty, indexes, req.source.text, req.source.lang)
    part = await asyncio.to_thread(_cheap_part, w, state, novelty)
    if isinstance(state.meta.novelty, NoveltyPending):
        part.novelty = novelty
        part.signature.index = index_signature
    return part


def _cheap_part(w: WorkerContext, state: AssessmentState, novelty: Any) -> CheapPart:
    req = state.meta.request
    embedders = w.embedders
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
        length_model=_length_model(w, req.source.lang, req.target_lang),
        critical=w.critical,
        registry=w.catalog.shipped,
        routing_model=w.settings.risk.routing_model,
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
