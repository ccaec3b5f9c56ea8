"""The stored objects of trisk (assessments, batches) and the request types they are made from; all carry a tenant."""

from __future__ import annotations

from typing import Literal

import msgspec

from service.core.types import Flag, SignalResult

__all__ = [
    "ALL_CHECKS",
    "CHEAP_CHECKS",
    "DEFAULT_CHECKS",
    "LLM_CHECKS",
    "AssessmentMeta",
    "AssessmentRequest",
    "BatchMeta",
    "CallbackState",
    "CandidateIn",
    "CandidateOutcome",
    "CheapPart",
    "FinalPart",
    "LLMPart",
    "SourceIn",
    "Status",
]

Status = Literal["pending", "running", "done", "failed"]

# the cheap tier runs on every assessment; the LLM tier only where a provider is configured and the cascade picks it
CHEAP_CHECKS = ("peer_distance", "source_distance", "length_ratio", "hard_flags", "critical")
LLM_CHECKS = ("gemba", "backtranslation")
ALL_CHECKS = CHEAP_CHECKS + LLM_CHECKS
# source_distance needs a multilingual encoder pass per candidate (~0.25 CPU-s each) and measured AUC 0.49 on the
# PaliBench dev half (no better than chance): it runs only when a request asks for it
DEFAULT_CHECKS = tuple(c for c in ALL_CHECKS if c != "source_distance")


class SourceIn(msgspec.Struct, forbid_unknown_fields=True):
    """The source passage: its text, language and, optionally, a corpus reference such as ``mn1:3``."""

    text: str
    lang: str = "pli"
    ref: str | None = None


class CandidateIn(msgspec.Struct, forbid_unknown_fields=True):
    """One candidate translation; ``model`` names the system that produced it (for self-judging exclusion)."""

    id: str
    text: str
    model: str | None = None


class AssessmentRequest(msgspec.Struct, forbid_unknown_fields=True):
    source: SourceIn
    candidates: list[CandidateIn]
    checks: list[str] | None = None
    callback_url: str | None = None
    target_lang: str = "en"
    # the cascade: share of candidates (by routing score) that get LLM checks, and a cap on LLM calls
    review_budget: float | None = None
    max_llm_calls: int | None = None


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
    novelty: dict[str, object]
    parts: list[str]  # the worker parts that must finish: "cheap", then "llm" if LLM checks were asked for
    index_signature: str | None = None
    idempotency_key: str | None = None
    batch_id: str | None = None


class CandidateOutcome(msgspec.Struct):
    signals: dict[str, SignalResult]
    flags: list[Flag]


class CheapPart(msgspec.Struct):
    finished_at: float
    candidates: dict[str, CandidateOutcome]
    signature: dict[str, object]
    routing: dict[str, float]  # candidate id -> routing score (what the cascade ranks by)


class LLMPart(msgspec.Struct):
    finished_at: float
    candidates: dict[str, CandidateOutcome]
    signature: dict[str, object]
    cost: dict[str, object]
    plan: dict[str, object]


class FinalPart(msgspec.Struct):
    finished_at: float
    # candidate id -> {"risk": {...}, "budget": {...}, "flags": [...]}
    candidates: dict[str, dict[str, object]]
    signature: dict[str, object]


class BatchMeta(msgspec.Struct):
    id: str
    tenant: str
    created_at: float
    assessment_ids: list[str]
