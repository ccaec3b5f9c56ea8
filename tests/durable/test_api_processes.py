"""Several real API processes (``trisk serve``) write verdicts into one database at once, on PostgreSQL and on one
SQLite file: none is lost, none is numbered twice. Each process also migrates the empty database as it starts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from service.platform.settings import DurableSettings
from service.state.durable import DurableStore, database_url, make_engine
from service.state.durable.access import issue_key
from tests.durable_support import migrated_store
from tests.review.support import iid, write_assessment
from tests.support.evaluation import free_port
from tests.support.redis_server import private_redis_server

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(30)

SERVERS = 3
THREADS_PER_SERVER = 3
VERDICTS_PER_THREAD = 30
ITEMS = 30  # every writer posts to the items in the same order: opinion numbers are contended too
TENANT = "test-processes"  # the tenant of the key the threads post with
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this module, so the servers' queue and items meet nobody's data."""
    with private_redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@dataclass
class Servers:
    urls: list[str]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def start_servers(settings: DurableSettings, redis_url: str, folder: Path) -> Servers:
    env = {k: v for k, v in os.environ.items() if k not in ("TRISK_DATABASE_URL", "TRISK_DB_PATH")}
    env.update(
        REDIS_URL=redis_url,
        TRISK_QUEUE_NAME=f"trisk:test:{uuid.uuid4().hex[:8]}:queue",
        TRISK_INDEX_PATH=str(folder / "no-index.trisk"),  # novelty is not what this measures: start fast without it
        TRISK_DB_PATH=settings.db_path or str(folder / "unused.db"),
        TRISK_DATABASE_URL=settings.database_url,
        TRISK_RATE_PER_KEY="0",  # this measures concurrent writes, not the rate limit
        TRISK_RATE_PER_TENANT="0",
    )
    ports = [free_port() for _ in range(SERVERS)]
    servers = Servers(urls=[f"http://127.0.0.1:{p}" for p in ports])
    trisk = str(Path(sys.executable).parent / "trisk")
    for port in ports:
        log = (folder / f"api-{port}.log").open("w")
        servers.procs.append(
            subprocess.Popen(
                [trisk, "serve", "--port", str(port)],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + 180
    for url, proc in zip(servers.urls, servers.procs, strict=True):
        while True:
            if proc.poll() is not None:
                servers.stop()
                logs = "\n".join(p.read_text()[-3000:] for p in folder.glob("api-*.log"))
                pytest.fail(f"an API process exited at start:\n{logs}")
            try:
                if httpx.get(f"{url}/health/live", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the API processes did not come up"
            time.sleep(0.2)
    return servers


def seed_items(redis_url: str, db: DurableStore) -> list[str]:
    async def go() -> list[str]:
        r = Redis.from_url(redis_url)
        try:
            ids = []
            for k in range(ITEMS // 2):
                cands = [{"id": c, "pct": 50.0, "signals": {"s": 1.0}} for c in ("a", "b")]
                state = await write_assessment(r, TENANT, cands, ref=f"sn{k}.1:1", db=db)
                ids += [iid(state, "a"), iid(state, "b")]
            return ids
        finally:
            await r.aclose()

    return asyncio.run(go())


def test_verdicts_posted_to_several_api_processes_at_once_are_all_kept(
    fresh_settings: DurableSettings, private_redis: str, tmp_path: Path
) -> None:
    with migrated_store(fresh_settings) as store:
        items = seed_items(private_redis, store)
        # one reviewer a thread: a reviewer gives one verdict an item (a second is a 409), so contention on an item
        # comes from the nine reviewers posting to it at once
        tokens = [issue_key(store, TENANT, f"writer {n}", ["review"])[0] for n in range(SERVERS * THREADS_PER_SERVER)]
    servers = start_servers(fresh_settings, private_redis, tmp_path)
    answers: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(SERVERS * THREADS_PER_SERVER)

    def post_from(url: str, thread: int) -> None:
        headers = {"Authorization": f"Bearer {tokens[thread]}"}
        with httpx.Client(base_url=url, timeout=60, headers=headers) as client:
            barrier.wait()
            for item in items[:VERDICTS_PER_THREAD]:
                r = client.post(f"/v1/review/items/{item}/verdict", json={"label": "MAJOR"})
                with lock:
                    answers.append((r.status_code, r.json()))

    threads = [
        threading.Thread(target=post_from, args=(url, s * THREADS_PER_SERVER + t))
        for s, url in enumerate(servers.urls)
        for t in range(THREADS_PER_SERVER)
    ]
    t0 = time.perf_counter()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        servers.stop()
    seconds = time.perf_counter() - t0
    posted = SERVERS * THREADS_PER_SERVER * VERDICTS_PER_THREAD
    assert [status for status, _ in answers] == [201] * posted, [body for status, body in answers if status != 201][:3]
    print(f"{posted} verdicts through {SERVERS} API processes in {seconds:.1f}s ({fresh_settings})")

    # every verdict answered 201 is in the database, once, and the opinion numbers per item run 1..n
    engine = make_engine(database_url(fresh_settings))
    try:
        with engine.connect() as con:
            rows = con.execute(sa.text("SELECT id, item_id FROM verdicts WHERE tenant = :t"), {"t": TENANT}).all()
    finally:
        engine.dispose()
    assert len(rows) == posted
    assert sorted(r.id for r in rows) == sorted(int(body["id"]) for _, body in answers)
    opinions: dict[str, list[int]] = defaultdict(list)
    for _, body in answers:
        opinions[body["item_id"]].append(body["opinion"])
    assert {item: sorted(ns) for item, ns in opinions.items()} == {
        item: list(range(1, len(ns) + 1)) for item, ns in opinions.items()
    }
