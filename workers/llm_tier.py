"""The LLM tier of an assessment on a worker: the judge cascade (``service.core.judges.llm.run_cascade``) within the LLM
deadline, and the LLM part it stores (its result, or the reason it stopped: skipped, timed_out, failed)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from service.core.records import LLM_CHECKS, LLM_SIGNALS, CandidateOutcome, LLMPart, LLMSignature, PromptVersion
from service.core.types import SignalSkipped
from service.state.store import AssessmentState
from workers.context import WorkerContext
from workers.policy import LLM_GRACE_SECONDS

__all__ = ["LLMStop", "llm_guard", "run_llm_tier", "stopped_part"]

LLMStop = Literal["skipped", "timed_out", "failed"]


def _cascade_items(state: AssessmentState) -> list[Any]:
    from service.core.judges.llm import CascadeItem

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
        "error_spans": "error_spans" in state.meta.checks,
    }


async def llm_guard(w: WorkerContext, state: AssessmentState) -> Any:
    """The LLM deadline of this assessment, counted from the first try's start (stored once): a retry or a
    redelivery after a lost worker gets what is left of it, not a fresh deadline."""
    from service.core.judges.llm import CallGuard

    deadline = w.settings.llm.deadline_seconds
    if deadline <= 0:
        return CallGuard(0)
    first = await w.store.llm_started_at(state.meta.tenant, state.meta.id)
    guard = CallGuard(deadline)
    guard.deadline -= max(0.0, time.time() - first)
    return guard


async def run_llm_tier(w: WorkerContext, state: AssessmentState, guard: Any) -> LLMPart:
    """The judge cascade within the LLM deadline; a tier that outlives it (plus a grace) stops as timed_out."""
    from service.core.judges.llm import run_cascade

    settings = w.settings
    deadline = settings.llm.deadline_seconds
    if deadline > 0 and guard.remaining() <= 0:
        return stopped_part(w, state, "timed_out", f"the LLM deadline of {deadline:g} s passed across tries", guard)
    try:
        async with asyncio.timeout(guard.remaining() + LLM_GRACE_SECONDS if deadline > 0 else None):
            result = await run_cascade(
                w.llm_for(state.meta.tenant),
                _cascade_items(state),
                w.llm_panel,
                settings.llm,
                guard=guard,
                **_cascade_asked(state),
            )
    except TimeoutError:
        return stopped_part(w, state, "timed_out", f"the LLM tier ran past its deadline of {deadline:g} s", guard)
    return _llm_part(w, result, state.meta.checks)


def _llm_signature(w: WorkerContext) -> LLMSignature:
    from service.core.judges.llm import (
        BACKTRANSLATION_PROMPT_HASH,
        BACKTRANSLATION_PROMPT_VERSION,
        GEMBA_PROMPT_HASH,
        GEMBA_PROMPT_VERSION,
        SPANS_PROMPT_HASH,
        SPANS_PROMPT_VERSION,
    )

    panel = w.llm_panel
    return LLMSignature(
        panel=panel.name,
        panel_version=panel.version,
        judges=[j.model for j in panel.judges],
        gemba_prompt=PromptVersion(GEMBA_PROMPT_VERSION, GEMBA_PROMPT_HASH),
        backtranslation_prompt=PromptVersion(BACKTRANSLATION_PROMPT_VERSION, BACKTRANSLATION_PROMPT_HASH),
        temperature=w.settings.llm.temperature,
        spans_prompt=PromptVersion(SPANS_PROMPT_VERSION, SPANS_PROMPT_HASH),
    )


def _llm_part(w: WorkerContext, result: Any, checks: list[str]) -> LLMPart:
    candidates: dict[str, CandidateOutcome] = {}
    for c in result.candidates:
        flags = list(c.gemba_result.flags) if c.gemba_result is not None else []
        signals = {LLM_SIGNALS["gemba"]: c.gemba, LLM_SIGNALS["backtranslation"]: c.backtranslation}
        if "error_spans" in checks:  # an opt-in check: its signal is listed only when it was asked for
            signals[LLM_SIGNALS["error_spans"]] = c.error_spans
        spans = list(c.error_spans_result.spans) if c.error_spans_result is not None else []
        candidates[c.id] = CandidateOutcome(signals=signals, flags=flags, spans=spans)
    return LLMPart(
        finished_at=time.time(),
        candidates=candidates,
        signature=_llm_signature(w),
        cost=result.cost,
        plan=result.plan,
        details={c.id: c for c in result.candidates},
        judges=result.judges,
        timed_out=result.timed_out,
        deadline_seconds=result.deadline_seconds,
    )


def stopped_part(w: WorkerContext, state: AssessmentState, status: LLMStop, reason: str, guard: Any = None) -> LLMPart:
    """The LLM part of a tier that stopped (or never ran: skipped, no provider on this worker): no judge results, the
    reason on every LLM signal, what was planned and what the judges had cost so far."""
    from service.core.judges.llm import Cost, planned_with

    req = state.meta.request
    settings = w.settings
    signals = [LLM_SIGNALS[c] for c in state.meta.checks if c in LLM_CHECKS]
    skipped = SignalSkipped(reason=reason if status == "skipped" else f"LLM tier {status.replace('_', ' ')}: {reason}")
    plan = planned_with(
        _cascade_items(state), w.llm_panel, settings.llm, configured=status != "skipped", **_cascade_asked(state)
    )
    judges = dict(sorted(guard.costs.items())) if guard is not None else {}
    return LLMPart(
        finished_at=time.time(),
        candidates={c.id: CandidateOutcome(signals=dict.fromkeys(signals, skipped), flags=[]) for c in req.candidates},
        signature=_llm_signature(w),
        cost=Cost.total(judges.values()),
        plan=plan,
        details={},
        status=status,
        reason=reason,
        judges=judges,
        timed_out=sorted(guard.benched) if guard is not None else [],
        deadline_seconds=settings.llm.deadline_seconds,
    )
