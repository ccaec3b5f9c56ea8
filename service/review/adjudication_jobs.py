"""Queued adjudications: the request waits in the durable store while a worker runs the panel, then its record is
stored once.

The API validates the request and either stores a record at once (too few eligible judges in the panel:
status ``skipped`` with the reason) or queues it (status ``pending``). The ``adjudicate`` job (a judge job of kind
``adjudication``, workers/judge_jobs.py: the deadline, budget and failure policy of every judge job) runs the panel
with the worker's shared LLM client (its response cache included) and appends the record to the durable store; a
second delivery finds the record there and does nothing; a job that fails for good reads ``failed`` with the reason.

The pending adjudication (an ``Adjudication`` with status pending) is a row of ``judge_jobs`` (kind
``adjudication``) until its record is stored; the workers' reconciler queues its job again if Redis lost it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import msgspec

from service.core.judges.llm import NO_PROVIDER_CONFIGURED, CallGuard, load_panel, panel_too_small, select_judges
from service.platform.settings import Settings
from service.review.adjudication import (
    ADJUDICATION_PROMPT_HASH,
    ADJUDICATION_PROMPT_VERSION,
    PANEL_SIZE,
    run_panel,
)
from service.state.durable import Adjudication, DuplicateRecord, DurableStore
from service.state.durable.packing import pack, unpack

__all__ = [
    "KIND",
    "NO_PROVIDER_REASON",
    "adjudicate_pending",
    "new_adjudication",
    "pending_adjudication",
    "plan_adjudication",
    "queue_adjudication",
    "store_adjudication",
    "store_once",
]

NO_PROVIDER_REASON = NO_PROVIDER_CONFIGURED


KIND = "adjudication"  # its kind among the judge jobs' rows


def job_id_of(adjudication_id: str) -> str:
    """The ``adjudicate`` job's fixed id (the API's and the reconciler's)."""
    return f"adj:{adjudication_id}"


def new_adjudication(
    tenant: str,
    *,
    source: str,
    candidate: str,
    reference: str,
    source_lang: str,
    candidate_model: str | None,
    item_id: str | None,
    panel: str,
    snapshot: dict[str, Any] | None,
) -> Adjudication:
    """A pending record with a fresh id (what the API queues)."""
    return Adjudication(
        id=uuid.uuid4().hex,
        tenant=tenant,
        created_at=time.time(),
        status="pending",
        label=None,
        reason=None,
        source=source,
        candidate=candidate,
        reference=reference,
        source_lang=source_lang,
        candidate_model=candidate_model,
        item_id=item_id,
        panel=panel,
        panel_version=None,
        prompt_version=ADJUDICATION_PROMPT_VERSION,
        prompt_hash=ADJUDICATION_PROMPT_HASH,
        judges=[],
        votes={},
        snapshot=snapshot,
    )


def plan_adjudication(pending: Adjudication, settings: Settings) -> Adjudication | None:
    """The record to store at once when the panel cannot run (skipped, with the reason); None when it can. Whether
    a provider is there is the worker's to decide (``adjudicate_pending``), not the API's."""
    panel = load_panel(pending.panel or settings.llm.panel, panels_dir=settings.risk.panels_dir)
    judges = select_judges(panel, pending.candidate_model).judges[:PANEL_SIZE]
    if len(judges) < PANEL_SIZE:
        return msgspec.structs.replace(
            pending,
            status="skipped",
            panel_version=panel.version,
            reason=panel_too_small(panel.name, len(judges), PANEL_SIZE),
        )
    return None


def store_once(db: DurableStore, record: Adjudication) -> Adjudication:
    """Append the record; a second delivery of the same job finds it stored and keeps the first."""
    try:
        return db.add_adjudication(record)
    except DuplicateRecord:
        stored = db.adjudication(record.tenant, record.id)
        return stored if stored is not None else record


async def adjudicate_pending(
    client: Any, pending: Adjudication, settings: Settings, guard: CallGuard | None = None
) -> Adjudication:
    """The record of a pending adjudication: its panel's votes and label (``client``: the LLM client charged to the
    tenant; None without a provider, then skipped with the reason), every call bounded by the ``guard``'s deadline
    (a judge past it reads timed_out)."""
    record = plan_adjudication(pending, settings)
    if record is not None:
        return record
    if client is None:
        return msgspec.structs.replace(pending, status="skipped", reason=NO_PROVIDER_REASON)
    panel = load_panel(pending.panel or settings.llm.panel, panels_dir=settings.risk.panels_dir)
    judges = select_judges(panel, pending.candidate_model).judges[:PANEL_SIZE]
    votes, label, counts = await run_panel(
        client,
        judges,
        settings.llm,
        source=pending.source,
        reference=pending.reference,
        candidate=pending.candidate,
        guard=guard,
    )
    return msgspec.structs.replace(
        pending,
        status="done" if label is not None else "inconclusive",
        label=label,
        reason=None
        if label is not None
        else (
            f"{PANEL_SIZE - counts['valid_answers']} judge(s) gave no valid answer and their votes could "
            "change the label"
        ),
        panel_version=panel.version,
        judges=[msgspec.to_builtins(v) for v in votes],
        votes=counts,
    )


async def store_adjudication(store: Any, record: Adjudication) -> Adjudication:
    """Store the record once (``store``: a ``service.state.store.Store``) and close its pending row."""
    stored = await asyncio.to_thread(store_once, store.db, record)
    done = {"todo": 0, "result": pack(record.status)}
    await asyncio.to_thread(store.records.update_judge_job, record.tenant, KIND, record.id, done)
    return stored


async def queue_adjudication(store: Any, jobs: Any, pending: Adjudication) -> None:
    """The API's side: keep the pending record where the worker and GET can read it (``store``: the API's
    ``service.state.store.Store``), then queue the job (``jobs.enqueue(function, *args, job_id=...)``)."""
    row = {"tenant": pending.tenant, "kind": KIND, "id": pending.id, "created_at": pending.created_at}
    await asyncio.to_thread(store.records.create_judge_job, {**row, "plan": pack(pending)})
    await jobs.enqueue("adjudicate", pending.tenant, pending.id, job_id=job_id_of(pending.id))


async def pending_adjudication(store: Any, tenant: str, adjudication_id: str) -> Adjudication | None:
    """The pending record while its panel has not been stored (None once it is, or when there is none); one whose
    job failed (like any judge job's: its last try, a lost worker, its job timeout) reads failed with the reason."""
    row = await asyncio.to_thread(store.records.get_judge_job, tenant, KIND, adjudication_id)
    if row is None or row.result is not None:
        return None
    found: Adjudication = unpack(row.plan, Adjudication)
    if row.failed is not None:
        return msgspec.structs.replace(found, status="failed", reason=row.failed)
    return found
