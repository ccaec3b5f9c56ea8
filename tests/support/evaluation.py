"""The evaluation stack (``bench/evaluate.py``, the benches, the scale-out tests): run a PaliBench-style folder
through the real API and workers and measure every signal.

Labels come from the benchmark's reference-based scores (outlier = ``normalized_drift > 2``; ``comet_best`` for
correlation). They are used to measure, never as inputs: the service only ever sees source and candidates.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from service.core.budget import STUDY_BUDGETS
from service.core.metrics import auc, budget_stats, spearman
from service.core.palibench import OUTLIER_DRIFT, load_palibench
from service.core.ranking import priority

__all__ = [
    "OUTLIER_DRIFT",
    "Benchmark",
    "Stack",
    "evaluate",
    "free_port",
    "load_benchmark",
    "one_host_env",
    "report",
    "request_item",
    "throwaway_postgres",
    "wait_ready",
]

BUDGETS = STUDY_BUDGETS
# the local PostgreSQL server benches make their throwaway databases on (TRISK_BENCH_POSTGRES_URL overrides it)
BENCH_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def throwaway_postgres(admin_url: str | None = None) -> Iterator[Any]:
    """A database of its own on the local PostgreSQL server: its URL (an ``sqlalchemy.URL``), dropped afterwards."""
    import sqlalchemy as sa

    admin_url = admin_url or os.environ.get("TRISK_BENCH_POSTGRES_URL", BENCH_POSTGRES_URL)
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"trisk_bench_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as con:
            con.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield sa.make_url(admin_url).set(database=name)
    finally:
        with admin.connect() as con:
            con.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@dataclass
class Benchmark:
    passages: list[dict[str, Any]]  # {"id", "source", "candidates": [{"id", "text", "model"}]}
    labels: dict[tuple[str, str], dict[str, float]]  # (passage, candidate id) -> {"outlier", "comet_best"}


def load_benchmark(folder: str | Path, bilara_root: str | Path, limit: int | None = None) -> Benchmark:
    """A PaliBench folder (the one loader, ``service.core.palibench``) as API batch items and measuring labels."""
    pb = load_palibench(folder, bilara_root, limit)
    labels = {
        (pid, m): {"outlier": float(ref.outlier), "comet_best": ref.comet_best}
        for m in pb.models
        for pid, ref in pb.scores[m].items()
    }
    passages = []
    for p in pb.passages:
        cands = [
            {"id": m, "text": pb.translations[m][p.id], "model": pb.model_names[m]}
            for m in pb.models
            if pb.translations[m].get(p.id, "").strip()
        ]
        passages.append({"id": p.id, "source": p.source, "candidates": cands})
    return Benchmark(passages=passages, labels=labels)


def request_item(passage: dict[str, Any], checks: list[str] | None = None) -> dict[str, Any]:
    """A benchmark passage as the body of ``POST /v1/assessments`` (or one line of a batch)."""
    item: dict[str, Any] = {
        "source": {"text": passage["source"], "lang": "pli", "ref": passage["id"]},
        "candidates": passage["candidates"],
    }
    if checks:
        item["checks"] = checks
    return item


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_host_env(folder: Path, index: Path, **more: str) -> dict[str, str]:
    """A Stack's environment on one host: the SQLite file in ``folder`` (no PostgreSQL URL from the shell), the index
    at ``index``, text logs to read in a failure, workers at normal priority; ``more`` adds or overrides settings."""
    return {
        "TRISK_DB_PATH": str(folder / "trisk.db"),
        "TRISK_DATABASE_URL": "",
        "TRISK_INDEX_PATH": str(index),
        "TRISK_LOG_FORMAT": "text",
        "TRISK_WORKER_NICE": "0",
        **more,
    }


class Stack:
    """API servers and workers in subprocesses; with ``redis_url=None`` also a private ``redis-server`` on a free
    port, so measurements start from an empty embedding cache and touch nobody's data. Several APIs share the one
    Redis and durable store (replicas, as a deployment scales out); ``log_dir`` keeps each process's output."""

    def __init__(
        self,
        redis_url: str | None,
        workers: int,
        env: dict[str, str] | None = None,
        *,
        apis: int = 1,
        log_dir: Path | None = None,
    ) -> None:
        from service.platform.settings import Settings
        from service.state.durable import open_store
        from service.state.durable.access import issue_key
        from tests.support.local_redis import RedisServer

        self.redis: RedisServer | None = None
        if redis_url is None:
            # persisted as the service's Redis is (its fsync policy costs what it costs here too)
            self.redis = RedisServer(Path(tempfile.mkdtemp(prefix="trisk-stack-redis-")))
            self.redis.start()
            redis_url = self.redis.url
        self.redis_url = redis_url
        ports = [free_port() for _ in range(apis)]
        self.port = ports[0]
        # a private stack measures throughput: rate limits off unless the caller sets them
        full_env = {
            **os.environ,
            "REDIS_URL": redis_url,
            "TRISK_QUEUE_NAME": f"trisk:eval:{self.port}",
            "TRISK_RATE_PER_KEY": "0",
            "TRISK_RATE_PER_TENANT": "0",
            **(env or {}),
        }
        self.env = full_env
        # a key of the stack's own tenant, in the durable store its APIs will read (the one these settings name)
        self.key, _ = issue_key(
            open_store(Settings.from_env(full_env).durable),
            "evaluation",
            "evaluation / bench stack",
            ["submit", "read"],
        )

        def spawn(cmd: list[str], name: str) -> subprocess.Popen[bytes]:
            out: Any = subprocess.DEVNULL if log_dir is None else (log_dir / f"{name}.log").open("wb")
            return subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT)

        self.apis = [
            spawn([sys.executable, "-m", "service.cli", "serve", "--port", str(port)], f"api-{i}")
            for i, port in enumerate(ports)
        ]
        self.workers = [
            spawn([sys.executable, "-m", "arq", "workers.settings.WorkerSettings"], f"worker-{i}")
            for i in range(workers)
        ]
        self.procs = [*self.apis, *self.workers]
        self.log_dir = log_dir
        self.urls = [f"http://127.0.0.1:{port}" for port in ports]
        self.url = self.urls[0]

    def wait_workers(self, seconds: float = 300) -> None:
        """Until every worker has logged the end of its startup (models loaded), so all of them compete for jobs
        from the start; needs ``log_dir``."""
        assert self.log_dir is not None, "Stack(log_dir=...) keeps the logs this reads"
        logs = [self.log_dir / f"worker-{i}.log" for i in range(len(self.workers))]
        deadline = time.monotonic() + seconds
        while not all("worker ready" in p.read_text(errors="replace") for p in logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"the workers did not start (logs in {self.log_dir})")
            time.sleep(0.1)

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if self.redis is not None:
            self.redis.stop()
            shutil.rmtree(self.redis.data_dir, ignore_errors=True)


