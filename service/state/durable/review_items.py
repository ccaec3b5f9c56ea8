"""The review queue's rows (``review_items``): enqueue, list, claim, renew, release, verdicts and forgetting, the same
on SQLite and PostgreSQL. ``service.review.queue`` is the async interface over these functions.

Leases are columns of the item rows (``lease_id``, ``lease_reviewer``, ``lease_created``, ``lease_expires``), not
Redis over durable items, because a lease and what it guards must change together: a claim picks the best open
items and marks them taken in one step, and a verdict checks the lease it cites and counts itself on the item in the
same transaction as the verdict row. Two stores could disagree (a Redis that lost its data would forget every lease
while the items and verdicts stay; a write lost between the two would leave an item leased after its verdict). On
PostgreSQL a claim is the standard work queue, ``SELECT ... ORDER BY priority DESC LIMIT n FOR UPDATE SKIP LOCKED``
then an UPDATE in the same transaction: concurrent claimants take disjoint items without waiting for each other; on
SQLite the write transaction (BEGIN IMMEDIATE) serialises claims. Renewals, releases and verdicts lock the rows they
change (``FOR UPDATE``; SQLite's write transaction) before they check the lease. Claims, renewals and releases commit
without waiting for PostgreSQL's WAL flush (``engine.unflushed_commit``: the flush was most of a claim's time): a
crash may lose the last fraction of a second of them, which reads as leases that expired (or ended later), the state
a reviewer already handles; verdicts wait for the flush.

Expiry needs no sweeper: a lease is live while ``lease_expires > now``; an item whose lease ended is claimable again.
Times are the writing process's clock (``time.time()``, hosts keep NTP time): a skew between hosts moves an expiry by
the skew, it never lets two claims win (the row locks decide that). An item lives as long as its assessment
(``expires_at``: the assessment's creation plus TRISK_RETENTION_SECONDS; an item past it is never listed, claimed or
reviewed) and is deleted with it (``delete_items_of``, in the transaction that deletes it by the purge or by deletion).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from service.core.typology import ErrorSpan, FindingJudgement
from service.platform.errors import Conflict, Forbidden, NotFound
from service.state.durable.engine import unflushed_commit
from service.state.durable.records import Label, Verdict
from service.state.durable.schema import review_items, verdicts
from service.state.durable.store import DurableStore, insert_verdict, read_verdicts

__all__ = [
    "COUNTED",
    "FILTER_COLUMNS",
    "ItemPage",
    "ItemRow",
    "ItemStatus",
    "LeaseRow",
    "add_items",
    "claim",
    "claim_query",
    "count_verdicts",
    "forget_items",
    "item_row",
    "list_items",
    "list_queries",
    "record_verdict",
    "release",
    "renew",
]

ItemStatus = Literal["open", "leased", "reviewed"]
# the item attributes a listing or a claim may be narrowed to (equality), by column name
FILTER_COLUMNS = ("tier", "lang", "model", "batch_id", "lease_reviewer")
# columns a refresh (the final result replacing the cheap tier's) rewrites: never the time it joined, its lease or
# its verdicts
_REFRESHED = ("expires_at", "priority", "flagged", "forced", "tier", "lang", "model", "batch_id", "body")
# a listing counts the items that match up to this many past its offset (the API's total_exact says whether it
# stopped there): enough for a reviewer's sense of the queue, bounded whatever the queue's size
COUNTED = 1_000
_CHUNK = 500  # ids per statement when forgetting many assessments' items
c = review_items.c


class ItemRow(msgspec.Struct, frozen=True):
    """An item's stored body and where it stands: ``lease_id``, its holder and its end only while it is leased
    (status ``leased``)."""

    id: str
    body: str
    enqueued_at: float
    status: ItemStatus
    verdicts: int
    lease_id: str | None
    leased_to: str | None = None
    lease_expires: float | None = None


class LeaseRow(msgspec.Struct, frozen=True):
    id: str
    tenant: str
    reviewer: str
    items: list[str]
    expires_at: float
    created_at: float


# written as a literal, not a bound parameter, so both engines' planners match the partial index review_items_unreviewed
_UNREVIEWED = c.verdicts == sa.literal_column("0")


def _live(now: float) -> Any:
    """The item's assessment has not expired."""
    return sa.or_(c.expires_at.is_(None), c.expires_at > now)


