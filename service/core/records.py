"""The stored objects of trisk (assessments, batches) and the request types they are made from; all carry a tenant."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from service.core.budget import Budget
from service.core.judges.llm import CandidateChecks, CascadePlan, Cost, JudgeSpan
from service.core.novelty_report import SourceNovelty
from service.core.risk import RiskResult
from service.core.types import Flag, SignalResult

__all__ = [
    "ALL_CHECKS",
    "CHEAP_CHECKS",
    "DEFAULT_CHECKS",
    "LLM_CHECKS",
    "LLM_SIGNALS",
    "AssessmentMeta",
    "AssessmentRequest",
    "BatchMeta",
    "CallbackEvent",
    "CallbackState",
    "CandidateFinal",
    "CandidateIn",
    "CandidateOutcome",
    "CheapPart",
    "CheapSignature",
    "CheckName",
    "FinalPart",
    "Ident",
    "LLMPart",
    "LLMSignature",
    "LLMTierStatus",
    "LangCode",
    "PromptVersion",
    "Routing",
    "SourceIn",
    "Status",
    "Text",
    "callback_events",
    "merged_outcome",
]

# partial: the cheap tier's result is published (risk, flags, budget rank) and the LLM tier is still to come
Status = Literal["pending", "running", "partial", "done", "failed"]
# how an assessment's LLM tier ended (or that it is still to come); see views.LLMTierView
LLMTierStatus = Literal["not_requested", "skipped", "pending", "done", "invalid", "timed_out", "failed"]
# the events a caller may ask a callback for: the cheap tier's result, and the final one
CallbackEvent = Literal["cheap", "final"]

# the cheap tier runs on every assessment; the LLM tier only where the worker has a provider and the cascade picks it
CHEAP_CHECKS = ("peer_distance", "source_distance", "length_ratio", "hard_flags", "critical")
LLM_CHECKS = ("gemba", "backtranslation", "error_spans")
# the signal each LLM check writes per candidate
LLM_SIGNALS = {
    "gemba": "gemba_mean_risk",
    "backtranslation": "backtranslation_chrf_risk",
    "error_spans": "error_spans_mqm_risk",
}
ALL_CHECKS = CHEAP_CHECKS + LLM_CHECKS
# source_distance needs a multilingual encoder pass per candidate (~0.25 CPU-s each) and measured AUC 0.49 on the
# PaliBench dev half (no better than chance); error_spans costs a long answer (up to TRISK_LLM_TEXT_MAX_TOKENS) per
# judge on top of GEMBA's one number: both run only when a request asks for them
DEFAULT_CHECKS = tuple(c for c in ALL_CHECKS if c not in ("source_distance", "error_spans"))


# Request fields whose rules the OpenAPI document states and the service checks itself (a 422 naming the field): the
# document tells clients and fuzzers what is accepted, the 400/422 split stays (400 = malformed, 422 = semantics).
Text = Annotated[str, msgspec.Meta(extra_json_schema={"minLength": 1, "pattern": r"\S"}, description="not blank")]
LangCode = Annotated[
    str, msgspec.Meta(extra_json_schema={"pattern": r"^\s*[A-Za-z]{2,3}\s*$"}, description="an ISO 639 code")
]
Ident = Annotated[str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": 200, "pattern": r"\S"})]
CheckName = Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(ALL_CHECKS)})]


class SourceIn(msgspec.Struct, forbid_unknown_fields=True):
    """The source passage: its text, language and, optionally, a corpus reference such as ``mn1:3``."""

    text: Text
    lang: LangCode = "pli"
    ref: str | None = None


class CandidateIn(msgspec.Struct, forbid_unknown_fields=True):
    """One candidate translation; ``model`` names the system that produced it (for self-judging exclusion)."""

    id: Ident
    text: Text
    model: str | None = None


class AssessmentRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """An assessment as asked for. Stored without its unset fields, so a worker of the previous version still reads
    a request that does not use a newer field."""

    source: SourceIn
    candidates: Annotated[list[CandidateIn], msgspec.Meta(extra_json_schema={"minItems": 1})]
    checks: list[CheckName] | None = None
    callback_url: str | None = None
    # which results are POSTed to callback_url: the cheap tier's as soon as it is ready, the final one, or both
    callback_events: list[CallbackEvent] | None = None
    target_lang: LangCode = "en"
    # the cascade: share of candidates (by routing score) that get LLM checks, and a cap on LLM calls
    review_budget: float | None = None
    max_llm_calls: int | None = None


def callback_events(request: AssessmentRequest) -> list[CallbackEvent]:
    """The callbacks an assessment asked for: none without a URL, the final result unless it named its events."""
    if not request.callback_url:
        return []
    return list(dict.fromkeys(request.callback_events)) if request.callback_events else ["final"]


class CallbackState(msgspec.Struct):
    url: str
    status: Literal["pending", "delivered", "failed"] = "pending"
    attempts: int = 0
    last_error: str | None = None
    delivered_at: float | None = None


class AssessmentMeta(msgspec.Struct):
    """What the API wrote when it accepted the request (never changed by workers, except callback state)."""

    id: str
    tenant: str
    created_at: float
    request: AssessmentRequest
    checks: list[str]
    novelty: SourceNovelty
    # the worker parts that must finish: "cheap", then "llm" if LLM checks were asked for (the worker decides whether
    # it runs: without a provider it writes a skipped LLM part)
    parts: list[str]
    index_signature: str | None = None
    idempotency_key: str | None = None
    batch_id: str | None = None


class CandidateOutcome(msgspec.Struct):
    """What one tier computed for one candidate: signals (value or skip reason), the flags that fired and the error
    spans its judges marked (merged across judges; ``findings.findings_of`` lists them with the flags)."""

    signals: dict[str, SignalResult]
    flags: list[Flag]
    spans: list[JudgeSpan] = msgspec.field(default_factory=list)


def merged_outcome(candidate_id: str, cheap: CheapPart | None, llm: LLMPart | None) -> CandidateOutcome:
    """The one merge of a candidate's tiers: the cheap tier's signals and flags, then the LLM tier's on top."""
    signals: dict[str, SignalResult] = {}
    flags: list[Flag] = []
    spans: list[JudgeSpan] = []
    for part in (cheap, llm):
        outcome = part.candidates.get(candidate_id) if part is not None else None
        if outcome is not None:
            signals.update(outcome.signals)
            flags.extend(outcome.flags)
            spans.extend(outcome.spans)
    return CandidateOutcome(signals=signals, flags=flags, spans=spans)