def wait_live(client: Any, work: Path, seconds: float = 120) -> None:
    """Until the API process answers at all (/health/live); its logs are in ``work``."""
    import httpx

    deadline = time.monotonic() + seconds
    while True:
        try:
            if client.get("/health/live").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API did not start (logs in {work})")
        time.sleep(0.3)


def wait_ready(client: Any, seconds: float = 300) -> None:
    """Until /health/ready says yes (the index is loaded and Redis answers)."""
    import httpx

    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if client.get("/health/ready").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError("the API did not become ready")


def evaluate(bench: Benchmark, url: str, checks: list[str] | None, key: str, poll: float = 2.0) -> list[dict[str, Any]]:
    """Submit every passage as one batch (NDJSON), wait for the workers, return the results."""
    import httpx

    lines = [json.dumps(request_item(p, checks), ensure_ascii=False) for p in bench.passages]
    with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        wait_ready(client)
        # batches of 100 passages stay well under the request body limit
        bids = []
        for lo in range(0, len(lines), 100):
            r = client.post(
                "/v1/batches/ndjson",
                content="\n".join(lines[lo : lo + 100]).encode(),
                headers={"content-type": "application/x-ndjson"},
            )
            r.raise_for_status()
            bids.append(r.json()["id"])
        t0 = time.time()
        while True:
            progress = [client.get(f"/v1/batches/{bid}").json() for bid in bids]
            done = sum(p["counts"]["done"] for p in progress)
            failed = sum(p["counts"]["failed"] for p in progress)
            print(
                f"\r{time.time() - t0:6.0f}s  done {done}/{len(lines)}  failed {failed}",
                end="",
                file=sys.stderr,
                flush=True,
            )
            if all(p["status"] == "done" for p in progress):
                break
            time.sleep(poll)
        print(file=sys.stderr)
        text = "".join(client.get(f"/v1/batches/{bid}/results").text for bid in bids)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _rank_key(c: dict[str, Any]) -> float:
    """The service's own ranking field; runs saved before it existed are ranked the same way from their parts."""
    risk = c.get("risk") or {}
    if "priority" in risk:
        return float(risk["priority"])
    if not isinstance(risk.get("score"), int | float):
        return math.nan
    return priority(
        float(risk["score"]), risk.get("forced_severity") or ("major" if risk.get("forced_by_flag") else None)
    )


