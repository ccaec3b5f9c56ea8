"""Reading the durable store's records in tests: an assessment's row as the fields it has, the tenant's stored ids and
its score pool."""

from __future__ import annotations

from typing import Any

import msgspec
import sqlalchemy as sa

from service.platform.settings import DurableSettings, get_settings
from service.state.durable import DurableStore, open_store
from service.state.durable.packing import unpack
from service.state.durable.records_store import RecordStore
from service.state.durable.schema import assessments, score_pool

__all__ = ["pooled_count", "record_fields", "store_of", "stored_ids"]

# column -> the field name it had as a Redis hash (the tests' vocabulary); packed columns read back as JSON bytes
_FIELDS = {
    "cheap": "part:cheap",
    "provisional": "provisional",
    "llm": "part:llm",
    "final": "final",
    "callback": "callback",
    "callback_cheap": "callback:cheap",
    "started_at": "started",
    "llm_started_at": "llm_started",
    "failed": "failed",
    "tail_done_at": "tail",
    "tail_error": "tail_error",
    "pooled_at": "pooled",
    "meta": "meta",
}


def store_of(settings: DurableSettings | None = None, *, db_path: str | None = None) -> DurableStore:
    if db_path is not None:
        settings = DurableSettings(db_path=db_path, database_url="")
    return open_store(settings or get_settings().durable)


def record_fields(db: DurableStore, tenant: str, aid: str) -> dict[bytes, bytes]:
    """The assessment's stored fields (only those written), empty when there is no such assessment."""
    row = RecordStore(db).get(tenant, aid)
    if row is None:
        return {}
    out: dict[bytes, bytes] = {}
    for column, name in _FIELDS.items():
        value = getattr(row, column)
        if value is None:
            continue
        if isinstance(value, bytes | memoryview):
            out[name.encode()] = msgspec.json.encode(unpack(value))
        elif column == "tail_done_at":
            out[b"tail"] = b"done"
        else:
            out[name.encode()] = str(value).encode()
    return out


def stored_ids(db: DurableStore, tenant: str) -> set[str]:
    with db.engine.connect() as con:
        return set(con.execute(sa.select(assessments.c.id).where(assessments.c.tenant == tenant)).scalars())


def pooled_count(db: DurableStore, tenant: str, rule: str | None = None) -> int:
    """How many scores the tenant's pool holds (of one model version, or of all)."""
    c = score_pool.c
    query: Any = sa.select(sa.func.coalesce(sa.func.sum(c.n), 0)).where(c.tenant == tenant)
    if rule is not None:
        query = query.where(c.rule == rule)
    with db.engine.connect() as con:
        return int(con.execute(query).scalar_one())
