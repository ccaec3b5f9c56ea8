"""How an assessment reads from outside: the one typed view used by the API, batch downloads, callbacks and reviewers.

``candidate_result`` is the one merge of a candidate's stored parts (cheap tier, LLM tier, final result).
"""

from __future__ import annotations

from typing import Any

import msgspec

from service.core.budget import Budget
from service.core.llm import CandidateChecks, CascadePlan, Cost
from service.core.novelty_report import NoveltyPending, SourceNovelty
from service.core.records import CallbackState, LLMSignature, Routing, Status, merged_outcome
from service.core.risk import RiskResult
from service.core.store import AssessmentState
from service.core.types import Flag, SignalResult

__all__ = [
    "AssessmentSignature",
    "AssessmentView",
    "CandidateResult",
    "LLMView",
    "SourceView",
    "candidate_result",
    "render_assessment",
    "source_novelty_of",
]


class SourceView(msgspec.Struct):
    text: str
    lang: str
    ref: str | None
    novelty: SourceNovelty


class CandidateResult(msgspec.Struct):
    """One candidate: every signal (value or skip reason), the flags that fired and, once finished, its risk (sort
    by ``risk.priority``), routing score and budget rank."""

    id: str
    model: str | None
    signals: dict[str, SignalResult]
    flags: list[Flag]
    risk: RiskResult | None = None
    routing: Routing | None = None
    budget: Budget | None = None


class AssessmentSignature(msgspec.Struct):
    """Everything the numbers depend on, so any of them can be reproduced."""

    index: str | None = None
    embedding: dict[str, Any] | None = None
    critical: dict[str, Any] | None = None
    length_model: str | None = None
    routing_model: str | None = None
    llm: LLMSignature | None = None
    risk_models: list[str] | None = None


class LLMView(msgspec.Struct):
    """What the LLM cascade planned, what it cost and what each judge answered, per candidate."""

    plan: CascadePlan
    cost: Cost
    details: dict[str, CandidateChecks]


class AssessmentView(msgspec.Struct):
    """An assessment as stored: status, the source with its novelty and, per candidate, the results."""

    id: str
    status: Status
    created_at: float
    source: SourceView
    checks: list[str]
    candidates: list[CandidateResult]
    signature: AssessmentSignature
    llm: LLMView | None = None
    error: str | None = None
    callback: CallbackState | None = None
    batch_id: str | None = None


def candidate_result(state: AssessmentState, candidate_id: str, model: str | None) -> CandidateResult:
    """A candidate's signals and flags from both tiers, and its final risk, routing and budget when there is one."""
    merged = merged_outcome(candidate_id, state.cheap, state.llm)
    final = state.final.candidates.get(candidate_id) if state.final is not None else None
    if final is None:
        return CandidateResult(id=candidate_id, model=model, signals=merged.signals, flags=merged.flags)
    return CandidateResult(
        id=candidate_id,
        model=model,
        signals=merged.signals,
        flags=final.flags,
        risk=final.risk,
        routing=final.routing,
        budget=final.budget,
    )


def source_novelty_of(state: AssessmentState) -> tuple[SourceNovelty, str | None]:
    """The source's novelty and index signature: from the request, or from the worker when it computed them."""
    meta = state.meta
    if isinstance(meta.novelty, NoveltyPending) and state.cheap is not None and state.cheap.novelty is not None:
        return state.cheap.novelty, state.cheap.signature.index
    return meta.novelty, meta.index_signature


def render_assessment(state: AssessmentState) -> AssessmentView:
    meta = state.meta
    req = meta.request
    novelty, index_signature = source_novelty_of(state)
    signature = AssessmentSignature(index=index_signature)
    if state.cheap is not None:
        sig = state.cheap.signature
        signature.embedding = sig.embedding
        signature.critical = sig.critical
        signature.length_model = sig.length_model
        signature.routing_model = sig.routing_model
    if state.llm is not None:
        signature.llm = state.llm.signature
    if state.final is not None:
        signature.risk_models = state.final.risk_models
    return AssessmentView(
        id=meta.id,
        status=state.status,
        created_at=meta.created_at,
        source=SourceView(text=req.source.text, lang=req.source.lang, ref=req.source.ref, novelty=novelty),
        checks=meta.checks,
        candidates=[candidate_result(state, c.id, c.model) for c in req.candidates],
        signature=signature,
        llm=None if state.llm is None else LLMView(plan=state.llm.plan, cost=state.llm.cost, details=state.llm.details),
        error=state.failed,
        callback=state.callback,
        batch_id=meta.batch_id,
    )