def report(bench: Benchmark, results: list[dict[str, Any]]) -> str:
    """The figures table: risk score and each signal alone."""
    columns: dict[str, list[tuple[float, float, float]]] = {}
    for res in results:
        pid = res["source"]["ref"]
        for c in res["candidates"]:
            lab = bench.labels.get((pid, c["id"]))
            if lab is None:
                continue
            y, comet = lab["outlier"], lab["comet_best"]
            columns.setdefault("risk (" + str((c.get("risk") or {}).get("rule", "?")).split("@")[0] + ")", []).append(
                (_rank_key(c), y, comet)
            )
            routing = c.get("routing") or {}
            if routing.get("score") is not None:
                rule = str(routing.get("rule", "?")).split("@")[0]
                columns.setdefault(f"routing ({rule})", []).append((float(routing["score"]), y, comet))
            for name, sig in c["signals"].items():
                if sig.get("status") == "value":
                    columns.setdefault(name, []).append((float(sig["value"]), y, comet))
    out = [f"{len(results)} passages; outlier = normalized_drift > {OUTLIER_DRIFT}"]
    head = (
        f"{'signal':34s} {'n':>5s} {'pos':>4s} {'AUC':>6s} "
        + " ".join(f"{'R@' + str(int(b * 100)) + '%':>17s} {'P@' + str(int(b * 100)) + '%':>17s}" for b in BUDGETS)
        + f" {'rho(-comet)':>11s}"
    )
    out.append(head)
    for name in sorted(columns, key=lambda k: (not k.startswith("risk"), not k.startswith("routing"), k)):
        arr = np.array(columns[name], dtype=float)
        ok = np.isfinite(arr[:, 0])
        s, y, comet = arr[ok, 0], arr[ok, 1], arr[ok, 2]
        if y.sum() == 0 or y.sum() == len(y):
            continue
        stats = budget_stats(s, y, BUDGETS)
        cells = " ".join(
            f"{b.recall:5.3f} [{b.recall_ci[0]:.2f},{b.recall_ci[1]:.2f}] "
            f"{b.precision:5.3f} [{b.precision_ci[0]:.2f},{b.precision_ci[1]:.2f}]"
            for b in stats
        )
        out.append(
            f"{name[:34]:34s} {len(s):5d} {int(y.sum()):4d} {auc(s, y):6.3f} {cells} {spearman(s, -comet):11.3f}"
        )
    return "\n".join(out)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(
    folder: str,
    bilara_root: str,
    url: str | None,
    redis_url: str | None,
    workers: int,
    limit: int | None,
    checks: list[str] | None,
    out_json: str | None,
    key: str | None = None,
) -> str:
    bench = load_benchmark(folder, bilara_root, limit)
    stack = None
    if url is None:
        # SIGTERM (a CI timeout, kill) must run the finally below too, or the private redis and workers outlive us
        signal.signal(signal.SIGTERM, _raise_exit)
        stack = Stack(redis_url, workers)
        url, key = stack.url, stack.key
    if key is None:
        raise SystemExit("bench/evaluate.py --url needs --key (an API key with the submit scope)")
    try:
        t0 = time.time()
        results = evaluate(bench, url, checks, key)
        elapsed = time.time() - t0
    finally:
        if stack is not None:
            stack.close()
    n_cands = sum(len(r["candidates"]) for r in results)
    if out_json:
        Path(out_json).write_text(json.dumps(results), encoding="utf-8")
    return (
        report(bench, results) + f"\n\n{n_cands} candidates end to end in {elapsed:.0f} s "
        f"({n_cands / max(elapsed, 1e-9):.1f} candidates/s)"
    )
