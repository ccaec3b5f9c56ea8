"""Batch logic behind the controllers: a batch's progress counts (the JSON route and the workbench's batch page)."""

from __future__ import annotations

from collections import Counter

from service.app.assessments.schemas import BatchCounts, BatchOut
from service.state.store import Store

__all__ = ["batch_progress"]


async def batch_progress(store: Store, tenant: str, batch_id: str) -> BatchOut:
    """How far a batch has come: its assessments counted by status (NotFound for another tenant's or no batch)."""
    batch = await store.get_batch(tenant, batch_id)
    states = await store.get_many(tenant, batch.assessment_ids)
    counts = Counter(s.status if s is not None else "expired" for s in states)
    full = BatchCounts(**{k: counts.get(k, 0) for k in ("pending", "running", "partial", "done", "failed", "expired")})
    finished = full.done + full.failed + full.expired == len(states)
    started = full.running or full.partial or full.done or full.failed
    return BatchOut(
        id=batch.id,
        status="done" if finished else ("running" if started else "pending"),
        total=len(states),
        counts=full,
        created_at=batch.created_at,
        results_url=f"/v1/batches/{batch.id}/results",
    )
