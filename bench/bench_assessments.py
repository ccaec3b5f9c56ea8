"""Assessment throughput and API latency with the default configuration, on a private Redis (cold caches).

Prints: end-to-end cheap-tier throughput (novelty, embeddings, peer signals, critical checks, flags) in candidate
translations per second, and POST /v1/assessments latency at a fixed request rate while the workers are busy.

    .venv/bin/python bench/bench_assessments.py [--passages 150] [--rate 100] [--seconds 10] [--workers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.settings import SHARED_DIR  # noqa: E402
from service.evaluation import Stack, load_benchmark, request_item, wait_ready  # noqa: E402


async def _latency(url: str, key: str, items: list[dict], rate: float, seconds: float) -> np.ndarray:
    """Fire POSTs on a fixed schedule (open loop: a slow answer does not slow the sender)."""
    lat: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            r = await client.post("/v1/assessments", json=items[i % len(items)])
            lat.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()

        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return np.array(lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=150, help="PaliBench dev passages (10 candidates each)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms")
    items = [request_item(p) for p in bench.passages[: args.passages]]
    n_cands = sum(len(i["candidates"]) for i in items)
    stack = Stack(None, args.workers)
    try:
        with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {stack.key}"}) as client:
            wait_ready(client)
            # throughput: one batch, from submission until every assessment is done
            body = "\n".join(json.dumps(i, ensure_ascii=False) for i in items).encode()
            t0 = time.perf_counter()
            bid = client.post(
                "/v1/batches/ndjson", content=body, headers={"content-type": "application/x-ndjson"}
            ).json()["id"]
            lat = None
            while True:
                prog = client.get(f"/v1/batches/{bid}").json()
                if lat is None and prog["counts"]["done"] > 0:
                    # latency while the workers are busy with the batch
                    lat = asyncio.run(_latency(stack.url, stack.key, items, args.rate, args.seconds))
                if prog["status"] == "done":
                    break
                time.sleep(0.5)
            secs = time.perf_counter() - t0
            failed = prog["counts"]["failed"]
        print(
            f"cheap tier end to end: {n_cands} candidates ({len(items)} passages) in {secs:.1f} s = "
            f"{n_cands / secs:.1f} candidates/s (target >= 20), {failed} failed; workers={args.workers} "
            f"(includes the {int(args.rate * args.seconds)} extra assessments posted for the latency test)"
        )
        if lat is not None:
            p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
            print(
                f"POST /v1/assessments at {args.rate:.0f}/s for {args.seconds:.0f} s while workers run: "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms (target < 50), max {lat.max():.1f} ms, n={lat.size}"
            )
    finally:
        stack.close()


if __name__ == "__main__":
    main()
