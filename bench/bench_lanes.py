"""Interactive work beside bulk work, and one tenant beside another (lanes and fair shares, ``service.state.lanes``).

A private stack (redis-server, the API, ONE real worker subprocess) per scenario, PaliBench dev passages:

a. tenant A queues a batch of ``--passages`` passages; once the worker is on it, tenant B posts one single
   assessment every ``--every`` seconds for ``--seconds`` seconds; B's time-to-done (POST to ``done``, polled) is
   printed as p50/p95/max, and the batch's throughput (passages/s) while B's singles ran and after they stopped;
b. tenant A posts ``--passages`` single assessments, then B the same as in (a);
c. the throughput of the same batch alone, with no interactive work (``--no-alone`` skips it).

Each passage carries ``--candidates`` of its candidate translations (rotated, so passages cycled past the 763 of
PaliBench dev differ). Prints figures; it is not a timed test.

    .venv/bin/python bench/bench_lanes.py [--passages 1000] [--candidates 3] [--every 2] [--seconds 60]
        [--scenarios abc]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.platform.settings import SHARED_DIR, get_settings  # noqa: E402
from tests.support.evaluation import Stack, load_benchmark, wait_ready  # noqa: E402

TENANT_B = "bench-lanes-b"


def passages(n: int, candidates: int, offset: int = 0) -> list[dict[str, Any]]:
    """``n`` assessment requests from PaliBench dev, cycled; each cycle takes the next ``candidates`` models."""
    bench = load_benchmark(SHARED_DIR / "palibench-dev", SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms")
    ps = bench.passages
    out = []
    for k in range(offset, offset + n):
        p = ps[k % len(ps)]
        cands = p["candidates"]
        first = (k // len(ps)) * candidates
        chosen = [cands[(first + j) % len(cands)] for j in range(min(candidates, len(cands)))]
        out.append({"source": {"text": p["source"], "lang": "pli", "ref": p["id"]}, "candidates": chosen})
    return out


def key_for(tenant: str) -> str:
    from service.state.durable import open_store
    from service.state.durable.access import issue_key

    token, _ = issue_key(open_store(get_settings().durable), tenant, "bench_lanes", ["submit", "read"])
    return token


async def singles(url: str, key: str, items: list[dict[str, Any]], every: float, seconds: float) -> list[float]:
    """Post one single every ``every`` s for ``seconds`` s (open loop); each one's seconds from POST to done."""
    out: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:

        async def one(item: dict[str, Any]) -> None:
            t0 = time.perf_counter()
            r = await client.post("/v1/assessments", json=item)
            r.raise_for_status()
            aid = r.json()["id"]
            while time.perf_counter() - t0 < 600:
                status = (await client.get(f"/v1/assessments/{aid}")).json()["status"]
                if status in ("done", "failed"):
                    out.append(time.perf_counter() - t0)
                    return
                await asyncio.sleep(0.2)
            out.append(float("inf"))

        tasks, start = [], time.perf_counter()
        for i in range(int(seconds / every)):
            delay = start + i * every - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(items[i % len(items)])))
        await asyncio.gather(*tasks)
    return out


def done_count(client: httpx.Client, bid: str) -> int:
    return int(client.get(f"/v1/batches/{bid}").json()["counts"]["done"])


def fmt_latency(name: str, secs: list[float]) -> str:
    a = np.asarray(secs)
    p50, p95 = np.percentile(a, 50), np.percentile(a, 95)
    return f"{name}: B's time-to-done n={a.size} p50 {p50:.1f} s, p95 {p95:.1f} s (target < 10), max {a.max():.1f} s"


def post_batch(client: httpx.Client, items: list[dict[str, Any]]) -> str:
    body = "\n".join(json.dumps(i, ensure_ascii=False) for i in items).encode()
    r = client.post("/v1/batches/ndjson", content=body, headers={"content-type": "application/x-ndjson"})
    r.raise_for_status()
    return str(r.json()["id"])


