"""The loss window of ``appendfsync everysec`` against ``always``: SIGKILL Redis under a steady stream of writes.

For each policy and round: a private redis-server (AOF, as the service runs it) in a temporary directory; ``--clients``
threads each write ``SET w:<client>:<n>`` (a ``--value-bytes`` value, about an assessment's meta) one after another
and remember every write Redis acknowledged; after ``--kill-after`` seconds Redis is SIGKILLed mid-stream, started
again on the same AOF, and every acknowledged key is looked up. Prints per policy: acknowledged writes, how many are
missing after the restart, writes per second and write latency p50/p99 before the kill (Python clients: with many
writers the GIL, not Redis, sets this rate), then what Redis itself sustains with each policy (``redis-benchmark``
SET of the same size, 1 and 16 connections, on a fresh server).

A SIGKILL takes the process, not the kernel: what Redis wrote to the AOF file but had not fsynced is still in the page
cache and is read back. A node that loses power or panics loses what was not fsynced: with ``everysec`` up to about
one second of writes (two when the disk stalls), which is the measured rate times that; with ``always`` none.

    .venv/bin/python bench/bench_redis_durability.py [--rounds 3] [--clients 1,16] [--kill-after 2]
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tests.support.local_redis import RedisServer  # noqa: E402


@dataclass
class Round:
    acked: int = 0
    missing: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    delayed_fsyncs: int = 0


def one_round(policy: str, clients: int, kill_after: float, value: bytes, max_writes: int) -> Round:
    with tempfile.TemporaryDirectory(prefix="trisk-aof-") as tmp:
        server = RedisServer(Path(tmp), appendfsync=policy)
        server.start()
        acked: list[list[int]] = [[] for _ in range(clients)]
        lat: list[list[float]] = [[] for _ in range(clients)]
        stop = threading.Event()

        def writer(c: int) -> None:
            r = redis.Redis(port=server.port, socket_timeout=5)
            for n in range(max_writes):
                if stop.is_set():
                    return
                t0 = time.perf_counter()
                try:
                    r.set(f"w:{c}:{n}", value)
                except redis.RedisError:
                    return  # Redis died under us: this write was not acknowledged
                lat[c].append((time.perf_counter() - t0) * 1000)
                acked[c].append(n)

        threads = [threading.Thread(target=writer, args=(c,), daemon=True) for c in range(clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(kill_after)
        delayed = int(server.client().info("persistence").get("aof_delayed_fsync", 0))
        server.kill()
        seconds = time.perf_counter() - t0
        stop.set()
        for t in threads:
            t.join(10)
        client = server.start(timeout=60)
        out = Round(seconds=seconds, delayed_fsyncs=delayed)
        for c in range(clients):
            out.acked += len(acked[c])
            out.latencies_ms += lat[c]
            pipe = client.pipeline(transaction=False)
            for n in acked[c]:
                pipe.exists(f"w:{c}:{n}")
            out.missing += sum(1 for present in pipe.execute() if not present)
        server.stop()
        return out


def capacity(policy: str, clients: int, value_bytes: int, requests: int) -> tuple[float, float, float]:
    """Writes per second, p50 and p99 ms of redis-benchmark SETs against a fresh server with this policy."""
    with tempfile.TemporaryDirectory(prefix="trisk-aof-") as tmp:
        server = RedisServer(Path(tmp), appendfsync=policy)
        server.start()
        try:
            cmd = ["redis-benchmark", "-p", str(server.port), "-t", "set", "-d", str(value_bytes)]
            cmd += ["-n", str(requests), "-c", str(clients), "-r", "1000000", "--csv"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
        finally:
            server.stop()
    row = next(r for r in csv.DictReader(io.StringIO(out)) if r["test"].startswith("SET"))
    return float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="everysec,always")
    ap.add_argument("--clients", default="1,16", help="comma-separated numbers of concurrent writers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kill-after", type=float, default=2.0, help="seconds of writes before the SIGKILL")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--max-writes", type=int, default=200_000, help="per writer and round (a bound, rarely reached)")
    ap.add_argument("--capacity-requests", type=int, default=50_000, help="redis-benchmark SETs per run (0 = skip)")
    args = ap.parse_args()
    value = b"x" * args.value_bytes
    print(f"redis-server SIGKILLed after {args.kill_after:g} s of writes, {args.rounds} rounds, {args.value_bytes} B")
    print(
        f"{'policy':<9} {'clients':>7} {'acked':>8} {'missing':>7} {'writes/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'at risk on a node crash':>24}"
    )
    for clients in (int(c) for c in args.clients.split(",")):
        for policy in args.policies.split(","):
            rounds = [one_round(policy, clients, args.kill_after, value, args.max_writes) for _ in range(args.rounds)]
            acked = sum(r.acked for r in rounds)
            missing = sum(r.missing for r in rounds)
            rate = acked / sum(r.seconds for r in rounds)
            lat = np.array([x for r in rounds for x in r.latencies_ms])
            # everysec fsyncs once a second (Redis postpones the write itself when an fsync is late, up to 2 s)
            risk = "0 (fsync before the reply)" if policy == "always" else f"up to ~{rate:,.0f} (1 s of writes)"
            print(
                f"{policy:<9} {clients:>7} {acked:>8} {missing:>7} {rate:>9,.0f} {np.percentile(lat, 50):>7.2f} "
                f"{np.percentile(lat, 99):>7.2f} {risk:>24}"
            )
            delayed = sum(r.delayed_fsyncs for r in rounds)
            if delayed:
                print(f"{'':<9} {'':>7} ({delayed} fsyncs were late: Redis held writes back for up to 2 s)")
    if args.capacity_requests and shutil.which("redis-benchmark"):
        print(f"\nwhat Redis sustains (redis-benchmark, {args.capacity_requests} SETs of {args.value_bytes} B)")
        print(f"{'policy':<9} {'clients':>7} {'writes/s':>9} {'p50 ms':>7} {'p99 ms':>7}")
        for clients in (1, 16):
            for policy in args.policies.split(","):
                rps, p50, p99 = capacity(policy, clients, args.value_bytes, args.capacity_requests)
                print(f"{policy:<9} {clients:>7} {rps:>9,.0f} {p50:>7.2f} {p99:>7.2f}")


if __name__ == "__main__":
    main()
