"""Novelty latency on its own, then while a 5,000-item batch is being accepted by the same API process.

The API serves everything from one event loop; a batch must not hold it. Starts the API on the real corpus index
with a private redis-server (no workers: the batch's jobs just wait in the queue), and prints p50/p95/max of
``POST /v1/novelty`` alone and during the batch upload, and how long the batch took to be accepted.

    .venv/bin/python bench/bench_event_loop.py [--items 5000] [--probes 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from service.core.palibench import load_palibench  # noqa: E402
from service.platform.settings import get_settings  # noqa: E402
from tests.support.evaluation import Stack, wait_ready  # noqa: E402

PROBE = {"text": "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā.", "lang": "pli"}


def batch_body(items: int, max_bytes: int) -> bytes:
    """``items`` assessment requests from PaliBench dev passages (the shortest first, two candidates each), cycled,
    under the body limit."""
    bench = load_palibench()
    order = sorted(range(len(bench.passage_ids)), key=lambda i: len(bench.sources[i]))
    rows = []
    for k in range(items):
        i = order[k % (len(order) // 2)]
        cands = [{"id": m, "text": bench.translations[j][i], "model": m} for j, m in enumerate(bench.models[:2])]
        rows.append(
            {"source": {"text": bench.sources[i], "lang": "pli", "ref": bench.passage_ids[i]}, "candidates": cands}
        )
    body = json.dumps({"items": rows}, ensure_ascii=False).encode()
    if len(body) > max_bytes:
        raise SystemExit(f"the batch is {len(body)} bytes, over the {max_bytes}-byte body limit: use fewer --items")
    return body


def probe(client: httpx.Client, n: int, stop: threading.Event | None = None) -> list[float]:
    out = []
    for _ in range(n):
        if stop is not None and stop.is_set():
            break
        t0 = time.perf_counter()
        r = client.post("/v1/novelty", json=PROBE)
        out.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return out


def fmt(name: str, ms: list[float]) -> str:
    a = np.asarray(ms)
    p50, p95 = np.percentile(a, 50), np.percentile(a, 95)
    return f"{name:34s} n={a.size:4d}  p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  max {a.max():7.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--items", type=int, default=5000)
    ap.add_argument("--probes", type=int, default=200)
    args = ap.parse_args()
    body = batch_body(args.items, get_settings().limits.max_body_bytes)
    stack = Stack(None, workers=0)
    try:
        auth = {"Authorization": f"Bearer {stack.key}"}
        with httpx.Client(base_url=stack.url, timeout=600, headers=auth) as client:
            wait_ready(client)
            probe(client, 20)  # warm up
            alone = probe(client, args.probes)
            accepted: dict[str, float] = {}

            def upload() -> None:
                with httpx.Client(base_url=stack.url, timeout=600, headers=client.headers) as up:
                    t0 = time.perf_counter()
                    r = up.post("/v1/batches", content=body, headers={"content-type": "application/json"})
                    accepted["seconds"] = time.perf_counter() - t0
                    accepted["status"] = r.status_code

            thread = threading.Thread(target=upload)
            thread.start()
            during: list[float] = []
            while thread.is_alive():
                during += probe(client, 1)
            thread.join()
    finally:
        stack.close()
    print(
        f"batch of {args.items} items ({len(body) / 1e6:.1f} MB): HTTP {accepted.get('status')} "
        f"in {accepted.get('seconds', 0):.1f} s"
    )
    print(fmt("novelty alone", alone))
    print(fmt("novelty while the batch is accepted", during))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
