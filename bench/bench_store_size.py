"""What a finished assessment costs where: bytes in the durable store (each engine) and Redis ``used_memory`` beyond its
caches, through the real path.

For each engine (the SQLite file; a PostgreSQL database made for the run on the local server and dropped after) a
private stack (tests.support.evaluation.Stack: the API and a worker as subprocesses, a private redis-server persisted as
the service's is, loopback only) takes ``--stored`` PaliBench dev passages of 10 candidates (cheap tier), waits until
all are done, then prints:

* the store: bytes on disk per assessment (SQLite: the file after a WAL checkpoint; PostgreSQL: the records tables'
  ``pg_total_relation_size``, indexes and TOAST included), and the packed record bytes per assessment (meta, parts);
* Redis: ``used_memory`` growth per assessment, and the same without the bounded caches (the embedding cache, per
  distinct text; ARQ's job results, an hour) by MEMORY USAGE of each key family.

    .venv/bin/python bench/bench_store_size.py [--stored 100] [--engines sqlite,postgresql] [--index FILE]
        [--distinct] [--slots N]

``--distinct`` makes every text of every submission new (a counter appended), the embedding cache's worst case (the
PaliBench passages repeat after a few dozen submissions); ``--slots`` sets ``TRISK_EMBEDDING_CACHE_SLOTS`` for the
run (the cache's bound: with ``--distinct`` its keys stop growing at that many).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_load import _wait_done  # noqa: E402  (the one wait for a stack's assessments to finish)

from service.platform.settings import SHARED_DIR  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, request_item, throwaway_postgres, wait_ready  # noqa: E402

TABLES = ("assessments", "batches", "idempotency_keys", "score_pool", "judge_jobs")
PACKED = ("meta", "cheap", "provisional", "llm", "final", "callback", "callback_cheap")
_ID = re.compile(r"[0-9a-f]{16,}|(?<=:slot:)[0-9]+")
# bounded caches: their keys stay for their own TTL, whatever the retention (README "Capacity")
CACHES = ("trisk:emb:", "arq:result:", "trisk:llm:")


def families(r: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for key in r.scan_iter(count=1000):
        out[_ID.sub("*", key.decode(errors="replace"))] += int(r.memory_usage(key, samples=0) or 0)
    return out


def store_bytes(engine: sa.Engine) -> int:
    if engine.dialect.name == "sqlite":
        with engine.connect() as con:
            con.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        return Path(str(engine.url.database)).stat().st_size
    with engine.connect() as con:
        sizes = [con.execute(sa.text(f"SELECT pg_total_relation_size('{t}')")).scalar_one() for t in TABLES]
    return int(sum(sizes))


def packed_bytes(engine: sa.Engine) -> tuple[int, int]:
    cols = " + ".join(f"coalesce(length({c}), 0)" for c in PACKED)
    with engine.connect() as con:
        row = con.execute(sa.text(f"SELECT count(*), coalesce(sum({cols}), 0) FROM assessments")).one()
    return int(row[0]), int(row[1])


def distinct(item: dict[str, Any], n: int) -> dict[str, Any]:
    """``item`` with a text of its own for every candidate and the source (submission ``n``)."""
    out = {**item, "source": {**item["source"], "text": f"{item['source']['text']} ({n})"}}
    out["candidates"] = [{**c, "text": f"{c['text']} ({n})"} for c in item["candidates"]]
    return out


def run(
    engine_name: str, items: list[dict[str, Any]], stored: int, index: str, *, new_texts: bool = False, slots: int = -1
) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"trisk-bench-store-{engine_name}-"))
    scope = ExitStack()  # the PostgreSQL database of the run, dropped when the run ends
    if engine_name == "sqlite":
        env = {"TRISK_DB_PATH": str(folder / "trisk.db"), "TRISK_DATABASE_URL": ""}
        engine = sa.create_engine(f"sqlite:///{folder / 'trisk.db'}")
    else:
        url = scope.enter_context(throwaway_postgres())
        env = {"TRISK_DATABASE_URL": url.render_as_string(hide_password=False).replace("+psycopg", "")}
        engine = sa.create_engine(url)
    env |= {"TRISK_LOG_FORMAT": "text", "TRISK_WORKER_NICE": "0", "TRISK_INDEX_PATH": index}
    if slots >= 0:
        env["TRISK_EMBEDDING_CACHE_SLOTS"] = str(slots)
    stack = Stack(None, 1, env=env, log_dir=folder)
    assert stack.redis is not None
    r = stack.redis.client()
    try:
        with httpx.Client(base_url=stack.url, timeout=60, headers={"Authorization": f"Bearer {stack.key}"}) as client:
            wait_ready(client)
            stack.wait_workers()
            time.sleep(2)
            mem0, fam0, disk0 = int(r.info("memory")["used_memory"]), families(r), store_bytes(engine)
            ids = []
            for i in range(stored):
                item = items[i % len(items)]
                resp = client.post("/v1/assessments", json=distinct(item, i) if new_texts else item)
                assert resp.status_code == 202, resp.text
                ids.append(resp.json()["id"])
            secs = _wait_done(client, ids, 900)
            time.sleep(2.0)  # the tail (review items, score pool) follows the final write
            mem1, fam1, disk1 = int(r.info("memory")["used_memory"]), families(r), store_bytes(engine)
            n, packed = packed_bytes(engine)
            emb_keys = sum(1 for _ in r.scan_iter(match="trisk:emb:*", count=1000))
    finally:
        stack.close()
        engine.dispose()
        scope.close()
    grown = {f: fam1[f] - fam0.get(f, 0) for f in fam1 if fam1[f] > fam0.get(f, 0)}
    caches = sum(v for f, v in grown.items() if f.startswith(CACHES))
    print(f"== {engine_name}: {stored} assessments of 10 candidates (PaliBench dev, cheap tier), done in {secs:.0f} s")
    print(f"  store on disk: {(disk1 - disk0) / stored / 1024:.1f} KiB per assessment ({disk0} -> {disk1} bytes)")
    print(f"  packed records: {packed / max(n, 1) / 1024:.1f} KiB per assessment (meta and parts, {n} rows)")
    bound = slots if slots >= 0 else "default"
    print(
        f"  Redis used_memory: {(mem1 - mem0) / stored / 1024:.2f} KiB per assessment in all ({mem0 / 2**20:.1f} -> "
        f"{mem1 / 2**20:.1f} MiB; distinct texts: {new_texts}, embedding cache slots: {bound})"
    )
    print(f"  embedding cache: {emb_keys} keys")
    for fam in sorted(grown, key=lambda f: -grown[f])[:8]:
        kind = "cache" if fam.startswith(CACHES) else "kept"
        print(f"    {fam:58s} {grown[fam] / stored / 1024:7.2f} KiB  {kind}")
    rest = (sum(grown.values()) - caches) / stored / 1024
    print(f"  Redis beyond its caches (MEMORY USAGE of the rest): {rest:.2f} KiB per assessment")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stored", type=int, default=100)
    ap.add_argument("--engines", default="sqlite,postgresql")
    ap.add_argument("--index", default="", help="a novelty index (default: one built of SN 12 for the run)")
    ap.add_argument("--distinct", action="store_true", help="every text of every submission new")
    ap.add_argument("--slots", type=int, default=-1, help="TRISK_EMBEDDING_CACHE_SLOTS (default: the setting's)")
    args = ap.parse_args()
    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms")
    items = [request_item(p) for p in bench.passages if len(p["candidates"]) == 10]
    assert items, "no PaliBench dev passage has 10 candidates"
    index = args.index
    if not index:  # a small index of one collection: novelty is a few hundred bytes of the record either way
        index = str(Path(tempfile.mkdtemp(prefix="trisk-bench-index-")) / "sn12.trisk")
        cmd = [sys.executable, "-m", "service.cli", "build-index", "--subdir", "sutta/sn/sn12", "--out", index]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    for name in args.engines.split(","):
        run(name.strip(), items, args.stored, index, new_texts=args.distinct, slots=args.slots)


if __name__ == "__main__":
    main()
