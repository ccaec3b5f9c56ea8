"""GET /v1/assessments/{id} against a large durable store on PostgreSQL: p50/p99 under concurrent clients as the
stored rows grow, and the store's bytes per assessment.

A private stack (tests.support.evaluation.Stack: the API and a worker as subprocesses, a private redis-server, a
PostgreSQL database made for the run on the local server and dropped after) takes ``--real`` PaliBench dev passages
of 10 candidates through the real path (cheap tier); their rows are then copied server-side (INSERT ... SELECT,
new ids, ``--tenants`` tenants, the bench's own among them) up to each size of ``--sizes``; at each size
``--clients`` concurrent clients GET random ids of the bench's tenant for ``--seconds``.

    .venv/bin/python bench/bench_store_scale.py [--sizes 10000,100000,1000000] [--clients 16] [--seconds 20]
        [--profile api-profile.txt]

``--profile`` samples the API process with py-spy (the dev extra) during the first size's GETs and writes its
collapsed stacks there (as ``bench/bench_assessments.py --profile`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_assessments import _cpu_seconds, py_spy  # noqa: E402
from bench_load import _wait_done  # noqa: E402
from bench_store_size import store_bytes  # noqa: E402

from service.platform.settings import SHARED_DIR  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, request_item, throwaway_postgres, wait_ready  # noqa: E402

TENANT = "evaluation"  # the tenant of the key Stack issues
COLUMNS = (
    "batch_id, created_at, todo, candidates, meta, cheap, provisional, llm, final, started_at, llm_started_at, failed, "
    "tail_done_at, tail_error, pooled_at, callback, callback_status, callback_cheap, callback_cheap_status"
)


def grow(engine: sa.Engine, upto: int, tenants: int, chunk: int = 20_000) -> None:
    """Copy the real rows (the bench tenant's first ones) until the table holds ``upto`` rows; one in ``tenants``
    copies is the bench tenant's, the others spread over tenants of their own."""
    with engine.connect() as con:
        have = int(con.execute(sa.text("SELECT count(*) FROM assessments")).scalar_one())
        real = int(con.execute(sa.text("SELECT count(*) FROM assessments WHERE id NOT LIKE 'copy-%'")).scalar_one())
    while have < upto:
        n = min(chunk, upto - have)
        # row i copies real row i % real; its tenant is the bench's when i % tenants == 0
        sql = f"""
            INSERT INTO assessments (tenant, id, {COLUMNS})
            SELECT CASE WHEN g % CAST(:tenants AS bigint) = 0 THEN :tenant
                        ELSE 'bench-' || (g % CAST(:tenants AS bigint)) END,
                   'copy-' || md5(g::text), {COLUMNS.replace("created_at", "created_at - g * 0.01")}
            FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g
            JOIN (SELECT row_number() OVER (ORDER BY id) - 1 AS k, * FROM assessments WHERE id NOT LIKE 'copy-%') r
              ON r.k = g % CAST(:real AS bigint)
        """
        with engine.begin() as con:
            con.execute(
                sa.text(sql), {"tenants": tenants, "tenant": TENANT, "lo": have, "hi": have + n - 1, "real": real}
            )
        have += n
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as con:
        con.exec_driver_sql("VACUUM ANALYZE assessments")


def ids_of(engine: sa.Engine, k: int) -> list[str]:
    with engine.connect() as con:
        rows = con.execute(
            sa.text("SELECT id FROM assessments WHERE tenant = :t ORDER BY random() LIMIT :k"), {"t": TENANT, "k": k}
        )
        return [r[0] for r in rows]


def hammer(url: str, key: str, ids: list[str], clients: int, seconds: float) -> np.ndarray:
    async def run() -> list[float]:
        lat: list[float] = []
        stop = time.monotonic() + seconds
        async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:

            async def loop() -> None:
                rnd = random.Random()
                while time.monotonic() < stop:
                    t0 = time.perf_counter()
                    r = await c.get(f"/v1/assessments/{rnd.choice(ids)}")
                    lat.append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text

            await asyncio.gather(*(loop() for _ in range(clients)))
        return lat

    return np.asarray(asyncio.run(run())) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--real", type=int, default=20, help="assessments through the real path (the rows copied)")
    ap.add_argument("--tenants", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--profile", type=Path, default=None, help="write py-spy's samples of the API here")
    args = ap.parse_args()
    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms")
    items = [request_item(p) for p in bench.passages if len(p["candidates"]) == 10]
    scope = ExitStack()  # the PostgreSQL database of the run, dropped when the run ends
    url = scope.enter_context(throwaway_postgres())
    engine = sa.create_engine(url)
    folder = Path(tempfile.mkdtemp(prefix="trisk-bench-scale-"))
    index = str(folder / "sn12.trisk")
    cmd = [sys.executable, "-m", "service.cli", "build-index", "--subdir", "sutta/sn/sn12", "--out", index]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    env = {
        "TRISK_DATABASE_URL": url.render_as_string(hide_password=False).replace("+psycopg", ""),
        "TRISK_INDEX_PATH": index,
        "TRISK_LOG_FORMAT": "text",
        "TRISK_WORKER_NICE": "0",
        "TRISK_PURGE_SECONDS": "0",  # copied rows keep created_at spread back in time: nothing is purged meanwhile
        "TRISK_RECONCILE_SECONDS": "0",
    }
    stack = Stack(None, 1, env=env, log_dir=folder)
    try:
        with httpx.Client(base_url=stack.url, timeout=60, headers={"Authorization": f"Bearer {stack.key}"}) as client:
            wait_ready(client)
            stack.wait_workers()
            ids = [client.post("/v1/assessments", json=items[i % len(items)]).json()["id"] for i in range(args.real)]
            _wait_done(client, ids, 900)
            stack.workers[0].terminate()  # the GETs run against the API alone
            print(f"PostgreSQL, {args.clients} clients, {args.seconds:.0f} s per size, load average {os.getloadavg()}")
            print(
                "| stored assessments | GET p50 | GET p99 | requests/s | API CPU per request | the clients' CPU "
                "| store bytes per assessment | load (1 min) |"
            )
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for size in (int(s) for s in args.sizes.split(",")):
                grow(engine, size, args.tenants)
                spy = None
                if args.profile and size == int(args.sizes.split(",")[0]):
                    spy = py_spy(stack.apis[0].pid, args.seconds, args.profile)
                sample = ids_of(engine, 5000)
                cpu0, own0 = _cpu_seconds(stack.apis[0].pid), time.process_time()
                lat = hammer(stack.url, stack.key, sample, args.clients, args.seconds)
                api_cpu, own = _cpu_seconds(stack.apis[0].pid) - cpu0, time.process_time() - own0
                if spy is not None:
                    spy.wait(60)
                per = store_bytes(engine) / size
                p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
                rate = len(lat) / args.seconds
                print(
                    f"| {size:,} | {p50:.1f} ms | {p99:.1f} ms | {rate:.0f} | {1000 * api_cpu / lat.size:.2f} ms "
                    f"| {100 * own / args.seconds:.0f}% | {per / 1024:.1f} KiB | {os.getloadavg()[0]:.1f} |",
                    flush=True,
                )
    finally:
        stack.close()
        engine.dispose()
        scope.close()


if __name__ == "__main__":
    main()