class CheapSignature(msgspec.Struct):
    """What the cheap tier's numbers depend on: encoders, critical-content lexicon, length model, routing rule."""

    embedding: dict[str, Any]
    critical: dict[str, Any] | None = None
    length_model: str | None = None
    routing_model: str | None = None
    index: str | None = None  # signature id of the novelty index, when the worker computed the novelty


class CheapPart(msgspec.Struct):
    finished_at: float
    candidates: dict[str, CandidateOutcome]
    signature: CheapSignature
    routing: dict[str, float]  # candidate id -> routing score (what the cascade ranks by)
    # the source's novelty when the request left it to the worker (batch items), else None (it is in the meta)
    novelty: SourceNovelty | None = None


class PromptVersion(msgspec.Struct, frozen=True):
    version: str
    hash: str


class LLMSignature(msgspec.Struct):
    """What the LLM tier's numbers depend on: the panel and its judges, the prompts, the temperature."""

    panel: str
    panel_version: str
    judges: list[str]
    gemba_prompt: PromptVersion
    backtranslation_prompt: PromptVersion
    temperature: float
    spans_prompt: PromptVersion | None = None  # None: a part stored before error spans existed


class LLMPart(msgspec.Struct):
    """What the LLM tier did. ``status`` says how it ended: done (its checks ran, each with its own status),
    timed_out or failed (``reason``); a part that stopped has no judge results, only the reason on every check."""

    finished_at: float
    candidates: dict[str, CandidateOutcome]
    signature: LLMSignature
    cost: Cost
    plan: CascadePlan
    details: dict[str, CandidateChecks]  # candidate id -> what each judge answered
    # skipped: the worker that took the job has no LLM provider (reason says so); nothing was asked
    status: Literal["done", "skipped", "timed_out", "failed"] = "done"
    reason: str | None = None
    judges: dict[str, Cost] = msgspec.field(default_factory=dict)  # judge id -> calls, tokens, timeouts, seconds
    timed_out: list[str] = msgspec.field(default_factory=list)  # judges benched for timing out
    deadline_seconds: float | None = None


class Routing(msgspec.Struct, frozen=True):
    """The research's routing score (what the LLM cascade ranks by) and the rule that computed it."""

    rule: str | None
    score: float


class CandidateFinal(msgspec.Struct):
    """A candidate's final result: its risk and place in the one ranking, its flags, its budget rank."""

    risk: RiskResult
    routing: Routing | None
    flags: list[Flag]
    budget: Budget


class FinalPart(msgspec.Struct):
    finished_at: float
    candidates: dict[str, CandidateFinal]
    risk_models: list[str]  # name@version of every model that scored a candidate


class BatchMeta(msgspec.Struct):
    id: str
    tenant: str
    created_at: float
    assessment_ids: list[str]
