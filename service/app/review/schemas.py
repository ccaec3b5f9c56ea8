"""Request and response types of the review queue, verdict and adjudication endpoints."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from service.core.budget import Budget
from service.core.findings import Finding
from service.core.judges.llm import CandidateChecks
from service.core.records import Routing, Status
from service.core.risk import RiskResult
from service.core.types import Flag, SignalResult
from service.core.typology import ErrorSpan, FindingJudgement
from service.review.adjudication import JudgeVote
from service.state.durable import Label
from service.state.durable.review_items import COUNTED
from service.state.views import LLMTierView, SourceView

__all__ = [
    "AdjudicationOut",
    "AdjudicationRequest",
    "ClaimRequest",
    "LeaseOut",
    "QueueItemOut",
    "QueuePage",
    "ReleaseOut",
    "RenewRequest",
    "ReviewCandidate",
    "ReviewItemOut",
    "VerdictOut",
    "VerdictRequest",
]

Reviewer = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=200,
        description=(
            "optional: the key names its reviewer (`name (key id)`, as the answers show); a name given here must be "
            "that one (403 otherwise)"
        ),
    ),
]


class QueueItemOut(msgspec.Struct):
    """One queue entry: a candidate of an assessment, its budget position and review state."""

    id: str
    assessment_id: str
    candidate_id: str
    status: Literal["open", "leased", "reviewed"]
    verdicts: int
    priority: float  # the candidate's risk.priority: the queue's order
    flagged: bool
    forced: bool
    tier: str | None
    percentile: float | None
    lang: str
    model: str | None
    batch_id: str | None
    passage: str
    risk: RiskResult | None = None
    lease_id: str | None = None
    flags: list[Flag] = msgspec.field(default_factory=list)  # the findings, worded for a reviewer
    # who holds the live lease (the reviewer its key names) and until when; None unless the item is leased
    leased_to: str | None = None
    lease_expires: float | None = None


_TOTAL = (
    f"the items that match, counted up to offset + {COUNTED:,}: a lower bound when total_exact is false (the count "
    "stops there, so a page costs the same at any queue size)"
)


class QueuePage(msgspec.Struct):
    items: list[QueueItemOut]
    total: Annotated[int, msgspec.Meta(description=_TOTAL)]
    total_exact: Annotated[
        bool, msgspec.Meta(description="whether total is the exact number of matching items (false: at least total)")
    ]
    offset: int
    limit: int
    next_offset: int | None


class ClaimRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Lease up to ``n`` open items, in budget order, matching the filters; ``scope=all`` includes unflagged ones."""

    reviewer: Reviewer | None = None
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
    reviewer: Reviewer | None = None
    lease_seconds: Annotated[int, msgspec.Meta(ge=1)] | None = None


class ReleaseOut(msgspec.Struct):
    lease_id: str
    released: int


class VerdictRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A reviewer's verdict; a later verdict on the same item is kept as a further opinion, never an overwrite. An
    unreviewed item under a live lease takes a verdict only with that lease (its holder's); a retry of a verdict is
    recognised by its lease, or by the request's Idempotency-Key, and returns the verdict stored."""

    label: Label
    reviewer: Reviewer | None = None
    note: Annotated[str, msgspec.Meta(max_length=10_000)] | None = None
    error_category: Annotated[str, msgspec.Meta(max_length=100)] | None = None
    lease_id: str | None = None
    findings: Annotated[
        list[FindingJudgement],
        msgspec.Meta(
            max_length=200,
            description=(
                "the reviewer's word on findings the item lists (`findings[].id` of GET /v1/review/items/{item_id}): "
                "accept, reject, or regrade with a severity; an id the item does not list is a 422"
            ),
        ),
    ] = msgspec.field(default_factory=list)
    spans: Annotated[
        list[ErrorSpan],
        msgspec.Meta(
            max_length=200,
            description="errors the reviewer marked herself: offsets into the candidate's (or source's) NFC text",
        ),
    ] = msgspec.field(default_factory=list)
    replaces: (
        Annotated[
            int,
            msgspec.Meta(
                ge=1,
                description=(
                    "the id of your own last verdict on this item, to replace it (within "
                    "TRISK_REVIEW_REPLACE_SECONDS of giving it): both are kept, the new one supersedes it. Without it "
                    "a second verdict of yours is a 409"
                ),
            ),
        ]
        | None
    ) = None
    active_seconds: (
        Annotated[
            float,
            msgspec.Meta(ge=0, le=86_400, description="seconds the item was in front of the reviewer (a client says)"),
        ]
        | None
    ) = None


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
    findings: list[FindingJudgement] = msgspec.field(default_factory=list)
    spans: list[ErrorSpan] = msgspec.field(default_factory=list)
    supersedes: int | None = None  # the reviewer's own verdict this one replaced (kept, no longer counted)
    lease_seconds: float | None = None  # from the claim to the verdict (None: given without a lease)
    active_seconds: float | None = None  # with the item in front of the reviewer, as her client measured it


class ReviewCandidate(msgspec.Struct):
    """A candidate of the item's passage as the reviewer sees it."""

    id: str
    model: str | None
    text: str
    risk: RiskResult | None
    budget: Budget | None
    flags: list[Flag]


class AdjudicationOut(msgspec.Struct):
    id: str
    tenant: str
    created_at: float
    status: Literal["pending", "done", "skipped", "inconclusive", "failed"]
    label: Label | None
    reason: str | None
    item_id: str | None
    panel: str | None
    panel_version: str | None
    prompt_version: str
    prompt_hash: str
    judges: list[JudgeVote]
    votes: dict[str, int]


class ReviewItemOut(msgspec.Struct):
    """Everything a reviewer needs on one item; ``assessment_status`` is "expired" when Redis no longer has it."""

    item: QueueItemOut
    assessment_status: Status | Literal["expired"]
    source: SourceView | None
    candidate: ReviewCandidate | None
    peers: list[ReviewCandidate]
    signals: dict[str, SignalResult]
    flags: list[Flag]
    judges: dict[str, SignalResult]  # the LLM tier's signals of this candidate (GEMBA, backtranslation)
    judge_scores: dict[str, float | None]
    risk: RiskResult | None
    routing: Routing | None
    budget: Budget | None
    verdicts: list[VerdictOut]
    adjudications: list[AdjudicationOut]
    # the item's findings (its stored flags) with the ids a verdict's judgements name
    findings: list[Finding] = msgspec.field(default_factory=list)
    # what each judge answered on this candidate (a score, an answer that did not parse, a timeout...), and how the
    # assessment's LLM tier stands; None when the tier did not run or the assessment has expired
    judge_answers: CandidateChecks | None = None
    llm_tier: LLMTierView | None = None


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
