"""Response types of the assessment and batch endpoints (requests are ``service.core.records``, the assessment view
is ``service.state.views``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from service.core.records import AssessmentRequest
from service.state.views import AssessmentView

__all__ = ["AssessmentOut", "BatchAccepted", "BatchOut", "BatchRequest"]

AssessmentOut = AssessmentView


class BatchRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Many passages at once; each item is an assessment request."""

    items: Annotated[list[AssessmentRequest], msgspec.Meta(extra_json_schema={"minItems": 1})]


class BatchAccepted(msgspec.Struct):
    id: str
    status: Literal["pending"]
    total: int
    assessment_ids: list[str]


class BatchCounts(msgspec.Struct):
    """Assessments by status; ``partial`` ones have their cheap-tier result and wait for the LLM tier."""

    pending: int
    running: int
    done: int
    failed: int
    expired: int = 0
    partial: int = 0


class BatchOut(msgspec.Struct):
    id: str
    status: Literal["pending", "running", "done"]
    total: int
    counts: BatchCounts
    created_at: float
    results_url: str
