"""Review queue latency at scale: list and claim p50/p99 under concurrent clients, on generated review_items rows.

    .venv/bin/python bench/bench_review_queue.py --engine postgresql --rows 200000 --tenants 20 --clients 16

PostgreSQL: a database of its own on the local server (``TRISK_TEST_POSTGRES_URL`` or postgres@127.0.0.1:5432),
dropped at the end; SQLite: a file in a temporary folder. Every row carries a realistic item body (one candidate's
snapshot); a third of the items are flagged. Each client lists the first page of a random tenant's flagged items and
claims (then releases) 5 of them, as a reviewer's workbench does.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.core.types import SignalValue
from service.platform.settings import DurableSettings
from service.review.queue import ItemSnapshot, QueueItem
from service.state.durable import DurableStore, database_url, make_engine, upgrade
from service.state.durable import review_items as rows
from service.state.durable.schema import review_items
from tests.support.evaluation import throwaway_postgres

ADMIN = os.environ.get("TRISK_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"


def body() -> str:
    import msgspec

    signals = {f"signal_{k}": SignalValue(value=random.random(), detail={"n": k}) for k in range(12)}
    snap = ItemSnapshot(signals, [], {"ja": 80.0, "jb": 65.0}, None, None, None, ["minilm-risk@2.0.0"])
    item = QueueItem("x", "t", "a", "c", 0.0, 0.5, True, False, "top_20", 85.0, "pli", "m", None, "mn1:1", snap)
    return msgspec.json.encode(item).decode()


def fill(store: DurableStore, n: int, tenants: int, reviewed: float) -> float:
    text = body()
    t0 = time.perf_counter()
    chunk = []
    with store.engine.begin() as con:
        for i in range(n):
            priority = random.random() * (4 if i % 50 == 0 else 1)
            chunk.append(
                {
                    "tenant": f"t{i % tenants}",
                    "id": f"{i:012d}-abcdef012345",
                    "assessment_id": f"{i // 10:012d}",
                    "candidate_id": f"c{i % 10}",
                    "enqueued_at": time.time(),
                    "expires_at": time.time() + 86400,
                    "priority": priority,
                    "flagged": i % 3 == 0,
                    "forced": i % 50 == 0,
                    "tier": random.choice(["top_1", "top_5", "top_20", "rest"]),
                    "lang": "pli",
                    "model": f"m{i % 4}",
                    "batch_id": None,
                    "body": text,
                    # reviewers work from the top: the riskiest share already has its verdict
                    "verdicts": int(priority >= 1 - reviewed),
                }
            )
            if len(chunk) == 5000:
                con.execute(review_items.insert(), chunk)
                chunk = []
        if chunk:
            con.execute(review_items.insert(), chunk)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as con:
        con.exec_driver_sql("ANALYZE review_items")
    return time.perf_counter() - t0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] * 1000


def run(store: DurableStore, tenants: int, clients: int, requests: int) -> None:
    listed: list[float] = []
    claimed: list[float] = []
    won: list[int] = []

    def one(k: int) -> None:
        tenant = f"t{random.randrange(tenants)}"
        t0 = time.perf_counter()
        rows.list_items(
            store, tenant, filters={}, flagged_only=True, status="pending", offset=0, limit=50, now=time.time()
        )
        t1 = time.perf_counter()
        lease = rows.claim(
            store,
            tenant,
            f"r{k}",
            5,
            60,
            filters={},
            flagged_only=True,
            lease_id=uuid.uuid4().hex,
            now=time.time(),
        )
        t2 = time.perf_counter()
        listed.append(t1 - t0)
        claimed.append(t2 - t1)
        won.append(len(lease.items))
        rows.release(store, tenant, lease.id, f"r{k}", admin=False, now=time.time())

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(requests)))
    print(f"  list (first page of 50 flagged, pending): p50 {pct(listed, 50):.1f} ms, p99 {pct(listed, 99):.1f} ms")
    mean_won = statistics.mean(won)
    print(f"  claim of 5: p50 {pct(claimed, 50):.1f} ms, p99 {pct(claimed, 99):.1f} ms ({mean_won:.1f} items won)")


def explain(engine: sa.Engine, dialect: str) -> None:
    """The plans of the statements the bench times, as the code builds them (tenant t3, the bench's filters; SQLite
    compiles no FOR UPDATE: its write transaction serialises claims)."""
    now = time.time()
    page, count = rows.list_queries("t3", filters={}, flagged_only=True, status="pending", offset=0, limit=50, now=now)
    claim = rows.claim_query("t3", 5, filters={}, flagged_only=True, now=now)
    head = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
    with engine.connect() as con:
        for name, stmt in (("list page", page), ("list count", count), ("claim", claim)):
            sql = str(stmt.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
            plan = [str(r[-1]) for r in con.exec_driver_sql(head + sql)]
            print(f"  {name} plan:\n    " + "\n    ".join(plan))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["sqlite", "postgresql"], default="postgresql")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--tenants", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--reviewed", type=float, default=0.5, help="share of items with a verdict (the riskiest)")
    ap.add_argument("--explain", action="store_true", help="print PostgreSQL's plan of the claim query")
    args = ap.parse_args()
    random.seed(7)
    scope = ExitStack()  # the PostgreSQL database of the run, dropped when the run ends
    folder = tempfile.mkdtemp(prefix="trisk-bench-")
    if args.engine == "postgresql":
        url = scope.enter_context(throwaway_postgres(ADMIN))
        settings = DurableSettings(db_path="", database_url=url.render_as_string(hide_password=False))
    else:
        settings = DurableSettings(db_path=str(Path(folder) / "trisk.db"), database_url="")
    engine = make_engine(database_url(settings))
    try:
        upgrade(engine)
        store = DurableStore(engine)
        seconds = fill(store, args.rows, args.tenants, args.reviewed)
        print(
            f"{args.engine}: {args.rows:,} items across {args.tenants} tenants ({args.reviewed:.0%} of them reviewed, "
            f"the riskiest), written in {seconds:.1f}s"
        )
        if args.engine == "postgresql":
            with engine.connect() as con:
                size = con.execute(sa.text("SELECT pg_total_relation_size('review_items')")).scalar_one()
            print(f"  review_items with its indexes: {size / args.rows:.0f} bytes per item")
        if args.explain:
            explain(engine, args.engine)
        print(f"  {args.clients} clients, {args.requests} list+claim+release rounds:")
        run(store, args.tenants, args.clients, args.requests)
    finally:
        engine.dispose()
        scope.close()


if __name__ == "__main__":
    main()