def _leased(now: float) -> Any:
    return sa.and_(c.lease_id.is_not(None), c.lease_expires > now)


def _status(row: Any, now: float) -> tuple[ItemStatus, str | None]:
    """A verdict makes an item reviewed for good (a lease still on it is finished work); else leased while a lease is
    live, else open."""
    if row.verdicts > 0:
        return "reviewed", None
    if row.lease_id is not None and row.lease_expires > now:
        return "leased", row.lease_id
    return "open", None


def _item_of(row: Any, now: float) -> ItemRow:
    status, lease = _status(row, now)
    holder, ends = (row.lease_reviewer, float(row.lease_expires)) if lease is not None else (None, None)
    return ItemRow(row.id, row.body, float(row.enqueued_at), status, int(row.verdicts), lease, holder, ends)


_ROW = (c.id, c.body, c.enqueued_at, c.verdicts, c.lease_id, c.lease_reviewer, c.lease_expires)


def _narrowed(query: Any, filters: dict[str, str], flagged_only: bool) -> Any:
    for name, value in filters.items():
        if name not in FILTER_COLUMNS:
            raise ValueError(f"not a filter of the review queue: {name!r}")
        query = query.where(c[name] == value)
    return query.where(c.flagged.is_(True)) if flagged_only else query


def add_items(store: DurableStore, tenant: str, rows: list[dict[str, Any]], *, refresh: bool) -> int:
    """Insert items (column values without ``tenant``); an item already stored keeps its state (idempotent re-runs)
    and, with ``refresh``, takes the new priority, attributes and body. Returns how many were new."""
    insert = pg_insert if store.dialect == "postgresql" else sqlite_insert
    added = 0
    with store._insert() as con:
        for row in rows:
            stmt = (
                insert(review_items)
                .values(tenant=tenant, **row)
                .on_conflict_do_nothing(index_elements=["tenant", "id"])
            )
            if con.execute(stmt).rowcount == 1:
                added += 1
            elif refresh:
                con.execute(
                    review_items.update()
                    .where(c.tenant == tenant, c.id == row["id"])
                    .values({k: row[k] for k in _REFRESHED})
                )
    return added


def count_verdicts(store: DurableStore, tenant: str, item_ids: list[str]) -> None:
    """Set these items' verdict counts from the verdicts table (items rebuilt from their assessments, e.g. by
    ``trisk migrate-redis``, then read ``reviewed`` where a verdict exists). Safe to repeat."""
    v = verdicts.c
    counted = sa.select(sa.func.count()).where(v.tenant == c.tenant, v.item_id == c.id).scalar_subquery()
    with store._insert() as con:
        for start in range(0, len(item_ids), _CHUNK):
            chunk = item_ids[start : start + _CHUNK]
            con.execute(review_items.update().where(c.tenant == tenant, c.id.in_(chunk)).values(verdicts=counted))


def item_row(store: DurableStore, tenant: str, item_id: str, now: float) -> ItemRow:
    with store._read() as con:
        row = con.execute(sa.select(*_ROW).where(c.tenant == tenant, c.id == item_id, _live(now))).first()
    if row is None:
        raise NotFound(f"no review item {item_id!r}")
    return _item_of(row, now)


class ItemPage(msgspec.Struct, frozen=True):
    """One page of a listing: ``total`` counts the matching items up to ``offset + COUNTED`` (``exact`` False when
    there are more); ``more`` says whether an item follows the page."""

    items: list[ItemRow]
    total: int
    exact: bool
    more: bool


