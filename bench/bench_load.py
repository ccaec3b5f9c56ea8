"""Load and capacity: sustained request rates, Redis memory per stored assessment, resident memory per process.

On a private stack (tests.support.evaluation.Stack: the API and workers as subprocesses, a private redis-server
persisted as the service's is, loopback only), with PaliBench dev passages (10 candidates each) as the requests:

1. resident memory (VmRSS) of the API and of each worker, idle after start;
2. Redis memory per stored assessment: ``used_memory`` before and after ``--stored`` assessments posted and finished,
   divided by their number, with MEMORY USAGE per key family (what stays for TRISK_RETENTION_SECONDS, what expires
   sooner) and the AOF's growth on disk, before and after a rewrite;
3. POST /v1/assessments, closed loop (``--concurrency`` requests in flight) for ``--seconds``: requests/s, p50/p99,
   while the workers drain the backlog it makes; then GET /v1/assessments/{id} the same way (polling);
4. resident memory again, after the load; the machine's load average (the bench shares its cores with the stack and
   anything else running).

End-to-end cheap-tier throughput is bench/bench_assessments.py's figure; this one is for sizing. Bounded: every phase
stops at ``--seconds`` or ``--max-requests``, whichever comes first (about two minutes in all with the defaults).

    .venv/bin/python bench/bench_load.py [--workers 1] [--stored 100] [--concurrency 16] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.platform.settings import SHARED_DIR  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, request_item, wait_ready  # noqa: E402

# what varies between the keys of one family: ids and content hashes
_ID = re.compile(r"[0-9a-f]{16,}")
# how long a family stays: the assessments and what follows from them for the retention, the embedding cache per
# distinct text for its own TTL (30 days), arq's job results for keep_result (an hour)
_KINDS = (("arq:", "arq results, 1 h"), ("trisk:emb:", "embedding cache, 30 d"))
_RETAINED = "TRISK_RETENTION_SECONDS"


def _kind(family: str) -> str:
    return next((kind for prefix, kind in _KINDS if family.startswith(prefix)), _RETAINED)


def rss_mib(pid: int) -> float:
    """VmRSS of a process, in MiB (/proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def aof_bytes(data_dir: Path) -> int:
    """The append-only file(s) on disk (Redis 7 keeps a base file and increments in appendonlydir)."""
    return sum(p.stat().st_size for p in data_dir.rglob("*.aof*") if p.is_file())


def families(r: redis.Redis) -> dict[str, tuple[int, int, bool]]:
    """Key family -> (keys, MEMORY USAGE bytes, expires): every key of the private Redis, grouped by its pattern."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key in r.scan_iter(count=1000):
        fam = _ID.sub("*", key.decode(errors="replace"))
        row = out[fam]
        row[0] += 1
        row[1] += int(r.memory_usage(key, samples=0) or 0)
        row[2] += r.ttl(key) > 0
    return {fam: (n, size, ttl == n) for fam, (n, size, ttl) in out.items()}


def _drive(
    url: str, key: str, make: Callable[[int], tuple[str, str, Any]], concurrency: int, seconds: float, cap: int
) -> tuple[np.ndarray, int, float, list[Any]]:
    """Closed loop: ``concurrency`` clients, each sending its next request when the last one answered, until
    ``seconds`` or ``cap`` requests. Returns latencies (ms), errors, elapsed seconds and the 2xx bodies' ids."""

    async def run() -> tuple[np.ndarray, int, float, list[Any]]:
        lat: list[float] = []
        errors = 0
        ids: list[Any] = []
        sent = 0
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers, limits=limits) as client:
            t0 = time.perf_counter()
            stop = t0 + seconds

            async def loop() -> None:
                nonlocal sent, errors
                while time.perf_counter() < stop and sent < cap:
                    i = sent
                    sent += 1
                    method, path, body = make(i)
                    t = time.perf_counter()
                    try:
                        resp = await client.request(method, path, json=body)
                    except httpx.HTTPError:
                        errors += 1
                        continue
                    lat.append((time.perf_counter() - t) * 1000)
                    if resp.status_code >= 300:
                        errors += 1
                    elif method == "POST":
                        ids.append(resp.json()["id"])

            await asyncio.gather(*(loop() for _ in range(concurrency)))
            elapsed = time.perf_counter() - t0
        return np.array(lat), errors, elapsed, ids

    return asyncio.run(run())


