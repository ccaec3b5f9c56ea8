"""Response types of the assessment and batch endpoints (requests are ``service.core.records``)."""

from __future__ import annotations

from typing import Any

import msgspec

from service.core.records import AssessmentRequest

__all__ = ["AssessmentOut", "BatchAccepted", "BatchOut", "BatchRequest"]


class AssessmentOut(msgspec.Struct):
    """An assessment as stored: status, the source's novelty and, per candidate, signals, risk, flags and budget."""

    id: str
    status: str
    created_at: float
    source: dict[str, Any]
    checks: list[str]
    candidates: list[dict[str, Any]]
    signature: dict[str, Any]
    llm: dict[str, Any] | None = None
    error: str | None = None
    callback: dict[str, Any] | None = None
    batch_id: str | None = None


class BatchRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Many passages at once; each item is an assessment request."""

    items: list[AssessmentRequest]


class BatchAccepted(msgspec.Struct):
    id: str
    status: str
    total: int
    assessment_ids: list[str]


class BatchOut(msgspec.Struct):
    id: str
    status: str
    total: int
    counts: dict[str, int]
    created_at: float
    results_url: str