def list_queries(
    tenant: str, *, filters: dict[str, str], flagged_only: bool, status: str, offset: int, limit: int, now: float
) -> tuple[Any, Any]:
    """A listing's two statements (bench/bench_review_queue.py prints their plans): the page, one row longer to tell
    whether another follows, and the count of matching items up to ``offset + COUNTED`` (one more says "more")."""
    where = [c.tenant == tenant, _live(now)]
    if status == "reviewed":
        where.append(c.verdicts > 0)
    elif status == "pending":
        where.append(_UNREVIEWED)
    elif status == "leased":
        where += [_UNREVIEWED, _leased(now)]
    elif status == "open":
        where += [_UNREVIEWED, sa.not_(_leased(now))]
    elif status != "any":
        raise ValueError(f"not a status of the review queue: {status!r}")
    page = _narrowed(sa.select(*_ROW).where(*where), filters, flagged_only)
    page = page.order_by(c.priority.desc(), c.id.desc()).offset(offset).limit(limit + 1)
    matching = _narrowed(sa.select(sa.literal_column("1")).where(*where), filters, flagged_only)
    count = sa.select(sa.func.count()).select_from(matching.limit(offset + COUNTED + 1).subquery())
    return page, count


def list_items(
    store: DurableStore,
    tenant: str,
    *,
    filters: dict[str, str],
    flagged_only: bool,
    status: str,
    offset: int,
    limit: int,
    now: float,
) -> ItemPage:
    """One page in the queue's order (priority, highest first) and how many items match, counted up to
    ``offset + COUNTED``: an exact count walks every matching row, which at a million items took over a second per
    page (bench/bench_review_queue.py), while a bounded one costs at most what the next pages would."""
    page, count = list_queries(
        tenant, filters=filters, flagged_only=flagged_only, status=status, offset=offset, limit=limit, now=now
    )
    with store._read() as con:
        rows = con.execute(page).all()
        counted = int(con.execute(count).scalar_one())
    bound = offset + COUNTED
    return ItemPage([_item_of(r, now) for r in rows[:limit]], min(counted, bound), counted <= bound, len(rows) > limit)


def claim_query(tenant: str, n: int, *, filters: dict[str, str], flagged_only: bool, now: float) -> Any:
    """The ids a claim takes, locked (bench/bench_review_queue.py prints its plan): the open items' top ``n``."""
    query = sa.select(c.id).where(c.tenant == tenant, _UNREVIEWED, sa.not_(_leased(now)), _live(now))
    query = _narrowed(query, filters, flagged_only).order_by(c.priority.desc(), c.id.desc()).limit(n)
    return query.with_for_update(skip_locked=True)


def claim(
    store: DurableStore,
    tenant: str,
    reviewer: str,
    n: int,
    lease_seconds: float,
    *,
    filters: dict[str, str],
    flagged_only: bool,
    lease_id: str,
    now: float,
) -> LeaseRow:
    """Lease up to ``n`` open items (never reviewed, no live lease) in the queue's order: SKIP LOCKED on PostgreSQL
    (another claim's rows are passed over, not waited for), the write transaction on SQLite."""
    expires = now + lease_seconds
    with store._insert() as con:
        unflushed_commit(con)  # a lease a crash loses is one that expired: its items are claimable again
        ids = list(con.execute(claim_query(tenant, n, filters=filters, flagged_only=flagged_only, now=now)).scalars())
        if ids:
            con.execute(
                review_items.update()
                .where(c.tenant == tenant, c.id.in_(ids))
                .values(lease_id=lease_id, lease_reviewer=reviewer, lease_created=now, lease_expires=expires)
            )
    return LeaseRow(lease_id, tenant, reviewer, ids, expires, now)


def _held(con: Connection, tenant: str, lease_id: str, reviewer: str, admin: bool, now: float) -> list[Any]:
    """The rows a live lease of this tenant holds, locked; NotFound when there are none, Forbidden when the lease is
    another reviewer's and the caller is not an admin."""
    rows = con.execute(
        sa.select(c.id, c.verdicts, c.lease_reviewer, c.lease_created)
        .where(c.tenant == tenant, c.lease_id == lease_id, c.lease_expires > now)
        .order_by(c.priority.desc(), c.id.desc())
        .with_for_update()
    ).all()
    if not rows:
        raise NotFound(f"no active lease {lease_id!r}: it expired (its items went back to the queue) or was released")
    if rows[0].lease_reviewer != reviewer and not admin:
        raise Forbidden(f"lease {lease_id!r} belongs to another reviewer: only its holder or an admin key may end it")
    return list(rows)


