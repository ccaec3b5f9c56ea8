"""What the health routes check: Redis (reachable, not evicting, not nearly full), the durable store, the index,
and the workers' heartbeats (service.state.worker_registry). Every detail is free of credentials
(service.platform.redact)."""

from __future__ import annotations

import asyncio
import time

import msgspec
import redis.exceptions

from service.app.resources import Resources
from service.platform.redact import redact_url, scrub
from service.platform.telemetry import WORKERS_LIVE
from service.state.durable.engine import describe, ping
from service.state.worker_registry import WorkerRecord, live_workers

__all__ = [
    "MEMORY_READY_FRACTION",
    "SAFE_POLICY",
    "STORE_REFUSAL_SECONDS",
    "Check",
    "WorkerSummary",
    "WorkersReport",
    "index_check",
    "redis_check",
    "redis_memory_check",
    "redis_policy_check",
    "store_check",
    "workers_report",
]

# the one maxmemory-policy that never drops a key: every trisk key has a TTL (the retention), so the volatile-*
# policies would evict assessments and queued jobs as surely as the allkeys-* ones
SAFE_POLICY = "noeviction"
# a probe answers within its own timeout (3 s in k8s/api.yaml) even when a dependency hangs
CHECK_TIMEOUT_SECONDS = 1.0
# a pod is not ready once Redis uses more than this share of its maxmemory (noeviction refuses writes at 100%)
MEMORY_READY_FRACTION = 0.9
STORE_TIMEOUT_SECONDS = 2.0
# a pod is not ready this long after the durable store refused a write (full disk, read-only): long enough for the
# readiness probe (every 5-10 s) to see it; while out of the Service the pod writes nothing, so it comes back after
# this and goes out again on its next refused write, until the store takes writes
STORE_REFUSAL_SECONDS = 30.0


class Check(msgspec.Struct, forbid_unknown_fields=True):
    ok: bool
    detail: str


def index_check(resources: Resources) -> Check:
    if resources.indexes:
        detail = ", ".join(
            f"{lang}: {len(ix)} passages, signature {ix.signature_id}" for lang, ix in resources.indexes.items()
        )
        return Check(ok=True, detail=detail)
    return Check(ok=False, detail=scrub("; ".join(resources.index_errors.values()) or "no index loaded"))