def _wait_done(client: httpx.Client, ids: list[str], seconds: float) -> float:
    t0 = time.perf_counter()
    pending = set(ids)
    while pending:
        if time.perf_counter() - t0 > seconds:
            raise SystemExit(f"{len(pending)} of {len(ids)} assessments not done within {seconds:.0f} s")
        for aid in list(pending):
            if client.get(f"/v1/assessments/{aid}").json()["status"] in ("done", "failed"):
                pending.discard(aid)
        time.sleep(0.5)
    return time.perf_counter() - t0


def _own_cpu() -> float:
    return sum(os.times()[:2])


def _measured(name: str, pid: int, run: Callable[[], tuple[np.ndarray, int, float, list[Any]]]) -> list[Any]:
    """Run one load phase and print its figures, with the CPU the API process and this load generator used (on a
    shared 2-core machine either may be what limits the rate)."""
    api0, own0 = cpu_seconds(pid), _own_cpu()
    lat, errors, elapsed, ids = run()
    api, own = cpu_seconds(pid) - api0, _own_cpu() - own0
    p50, p99 = (np.percentile(lat, q) if lat.size else float("nan") for q in (50, 99))
    print(
        f"{name}: {lat.size / elapsed:6.1f} requests/s sustained over {elapsed:.0f} s (n={lat.size}, errors {errors}), "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms; CPU: API process {100 * api / elapsed:.0f}%, load generator "
        f"{100 * own / elapsed:.0f}% of one core"
    )
    return ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--stored", type=int, default=100, help="assessments posted and finished for the memory figures")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight in the load phases")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each load phase")
    ap.add_argument("--max-requests", type=int, default=5000, help="cap on the requests of each load phase")
    args = ap.parse_args()
    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms")
    items = [request_item(p) for p in bench.passages]
    n_cands = np.mean([len(i["candidates"]) for i in items])
    load0 = os.getloadavg()
    log_dir = Path(tempfile.mkdtemp(prefix="trisk-bench-load-"))
    stack = Stack(None, args.workers, log_dir=log_dir)
    assert stack.redis is not None
    r = stack.redis.client()
    api = stack.apis[0]
    try:
        with httpx.Client(base_url=stack.url, timeout=60, headers={"Authorization": f"Bearer {stack.key}"}) as client:
            wait_ready(client)
            stack.wait_workers()
            time.sleep(2)
            rss_idle = (rss_mib(api.pid), [rss_mib(w.pid) for w in stack.workers])

            # -- Redis memory per stored assessment
            mem0, aof0 = int(r.info("memory")["used_memory"]), aof_bytes(stack.redis.data_dir)
            fam0 = families(r)
            _, errors, _, ids = _drive(
                stack.url,
                stack.key,
                lambda i: ("POST", "/v1/assessments", items[i % len(items)]),
                4,
                600,
                args.stored,
            )
            assert not errors and len(ids) == args.stored, errors
            secs = _wait_done(client, ids, 600)
            time.sleep(1.5)  # the tail (review queue, score pool) follows the final write
            mem1, aof1 = int(r.info("memory")["used_memory"]), aof_bytes(stack.redis.data_dir)
            fam1 = families(r)
            r.bgrewriteaof()
            while int(r.info("persistence")["aof_rewrite_in_progress"]) or int(
                r.info("persistence")["aof_rewrite_scheduled"]
            ):
                time.sleep(0.2)
            aof2 = aof_bytes(stack.redis.data_dir)
            print(
                f"stored: {args.stored} assessments of {n_cands:.0f} candidates (PaliBench dev, cheap tier) posted and "
                f"finished in {secs:.0f} s"
            )
            per = (mem1 - mem0) / args.stored
            print(
                f"Redis used_memory: {mem0 / 2**20:.1f} -> {mem1 / 2**20:.1f} MiB = {per / 1024:.1f} KiB per "
                f"assessment ({per / n_cands / 1024:.2f} KiB per candidate)"
            )
            print("MEMORY USAGE by key family, per stored assessment (the families that grew), and how long it stays:")
            by_kind: dict[str, float] = defaultdict(float)
            for fam in sorted(fam1, key=lambda f: -fam1[f][1]):
                n1, b1, ttl = fam1[fam]
                n0, b0, _ = fam0.get(fam, (0, 0, False))
                if b1 - b0 <= 0:
                    continue
                d = (b1 - b0) / args.stored
                by_kind[_kind(fam)] += d
                stays = _kind(fam) if ttl else "no TTL"
                print(f"  {fam:60s} {n1 - n0:6d} keys  {d / 1024:7.2f} KiB  {stays}")
            print("  per assessment: " + ", ".join(f"{v / 1024:.1f} KiB {k}" for k, v in by_kind.items()))
            print(
                f"  Redis used_memory_rss {int(r.info('memory')['used_memory_rss']) / 2**20:.1f} MiB "
                f"(fragmentation ratio {r.info('memory')['mem_fragmentation_ratio']})"
            )
            print(
                f"AOF on disk: {aof0 / 2**20:.1f} -> {aof1 / 2**20:.1f} MiB = {(aof1 - aof0) / args.stored / 1024:.1f}"
                f" KiB written per assessment; {aof2 / 2**20:.1f} MiB after BGREWRITEAOF "
                f"({aof2 / max(mem1, 1):.2f} x used_memory)"
            )

            # -- submission and polling under load, workers running
            q = stack.env["TRISK_QUEUE_NAME"]
            posted = _measured(
                "POST /v1/assessments",
                api.pid,
                lambda: _drive(
                    stack.url,
                    stack.key,
                    lambda i: ("POST", "/v1/assessments", items[i % len(items)]),
                    args.concurrency,
                    args.seconds,
                    args.max_requests,
                ),
            )
            print(f"  jobs queued behind the workers at the end: {r.zcard(q)}")
            # polling the finished ones: their whole result is rendered (a pending one answers with less)
            rng = random.Random(0)
            _measured(
                f"GET /v1/assessments/{{id}} (done, {n_cands:.0f} candidates)",
                api.pid,
                lambda: _drive(
                    stack.url,
                    stack.key,
                    lambda i: ("GET", f"/v1/assessments/{rng.choice(ids)}", None),
                    args.concurrency,
                    args.seconds,
                    args.max_requests,
                ),
            )
            print(f"  jobs still queued (the workers were busy all along): {r.zcard(q)} of {len(posted)} posted")
            rss_after = (rss_mib(api.pid), [rss_mib(w.pid) for w in stack.workers])
        print(
            f"RSS (VmRSS) idle after start: API {rss_idle[0]:.0f} MiB, worker(s) "
            + ", ".join(f"{m:.0f}" for m in rss_idle[1])
            + f" MiB; after the load: API {rss_after[0]:.0f} MiB, worker(s) "
            + ", ".join(f"{m:.0f}" for m in rss_after[1])
            + " MiB"
        )
        load1 = os.getloadavg()
        print(
            f"machine: {os.cpu_count()} cores, load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end "
            f"(1 min; the bench, the stack and anything else running share the cores); workers={args.workers}, "
            f"concurrency={args.concurrency}"
        )
    finally:
        r.close()
        stack.close()
        shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
