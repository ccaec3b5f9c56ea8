"""How an assessment reads from outside: the one typed view used by the API, batch downloads, callbacks and reviewers.

``candidate_result`` is the one merge of a candidate's stored parts (cheap tier, LLM tier, final result); the
result shown is the final one, else the cheap tier's provisional one (status ``partial``), and ``llm_tier`` says
where the LLM tier is: pending, done, timed out or failed, with its checks counted by how they ended.
"""

from __future__ import annotations

from typing import Any

import msgspec

from service.core.budget import Budget
from service.core.findings import Finding, findings_of
from service.core.judges.llm import (
    NO_PROVIDER,
    CandidateChecks,
    CascadePlan,
    Cost,
    JudgeRun,
    dominant_cause,
    dominant_status,
)
from service.core.novelty_report import NoveltyPending, SourceNovelty
from service.core.records import (
    LLM_CHECKS,
    CallbackState,
    LLMSignature,
    LLMTierStatus,
    Routing,
    Status,
    merged_outcome,
)
from service.core.risk import RiskResult
from service.core.types import Flag, SignalResult
from service.state.store import AssessmentState

__all__ = [
    "AssessmentSignature",
    "AssessmentView",
    "CandidateResult",
    "LLMTierView",
    "LLMView",
    "SourceView",
    "candidate_result",
    "llm_tier_of",
    "render_assessment",
    "source_novelty_of",
]


class SourceView(msgspec.Struct):
    text: str
    lang: str
    ref: str | None
    novelty: SourceNovelty


class CandidateResult(msgspec.Struct):
    """One candidate: every signal (value or skip reason), the flags that fired and, once the cheap tier's result is
    published (status partial) or the final one (done), its risk (sort by ``risk.priority``; ``risk.basis`` says which
    tiers it reflects), routing score and budget rank. ``findings``: the flags and the judges' merged error spans as
    a reviewer judges them (``findings.findings_of``: ids, categories, spans in the candidate)."""

    id: str
    model: str | None
    signals: dict[str, SignalResult]
    flags: list[Flag]
    risk: RiskResult | None = None
    routing: Routing | None = None
    budget: Budget | None = None
    findings: list[Finding] = msgspec.field(default_factory=list)


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
    """What the LLM cascade planned, what it cost (in total and per judge: calls, tokens, timeouts, seconds), which
    judges were benched for timing out, and what each judge answered, per candidate."""

    plan: CascadePlan
    cost: Cost
    details: dict[str, CandidateChecks]
    judges: dict[str, Cost] = msgspec.field(default_factory=dict)
    timed_out: list[str] = msgspec.field(default_factory=list)
    deadline_seconds: float | None = None


class LLMTierView(msgspec.Struct):
    """Where the LLM tier is. ``checks``: per LLM check, how many candidates' checks ran, were skipped (below the
    budget, no provider, the day's spend), gave answers that did not parse (invalid), timed_out or failed (no judge
    reached); ``judges``: per check, the judges asked by how each ended (valid, invalid, timed_out, failed, skipped);
    ``attempts``: per check, the answers the judges gave in all. ``reason``, when the tier stopped or nothing
    answered, names the dominant cause ("3 of 3 judges gave answers that do not parse: truncated at max_tokens")."""

    status: LLMTierStatus
    reason: str | None = None
    checks: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    judges: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)
    attempts: dict[str, int] = msgspec.field(default_factory=dict)


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
    llm_tier: LLMTierView | None = None
    cheap_callback: CallbackState | None = None


def candidate_result(state: AssessmentState, candidate_id: str, model: str | None) -> CandidateResult:
    """A candidate's signals and flags from both tiers, and its final risk, routing and budget when there is one."""
    merged = merged_outcome(candidate_id, state.cheap, state.llm)
    published = state.published
    final = published.candidates.get(candidate_id) if published is not None else None
    if final is None:
        return CandidateResult(
            id=candidate_id,
            model=model,
            signals=merged.signals,
            flags=merged.flags,
            findings=findings_of(merged.flags, merged.spans),
        )
    return CandidateResult(
        id=candidate_id,
        model=model,
        signals=merged.signals,
        flags=final.flags,
        risk=final.risk,
        routing=final.routing,
        budget=final.budget,
        findings=findings_of(final.flags, merged.spans),
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
    if state.published is not None:
        signature.risk_models = state.published.risk_models
    return AssessmentView(
        id=meta.id,
        status=state.status,
        created_at=meta.created_at,
        source=SourceView(text=req.source.text, lang=req.source.lang, ref=req.source.ref, novelty=novelty),
        checks=meta.checks,
        candidates=[candidate_result(state, c.id, c.model) for c in req.candidates],
        signature=signature,
        llm=None if state.llm is None else _llm_view(state),
        error=state.failed,
        callback=state.callback,
        batch_id=meta.batch_id,
        llm_tier=llm_tier_of(state),
        cheap_callback=state.cheap_callback,
    )


def _llm_view(state: AssessmentState) -> LLMView:
    llm = state.llm
    assert llm is not None
    return LLMView(
        plan=llm.plan,
        cost=llm.cost,
        details=llm.details,
        judges=llm.judges,
        timed_out=llm.timed_out,
        deadline_seconds=llm.deadline_seconds,
    )


def llm_tier_of(state: AssessmentState) -> LLMTierView:
    """How the LLM tier stands: not asked for, skipped (no provider), still to come, or how it ended."""
    wanted = [c for c in state.meta.checks if c in LLM_CHECKS]
    if not wanted:
        return LLMTierView(status="not_requested")
    if "llm" not in state.meta.parts:
        return LLMTierView(status="skipped", reason=NO_PROVIDER)
    llm = state.llm
    if llm is None:
        if state.final is not None or state.failed is not None:  # finished before the tier (an older record)
            return LLMTierView(status="failed", reason=state.failed or "the LLM tier left no result")
        return LLMTierView(status="pending")
    if llm.status != "done":
        n = len(state.meta.request.candidates)
        return LLMTierView(status=llm.status, reason=llm.reason, checks={c: {llm.status: n} for c in wanted})
    ended = [o for d in llm.details.values() for o in d.checks]
    checks: dict[str, dict[str, int]] = {c: {} for c in wanted}
    judges: dict[str, dict[str, int]] = {c: {} for c in wanted}
    attempts: dict[str, int] = {c: 0 for c in wanted}
    for outcome in ended:
        if outcome.check in checks:
            checks[outcome.check][outcome.status] = checks[outcome.check].get(outcome.status, 0) + 1
            for status, n in outcome.judges.items():
                judges[outcome.check][status] = judges[outcome.check].get(status, 0) + n
            attempts[outcome.check] += outcome.attempts
    view = LLMTierView(status="done", checks=checks, judges=judges, attempts=attempts)
    if any(o.status == "ran" for o in ended):
        return view
    # nothing answered: the tier reads as most of its judges ended (answers that did not parse, a judge too slow
    # for the deadline, a provider down for the whole job), with the dominant cause in words
    answers = [a for d in llm.details.values() for a in _judge_answers(d)]
    cause = dominant_status(answers)
    if cause == "invalid" or cause == "timed_out" or cause == "failed":
        view.status, view.reason = cause, dominant_cause(answers)
    return view


def _judge_answers(checks: CandidateChecks) -> list[JudgeRun]:
    answers: list[JudgeRun] = list(checks.gemba_result.judges) if checks.gemba_result is not None else []
    if checks.backtranslation_result is not None:
        answers.append(checks.backtranslation_result)
    if checks.error_spans_result is not None:
        answers.extend(checks.error_spans_result.judges)
    return answers