def renew(
    store: DurableStore, tenant: str, lease_id: str, reviewer: str, *, admin: bool, lease_seconds: float, now: float
) -> LeaseRow:
    """Extend a live lease over its unreviewed items (its holder, or an admin key: the lease keeps its reviewer)."""
    expires = now + lease_seconds
    with store._insert() as con:
        unflushed_commit(con)  # a renewal a crash loses leaves the lease to end at its earlier time
        rows = _held(con, tenant, lease_id, reviewer, admin, now)
        held = [r.id for r in rows if r.verdicts == 0]
        if not held:
            raise Conflict(f"lease {lease_id!r} holds no items any more (each has a verdict)")
        con.execute(review_items.update().where(c.tenant == tenant, c.id.in_(held)).values(lease_expires=expires))
    return LeaseRow(lease_id, tenant, rows[0].lease_reviewer, held, expires, float(rows[0].lease_created))


def release(store: DurableStore, tenant: str, lease_id: str, reviewer: str, *, admin: bool, now: float) -> int:
    """End a live lease (its holder, or an admin key); returns how many unreviewed items went back to the queue."""
    with store._insert() as con:
        unflushed_commit(con)  # a release a crash loses leaves the lease to expire
        rows = _held(con, tenant, lease_id, reviewer, admin, now)
        con.execute(
            review_items.update()
            .where(c.tenant == tenant, c.id.in_([r.id for r in rows]))
            .values(lease_id=None, lease_reviewer=None, lease_created=None, lease_expires=None)
        )
    return sum(1 for r in rows if r.verdicts == 0)


def _same_request(v: Verdict, asked: Verdict) -> bool:
    said = (v.reviewer, v.label, v.error_category, v.note, v.findings, v.spans)
    return said == (asked.reviewer, asked.label, asked.error_category, asked.note, asked.findings, asked.spans)


def record_verdict(
    store: DurableStore,
    tenant: str,
    item_id: str,
    *,
    reviewer: str,
    label: Label,
    error_category: str | None,
    note: str | None,
    lease_id: str | None,
    request_key: str | None,
    snapshot: Any,
    now: float,
    findings: tuple[FindingJudgement, ...] = (),
    spans: tuple[ErrorSpan, ...] = (),
    active_seconds: float | None = None,
    replaces: int | None = None,
    replace_seconds: float = 0.0,
) -> tuple[Verdict, bool]:
    """Append a verdict and count it on the item, in one transaction with the item's row locked; returns the verdict
    and whether it was stored already (a retry). The rules, in order:

    - a retry returns the verdict it repeats: the same Idempotency-Key (``request_key``), or the same lease (a lease
      gives one verdict per item); the same key or lease with another verdict is a Conflict;
    - a cited lease must be the item's live lease in this tenant (Conflict: bogus, expired, released, another
      tenant's) and the caller's (Forbidden: another reviewer's);
    - an unreviewed item under a live lease takes a verdict only with that lease (Conflict);
    - otherwise (open, or reviewed: a further opinion) no lease is needed;
    - a reviewer gives one verdict per item: a second one (Conflict) only ``replaces`` her own last verdict on it,
      within ``replace_seconds`` of giving it; the new one supersedes it and both are kept.

    ``snapshot(item_body)`` gives the snapshot the verdict copies from the item's stored body (and raises when the
    verdict does not fit the item: a judgement of a finding it does not have)."""
    # what was asked, to tell a retry from another verdict; the item's ids and snapshot are filled in below
    asked = Verdict(0, tenant, item_id, "", "", reviewer, label, error_category, note, lease_id, now, {})
    asked = msgspec.structs.replace(
        asked, findings=findings, spans=spans, active_seconds=active_seconds, supersedes=replaces
    )
    with store._insert() as con:
        item = con.execute(
            sa.select(
                c.assessment_id,
                c.candidate_id,
                c.body,
                c.verdicts,
                c.lease_id,
                c.lease_reviewer,
                c.lease_created,
                c.lease_expires,
            )
            .where(c.tenant == tenant, c.id == item_id, _live(now))
            .with_for_update()
        ).first()
        if item is None:
            raise NotFound(f"no review item {item_id!r}")
        earlier = read_verdicts(con, tenant, item_id)
        for v, key in earlier:
            repeats = (request_key is not None and key == request_key) or (
                lease_id is not None and v.lease_id == lease_id and v.reviewer == reviewer
            )
            if not repeats:
                continue
            if _same_request(v, asked) and v.lease_id == lease_id and v.supersedes == replaces:
                return v, True
            what = "Idempotency-Key" if request_key is not None and key == request_key else f"lease {lease_id!r}"
            raise Conflict(
                f"{what} already recorded verdict {v.id} on item {item_id!r} with another body; post a further "
                "opinion without it",
                extra={"verdict_id": v.id},
            )
        _one_verdict_each(
            [v for v, _ in earlier], item_id, reviewer, replaces=replaces, replace_seconds=replace_seconds, now=now
        )
        live_lease = item.lease_id is not None and item.lease_expires > now
        if lease_id is not None:
            if not live_lease or item.lease_id != lease_id:
                raise Conflict(
                    f"lease {lease_id!r} does not hold item {item_id!r} (unknown here, expired or released): "
                    "claim the item again"
                )
            if item.lease_reviewer != reviewer:
                raise Forbidden(f"lease {lease_id!r} belongs to another reviewer")
        elif live_lease and item.verdicts == 0:
            whose = "you" if item.lease_reviewer == reviewer else "another reviewer"
            raise Conflict(
                f"item {item_id!r} is leased to {whose} until {item.lease_expires:.0f}: a verdict on it cites its "
                "lease_id",
                extra={"leased_until": float(item.lease_expires)},
            )
        verdict = insert_verdict(
            con,
            msgspec.structs.replace(
                asked,
                assessment_id=item.assessment_id,
                candidate_id=item.candidate_id,
                snapshot=snapshot(item.body),
                # a cited lease is the item's live one (checked above): the time since it was taken
                lease_seconds=None if lease_id is None else max(0.0, now - float(item.lease_created)),
            ),
            request_key,
        )
        con.execute(review_items.update().where(c.tenant == tenant, c.id == item_id).values(verdicts=c.verdicts + 1))
    return verdict, False


