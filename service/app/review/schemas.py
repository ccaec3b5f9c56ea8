"""Request and response types of the review queue, verdict and adjudication endpoints."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from service.core.review.db import Label

__all__ = [
    "AdjudicationOut",
    "AdjudicationRequest",
    "ClaimRequest",
    "LeaseOut",
    "QueueItemOut",
    "QueuePage",
    "ReleaseOut",
    "RenewRequest",
    "ReviewItemOut",
    "VerdictOut",
    "VerdictRequest",
]

Reviewer = Annotated[str, msgspec.Meta(min_length=1, max_length=200, description="who reviews (a stable id)")]


class QueueItemOut(msgspec.Struct):
    """One queue entry: a candidate of an assessment, its budget position and review state."""

    id: str
    assessment_id: str
    candidate_id: str
    status: str  # open | leased | reviewed
    verdicts: int
    priority: float
    flagged: bool
    forced: bool
    tier: str | None
    percentile: float | None
    lang: str
    model: str | None
    batch_id: str | None
    passage: str
    risk: dict[str, Any] | None = None
    lease_id: str | None = None


class QueuePage(msgspec.Struct):
    items: list[QueueItemOut]
    total: int
    offset: int
    limit: int
    next_offset: int | None


class ClaimRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Lease up to ``n`` open items, in budget order, matching the filters; ``scope=all`` includes unflagged ones."""

    reviewer: Reviewer
    n: Annotated[int, msgspec.Meta(ge=1, description="how many items to lease")] = 10
    lease_seconds: Annotated[int, msgspec.Meta(ge=1)] | None = None
    tier: str | None = None
    lang: str | None = None
    model: str | None = None
    batch: str | None = None
    scope: Literal["flagged", "all"] = "flagged"


class LeaseOut(msgspec.Struct):
    lease_id: str
    reviewer: str
    expires_at: float
    created_at: float
    items: list[QueueItemOut]


class RenewRequest(msgspec.Struct, forbid_unknown_fields=True):
    reviewer: Reviewer
    lease_seconds: Annotated[int, msgspec.Meta(ge=1)] | None = None


class ReleaseOut(msgspec.Struct):
    lease_id: str
    released: int


class VerdictRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A reviewer's verdict; a later verdict on the same item is kept as a further opinion, never an overwrite."""

    reviewer: Reviewer
    label: Label
    note: Annotated[str, msgspec.Meta(max_length=10_000)] | None = None
    error_category: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    lease_id: str | None = None


class VerdictOut(msgspec.Struct):
    id: int
    tenant: str
    item_id: str
    assessment_id: str
    candidate_id: str
    reviewer: str
    label: str
    error_category: str | None
    note: str | None
    lease_id: str | None
    created_at: float
    opinion: int


class ReviewItemOut(msgspec.Struct):
    """Everything a reviewer needs on one item; ``assessment_status`` is "expired" when Redis no longer has it."""

    item: QueueItemOut
    assessment_status: str
    source: dict[str, Any] | None
    candidate: dict[str, Any] | None
    peers: list[dict[str, Any]]
    signals: dict[str, Any]
    flags: list[Any]
    judges: dict[str, Any]
    risk: dict[str, Any] | None
    routing: dict[str, Any] | None
    budget: dict[str, Any] | None
    verdicts: list[VerdictOut]
    adjudications: list[dict[str, Any]]


class AdjudicationRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Source, candidate and a human reference (an aid for the judges, never a score input); with ``item_id`` the
    source and candidate may be left out (they are read from the item's assessment) and the label is linked."""

    reference: Annotated[str, msgspec.Meta(min_length=1)]
    source: str | None = None
    candidate: str | None = None
    source_lang: str = "pli"
    candidate_model: str | None = None
    item_id: str | None = None
    panel: str | None = None


class AdjudicationOut(msgspec.Struct):
    id: str
    tenant: str
    created_at: float
    status: str  # done | skipped | inconclusive
    label: str | None
    reason: str | None
    item_id: str | None
    panel: str | None
    panel_version: str | None
    prompt_version: str
    prompt_hash: str
    judges: list[dict[str, Any]]
    votes: dict[str, int]