async def redis_check(resources: Resources) -> Check:
    if resources.redis is None:
        return Check(ok=False, detail="no Redis client")
    try:
        await asyncio.wait_for(resources.redis.ping(), timeout=CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # any failure means not ready; say which, never with the password of the URL
        where = redact_url(resources.settings.redis.url)
        return Check(ok=False, detail=f"Redis at {where} unreachable: {type(exc).__name__}")
    return Check(ok=True, detail="PONG")


async def redis_policy_check(resources: Resources) -> Check:
    """Fails on a Redis that may evict keys when full (it would drop jobs and assessments silently); a provider that
    disables CONFIG leaves the policy unknown, which does not fail readiness."""
    assert resources.redis is not None
    try:
        got = await asyncio.wait_for(resources.redis.config_get("maxmemory-policy"), timeout=CHECK_TIMEOUT_SECONDS)
    except redis.exceptions.ResponseError as exc:  # CONFIG renamed, disabled or not allowed for this user
        refused = scrub(str(exc))
        return Check(
            ok=True, detail=f"maxmemory-policy unknown (CONFIG GET refused: {refused}); it must be {SAFE_POLICY}"
        )
    except Exception as exc:  # gone since the ping: the next probe says so
        return Check(ok=False, detail=f"maxmemory-policy not read: {type(exc).__name__}")
    policy = got.get("maxmemory-policy")
    if not policy:
        return Check(ok=True, detail=f"maxmemory-policy unknown (CONFIG GET said nothing); it must be {SAFE_POLICY}")
    if policy != SAFE_POLICY:
        return Check(
            ok=False,
            detail=f"maxmemory-policy is {policy}: a full Redis would evict assessments and queued jobs; "
            f"set {SAFE_POLICY}",
        )
    return Check(ok=True, detail=f"maxmemory-policy {policy}")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


async def redis_memory_check(resources: Resources) -> Check:
    """Fails when Redis uses more than MEMORY_READY_FRACTION of its ``maxmemory``: under ``noeviction`` it is about to
    refuse every write (submissions, job state), so this pod says so before its submissions start failing. The
    figures, never the URL. A Redis without a limit, or one whose INFO is refused, does not fail readiness."""
    assert resources.redis is not None
    try:
        info = await asyncio.wait_for(resources.redis.info("memory"), timeout=CHECK_TIMEOUT_SECONDS)
    except redis.exceptions.ResponseError as exc:  # INFO renamed or not allowed for this user
        return Check(ok=True, detail=f"memory unknown (INFO refused: {scrub(str(exc))})")
    except Exception as exc:  # gone since the ping: the next probe says so
        return Check(ok=False, detail=f"memory not read: {type(exc).__name__}")
    used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
    if limit <= 0:
        return Check(ok=True, detail=f"used_memory {_mib(used)}, no maxmemory (it grows until the host runs out)")
    share = used / limit
    detail = f"used_memory {_mib(used)} of maxmemory {_mib(limit)} ({share:.0%})"
    if share > MEMORY_READY_FRACTION:
        return Check(
            ok=False,
            detail=f"{detail}: above {MEMORY_READY_FRACTION:.0%}, Redis is about to refuse writes (noeviction); "
            "raise maxmemory or shorten TRISK_RETENTION_SECONDS",
        )
    return Check(ok=True, detail=detail)


async def store_check(resources: Resources) -> Check:
    """One round trip to the durable store (verdicts, keys): a pod that cannot reach it would answer every key with
    503, so it is not ready; nor is one whose store refused a write within ``STORE_REFUSAL_SECONDS`` (a full disk
    answers reads and the ping, and every submission with 503)."""
    if resources.db is None:
        return Check(ok=False, detail="the durable store is not open")
    where = describe(resources.db.engine.url)
    try:
        # the thread may outlive the timeout (the driver's connect timeout bounds it); the probe does not wait
        await asyncio.wait_for(asyncio.to_thread(ping, resources.db.engine), timeout=STORE_TIMEOUT_SECONDS)
    except TimeoutError:
        return Check(ok=False, detail=f"{where}: no answer within {STORE_TIMEOUT_SECONDS:g} s")
    except Exception as exc:  # the driver's message can quote the connection string: only the type is shown
        return Check(ok=False, detail=f"{where} unreachable: {type(exc).__name__}")
    refused = resources.db.write_refused
    if refused is not None and (ago := time.monotonic() - refused[0]) < STORE_REFUSAL_SECONDS:
        return Check(ok=False, detail=f"{where} refused a write {ago:.0f} s ago: {scrub(refused[1])}")
    return Check(ok=True, detail=where)


class WorkerSummary(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One live worker as anyone may see it (no provider, no models: those are in /v1/workers, admin scope)."""

    worker_id: str
    release: str
    state: str
    seconds_since_heartbeat: float
    uptime_seconds: float
    llm_configured: bool
    index_signatures: dict[str, str]
    # whether it loaded the same index as this API process (None when this process has none loaded)
    same_index_as_api: bool | None


class WorkersReport(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # ok: at least one live worker and none with a problem; degraded: live workers, some with a problem;
    # no_workers: no live heartbeat (queued work waits); unknown: Redis not readable
    status: str
    queue: str
    live: int
    releases: list[str]
    problems: list[str]
    workers: list[WorkerSummary]


def _problems(record: WorkerRecord, api_signatures: dict[str, str]) -> list[str]:
    out = []
    index = record.capabilities.index
    if not index.signatures:
        out.append(f"worker {record.worker_id} has no novelty index: batch items get no novelty")
    for lang, sig in index.signatures.items():
        if api_signatures.get(lang) not in (None, sig):
            out.append(f"worker {record.worker_id} has index {sig} for {lang}, the API {api_signatures[lang]}")
    return out


async def workers_report(resources: Resources) -> tuple[WorkersReport, list[WorkerRecord]]:
    """The live workers of this API's queue and what is wrong with them; also sets ``trisk_workers_live``."""
    queue = resources.settings.redis.queue_name
    if resources.redis is None:
        return WorkersReport(
            status="unknown", queue=queue, live=0, releases=[], problems=["no Redis client"], workers=[]
        ), []
    try:
        records = await asyncio.wait_for(live_workers(resources.redis, queue), timeout=CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # Redis away: the workers' state is unknown, not "none"
        problem = f"worker heartbeats not read: {type(exc).__name__}"
        return WorkersReport(status="unknown", queue=queue, live=0, releases=[], problems=[problem], workers=[]), []
    now = time.time()
    api_signatures = {lang: ix.signature_id for lang, ix in resources.indexes.items()}
    problems = [p for r in records for p in _problems(r, api_signatures)]
    releases = sorted({r.release for r in records})
    WORKERS_LIVE.clear()
    for release in releases:
        WORKERS_LIVE.labels(queue, release).set(sum(r.release == release for r in records))
    summaries = [
        WorkerSummary(
            worker_id=r.worker_id,
            release=r.release,
            state=r.state,
            seconds_since_heartbeat=round(max(0.0, now - r.last_seen), 1),
            uptime_seconds=round(max(0.0, now - r.started_at), 1),
            llm_configured=r.capabilities.judges.llm_configured,
            index_signatures=dict(r.capabilities.index.signatures),
            same_index_as_api=None
            if not api_signatures
            else all(api_signatures.get(lang) in (None, sig) for lang, sig in r.capabilities.index.signatures.items())
            and bool(r.capabilities.index.signatures),
        )
        for r in records
    ]
    if len(releases) > 1:
        problems.append(f"workers of {len(releases)} releases run at once: {', '.join(releases)}")
    status = "no_workers" if not records else ("degraded" if problems else "ok")
    report = WorkersReport(
        status=status, queue=queue, live=len(records), releases=releases, problems=problems, workers=summaries
    )
    return report, records