def _one_verdict_each(
    earlier: list[Verdict], item_id: str, reviewer: str, *, replaces: int | None, replace_seconds: float, now: float
) -> None:
    """A reviewer's verdicts on an item: one in force; a new one only replaces her last, within the window."""
    replaced = {v.supersedes for v in earlier if v.supersedes is not None}
    mine = [v for v in earlier if v.reviewer == reviewer and v.id not in replaced]
    if replaces is None:
        if mine:
            raise Conflict(
                f"you gave verdict {mine[-1].id} on item {item_id!r} already: a second opinion is another reviewer's; "
                f"replace yours (replaces={mine[-1].id}) within {replace_seconds:.0f} s of giving it",
                extra={"verdict_id": mine[-1].id},
            )
        return
    if not mine or mine[-1].id != replaces:
        raise Conflict(
            f"verdict {replaces} is not your verdict in force on item {item_id!r}: only that one is replaced"
        )
    if now - mine[-1].created_at > replace_seconds:
        raise Conflict(
            f"verdict {replaces} was given {now - mine[-1].created_at:.0f} s ago: it can be replaced for "
            f"{replace_seconds:.0f} s (TRISK_REVIEW_REPLACE_SECONDS)"
        )


def delete_items_of(con: Connection, tenant: str, assessment_ids: list[str]) -> int:
    """Delete, in the caller's transaction, the review items of these assessments of ``tenant`` (verdicts are not
    touched): the one deletion the purge, ``DELETE /v1/assessments`` and ``forget_items`` share."""
    removed = 0
    ids = list(dict.fromkeys(assessment_ids))
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        removed += con.execute(review_items.delete().where(c.tenant == tenant, c.assessment_id.in_(chunk))).rowcount
    return removed


def forget_items(store: DurableStore, tenant: str, assessment_ids: list[str]) -> int:
    """Delete the review items of these assessments of ``tenant`` in a transaction of their own; returns how many
    rows went. Safe to repeat. (Deleting an assessment removes its items in the same transaction.)"""
    with store._insert() as con:
        return delete_items_of(con, tenant, assessment_ids)