def wait_first(client: httpx.Client, bid: str) -> None:
    while done_count(client, bid) == 0:
        time.sleep(0.2)


@contextlib.contextmanager
def private_stack() -> Iterator[tuple[Stack, httpx.Client, str]]:
    """A private stack with one worker, a client as tenant A (the stack's key) and a key of tenant B."""
    stack = Stack(None, workers=1)
    try:
        b_key = key_for(TENANT_B)
        with httpx.Client(base_url=stack.url, timeout=120, headers={"Authorization": f"Bearer {stack.key}"}) as c:
            wait_ready(c)
            yield stack, c, b_key
    finally:
        stack.close()


def scenario_batch(args: argparse.Namespace, with_singles: bool) -> None:
    items = passages(args.passages, args.candidates)
    lat: list[float] = []
    with private_stack() as (stack, c, b_key):
        t_post = time.perf_counter()
        bid = post_batch(c, items)
        accepted = time.perf_counter() - t_post
        wait_first(c, bid)
        t0, n0 = time.perf_counter(), done_count(c, bid)
        if with_singles:
            lat = asyncio.run(singles(stack.url, b_key, passages(50, args.candidates, 700), args.every, args.seconds))
        else:
            time.sleep(args.seconds)
        t1, n1 = time.perf_counter(), done_count(c, bid)
        # the rest of the batch (bounded: a stuck worker must not hang the bench)
        deadline = t1 + max(600.0, 4 * args.passages)
        while (n2 := done_count(c, bid)) < len(items) and time.perf_counter() < deadline:
            time.sleep(1)
        t2 = time.perf_counter()
    during = (n1 - n0) / (t1 - t0)
    after = (n2 - n1) / (t2 - t1) if n2 > n1 else float("nan")
    print(
        f"({'a' if with_singles else 'c'}) batch of {len(items)} passages x {args.candidates} candidates from A, "
        f"accepted in {accepted:.1f} s, {n2} done in {t2 - t_post:.0f} s"
    )
    if with_singles:
        print(fmt_latency(f"(a) {len(lat)} singles from B every {args.every:g} s beside the batch", lat))
        what = f"while B's singles ran ({args.seconds:.0f} s)"
    else:
        what = f"alone (first {args.seconds:.0f} s)"
    print(f"(c) batch throughput: {during:.2f} passages/s {what}, {after:.2f} passages/s after")


def scenario_singles(args: argparse.Namespace) -> None:
    items = passages(args.passages, args.candidates)
    with private_stack() as (stack, c, b_key):

        async def flood() -> float:
            t = time.perf_counter()
            async with httpx.AsyncClient(base_url=stack.url, timeout=60, headers=c.headers) as ac:
                sem = asyncio.Semaphore(16)

                async def one(item: dict[str, Any]) -> None:
                    async with sem:
                        (await ac.post("/v1/assessments", json=item)).raise_for_status()

                await asyncio.gather(*(one(i) for i in items))
            return time.perf_counter() - t

        posted = asyncio.run(flood())
        lat = asyncio.run(singles(stack.url, b_key, passages(50, args.candidates, 700), args.every, args.seconds))
    print(f"(b) {len(items)} singles from A posted in {posted:.1f} s")
    print(fmt_latency(f"(b) {len(lat)} singles from B every {args.every:g} s beside A's singles", lat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=3, help="candidate translations per passage")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between B's singles")
    ap.add_argument("--seconds", type=float, default=60.0, help="how long B posts singles")
    ap.add_argument("--scenarios", default="abc", help="which of a, b, c to run")
    args = ap.parse_args()
    print(f"one worker, {args.passages} passages x {args.candidates} candidates; load before: {os.getloadavg()}")
    if "a" in args.scenarios:
        scenario_batch(args, with_singles=True)
    if "b" in args.scenarios:
        scenario_singles(args)
    if "c" in args.scenarios:
        scenario_batch(args, with_singles=False)


if __name__ == "__main__":
    main()
