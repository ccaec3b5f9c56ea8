"""Human review: the review queue, panel adjudications and calibration (fits from the verdicts and labels); the queue's
rows and the verdicts are in ``service.state.durable``."""

from __future__ import annotations

from service.review.adjudication import (
    ADJUDICATION_PROMPT_HASH,
    ADJUDICATION_PROMPT_VERSION,
    JudgeVote,
    build_adjudication_messages,
    majority_label,
    parse_adjudication,
    run_panel,
)
from service.review.queue import (
    FLAG_SEVERITIES,
    MAX_OFFSET,
    ItemSnapshot,
    Lease,
    QueueItem,
    ReviewQueue,
    enqueue_for_review,
    item_id_of,
    queue_items,
    signal_snapshot,
)
from service.review.settings import ReviewSettings, get_review_settings

__all__ = [
    "ADJUDICATION_PROMPT_HASH",
    "ADJUDICATION_PROMPT_VERSION",
    "FLAG_SEVERITIES",
    "MAX_OFFSET",
    "ItemSnapshot",
    "JudgeVote",
    "Lease",
    "QueueItem",
    "ReviewQueue",
    "ReviewSettings",
    "build_adjudication_messages",
    "enqueue_for_review",
    "get_review_settings",
    "item_id_of",
    "majority_label",
    "parse_adjudication",
    "queue_items",
    "run_panel",
    "signal_snapshot",
]
