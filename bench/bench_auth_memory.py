"""What unauthenticated traffic costs the API: resident memory and answers after ``--keys`` random well-formed keys.

A real ``trisk serve`` (tests.support.evaluation.Stack with no worker, a private redis-server, its own SQLite file,
loopback only) gets ``--keys`` requests, each with a fresh random key id (``trisk_<12 hex>_<43 chars>``), on one
keep-alive connection. Printed: the API's VmRSS before and after (after a warm-up of 1,000 such requests, so first-use
allocations are not counted), the statuses, and the rate. Run it with ``TRISK_AUTH_FAILURES_PER_MINUTE=0`` to see
the key cache alone (every request then reaches the key store; with ``TRISK_KEY_CACHE_SIZE=1000`` the warm-up fills
it), without to see the per-address limit.

    .venv/bin/python bench/bench_auth_memory.py [--keys 10000]
"""

from __future__ import annotations

import argparse
import collections
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.evaluation import Stack, wait_live  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def random_key() -> str:
    return f"trisk_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=10_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trisk-bench-auth-"))
    env = {"TRISK_DB_PATH": str(work / "trisk.db"), "TRISK_INDEX_PATH": str(work / "none.trisk")}
    stack = Stack(None, 0, env, log_dir=work)
    try:
        client = httpx.Client(base_url=stack.url, timeout=30)
        wait_live(client, work)
        api = stack.apis[0].pid
        for _ in range(1000):
            client.get("/v1/keys", headers={"Authorization": f"Bearer {random_key()}"})
        time.sleep(1.0)
        before = rss_kib(api)
        statuses: collections.Counter[int] = collections.Counter()
        started = time.monotonic()
        for _ in range(args.keys):
            statuses[client.get("/v1/keys", headers={"Authorization": f"Bearer {random_key()}"}).status_code] += 1
        seconds = time.monotonic() - started
        time.sleep(1.0)
        after = rss_kib(api)
    finally:
        stack.close()
    # the stack's processes inherit this environment: these two decide what is measured
    names = ("TRISK_AUTH_FAILURES_PER_MINUTE", "TRISK_KEY_CACHE_SIZE")
    shown = {name: os.environ.get(name, "default") for name in names}
    print(f"{args.keys} random keys after 1,000 warm-up ones ({shown}):")
    print(f"  statuses {dict(sorted(statuses.items()))}, {args.keys / seconds:.0f} requests/s")
    grown = (after - before) / 1024
    print(f"  API VmRSS before {before / 1024:.1f} MiB, after {after / 1024:.1f} MiB ({grown:+.1f} MiB)")


if __name__ == "__main__":
    main()
