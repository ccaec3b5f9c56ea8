"""The durable store: what the service must never lose (reviewer verdicts, panel adjudications, fits, fitted risk
models and their activations, the review queue's items), on SQLite for one machine or PostgreSQL for several, one
schema, Alembic migrations, rows the database itself refuses to change."""

from __future__ import annotations

from service.core.durable.engine import database_url, describe, make_engine
from service.core.durable.migrate import upgrade
from service.core.durable.records import LABELS, Activation, Adjudication, FitRecord, Label, Verdict
from service.core.durable.review_items import forget_items
from service.core.durable.store import DuplicateRecord, DurableStore, StoreUnavailable, close_stores, open_store

__all__ = [
    "LABELS",
    "Activation",
    "Adjudication",
    "DuplicateRecord",
    "DurableStore",
    "FitRecord",
    "Label",
    "StoreUnavailable",
    "Verdict",
    "close_stores",
    "database_url",
    "describe",
    "forget_items",
    "make_engine",
    "open_store",
    "upgrade",
]
