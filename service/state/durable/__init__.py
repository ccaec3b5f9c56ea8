"""The durable store: what the service must never lose (reviewer verdicts, panel adjudications, fits, fitted risk
models and their activations, the review queue's items), on SQLite for one machine or PostgreSQL for several, one
schema, Alembic migrations, rows the database itself refuses to change."""

from __future__ import annotations

from service.state.durable.engine import database_url, describe, make_engine
from service.state.durable.migrate import upgrade
from service.state.durable.records import LABELS, Activation, Adjudication, FitRecord, Label, Verdict, in_force
from service.state.durable.review_items import forget_items
from service.state.durable.store import DuplicateRecord, DurableStore, StoreUnavailable, close_stores, open_store

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
    "in_force",
    "make_engine",
    "open_store",
    "upgrade",
]
