"""Assessment throughput and API latency with the default configuration, on a private Redis (cold caches).

Two measurements, each alone (the 1,000 interactive assessments of the latency test run ahead of any batch in their
lane, so timing a batch behind them measures both):

1. the cheap tier end to end (novelty, embeddings, peer signals, critical checks, flags) for one batch of
   ``--passages`` PaliBench passages, from the submission until every item is done, in candidate translations per
   second, with nothing else queued;
2. POST /v1/assessments latency at ``--rate`` requests per second for ``--seconds`` (open loop) while a worker runs
   (it takes the interactive assessments as they arrive).

    .venv/bin/python bench/bench_assessments.py [--passages 150] [--rate 100] [--seconds 10] [--workers 1]
        [--database-url postgresql+psycopg://...] [--profile api-profile.txt]

``--profile`` samples the API process with py-spy (the dev extra) during the latency test and writes its collapsed
stacks (one line per stack: frames separated by ``;``, then the sample count) there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.platform.settings import SHARED_DIR  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, request_item, wait_ready  # noqa: E402


async def _latency(url: str, key: str, items: list[dict], rate: float, seconds: float) -> tuple[np.ndarray, int]:
    """Fire POSTs on a fixed schedule (open loop: a slow answer does not slow the sender); the latencies in ms and how
    many answers were not 202."""
    lat: list[float] = []
    errors = 0
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:

        async def one(i: int) -> None:
            nonlocal errors
            t0 = time.perf_counter()
            try:
                r = await client.post("/v1/assessments", json=items[i % len(items)])
                errors += r.status_code != 202
            except httpx.TransportError:  # an overloaded server resets connections: counted, not fatal
                errors += 1
            lat.append((time.perf_counter() - t0) * 1000)

        # a few requests first, outside the figures: connections opened, the first-request paths warmed
        await asyncio.gather(*(one(i) for i in range(10)))
        lat.clear()
        errors = 0
        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return np.array(lat), errors


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc): unlike latency, not inflated by other processes
    of a shared machine taking the cores."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` for about ``seconds`` (raw collapsed stacks into ``out``), attached when it returns."""
    spy = subprocess.Popen(
        [
            *(str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid)),
            *("--rate", "250", "--duration", str(int(seconds) + 2), "--format", "raw", "--threads"),
            *("-o", str(out)),
        ],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached
    return spy


def _throughput(client: httpx.Client, items: list[dict]) -> tuple[float, dict[str, int]]:
    """One batch, from its submission until every assessment is done: seconds and the final counts."""
    body = "\n".join(json.dumps(i, ensure_ascii=False) for i in items).encode()
    t0 = time.perf_counter()
    r = client.post("/v1/batches/ndjson", content=body, headers={"content-type": "application/x-ndjson"})
    r.raise_for_status()
    bid = r.json()["id"]
    while True:
        prog = client.get(f"/v1/batches/{bid}").json()
        if prog["status"] == "done":
            return time.perf_counter() - t0, prog["counts"]
        time.sleep(0.25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=150, help="PaliBench dev passages (10 candidates each)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--database-url", default="", help="the durable store (default: a fresh SQLite file)")
    ap.add_argument("--profile", type=Path, default=None, help="write py-spy's samples of the API here")
    args = ap.parse_args()
    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms")
    items = [request_item(p) for p in bench.passages[: args.passages]]
    n_cands = sum(len(i["candidates"]) for i in items)
    tmp = Path(tempfile.mkdtemp(prefix="trisk-bench-assessments-"))
    env = {"TRISK_DATABASE_URL": args.database_url} if args.database_url else {"TRISK_DB_PATH": str(tmp / "trisk.db")}
    stack = Stack(None, args.workers, env, log_dir=tmp)
    engine = "PostgreSQL" if args.database_url.startswith("postgresql") else "SQLite"
    try:
        with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {stack.key}"}) as client:
            wait_ready(client)
            stack.wait_workers()
            secs, counts = _throughput(client, items)
        print(
            f"cheap tier end to end, the batch alone: {n_cands} candidates ({len(items)} passages) in {secs:.1f} s = "
            f"{n_cands / secs:.1f} candidates/s (target >= 20), {counts['failed']} failed; workers={args.workers}"
        )
        spy = py_spy(stack.apis[0].pid, args.seconds, args.profile) if args.profile else None
        cpu0 = _cpu_seconds(stack.apis[0].pid)
        lat, errors = asyncio.run(_latency(stack.url, stack.key, items, args.rate, args.seconds))
        cpu = _cpu_seconds(stack.apis[0].pid) - cpu0
        if spy is not None:
            spy.wait(60)
        p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
        print(
            f"POST /v1/assessments alone at {args.rate:.0f}/s for {args.seconds:.0f} s while the worker runs "
            f"({engine}): p50 {p50:.1f} ms, p99 {p99:.1f} ms (target < 50), max {lat.max():.1f} ms, n={lat.size}, "
            f"{errors} not 202; the API's CPU {1000 * cpu / (lat.size + 10):.2f} ms per request"
        )
    finally:
        stack.close()
        if args.profile:
            print(f"API profile: {args.profile}")


if __name__ == "__main__":
    main()
