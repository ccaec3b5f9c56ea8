"""Scale-out: two API processes and two worker processes (``trisk serve``, ``arq``, as replicas run) on one Redis and
one durable store process one stream of assessments, some of it the same Idempotency-Key sent to both APIs at once.

Every 202 names an assessment that finishes exactly once: one result per candidate, each candidate once in the
review queue and once in the score pool, each job run by one worker only, no second assessment for a key; both
workers did some of it, and either API reads the same results. Adding replicas is then safe.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from service.core.novelty import NoveltyIndex
from service.review.queue import item_id_of
from tests.durable_support import review_item_ids, sqlite_settings
from tests.records_support import pooled_count, store_of, stored_ids
from tests.support.evaluation import Stack, one_host_env, wait_ready
from tests.support.redis_server import private_redis_server

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(40)

TENANT = "evaluation"  # the tenant of the key Stack issues
PLAIN = 20  # assessments without a key, sent alternately to the two APIs
KEYED = 6  # Idempotency-Keys, each sent to both APIs at the same time
CANDIDATES = 3
PHRASES = [
    "The blessed one was staying near Sāvatthī in Jeta's grove, Anāthapiṇḍika's monastery.",
    "At one time the Buddha was staying near Sāvatthī, in Jeta's Grove, in the monastery of Anāthapiṇḍika.",
    "Thus have I heard: the Lord dwelt at Sāvatthī, in the Jeta wood, at the park of Anāthapiṇḍika.",
]
SOURCE = "Ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane anāthapiṇḍikassa ārāme."
# a job a worker took: arq logs `<seconds>s → <job id>:<function>(<args>)` as it starts one
STARTED = re.compile(r"→ (\S+):(\w+)\(")


def _body(i: int) -> bytes:
    return json.dumps(
        {
            "source": {"text": f"{SOURCE} ({uuid.uuid4().hex[:8]} {i})", "lang": "pli"},
            "candidates": [
                {"id": f"c{k}", "text": f"{PHRASES[k % len(PHRASES)]} ({i})", "model": f"vendor/m{k}"}
                for k in range(CANDIDATES)
            ],
        }
    ).encode()


@pytest.fixture()
def stack(tmp_path: Path, sn12_index: NoveltyIndex) -> Iterator[Stack]:
    """Two APIs and two workers on a private redis-server and one throwaway SQLite file (one host)."""
    index = sn12_index.save(tmp_path / "sn.trisk")
    with private_redis_server(tmp_path) as url:
        st = Stack(url, workers=2, env=one_host_env(tmp_path, index), apis=2, log_dir=tmp_path)
        try:
            yield st
        finally:
            st.close()


def _logs(folder: Path) -> dict[str, str]:
    return {p.stem: p.read_text(errors="replace") for p in sorted(folder.glob("*.log")) if p.stem != "redis"}


def test_two_apis_and_two_workers_finish_every_assessment_exactly_once(stack: Stack, tmp_path: Path) -> None:
    headers = {"Authorization": f"Bearer {stack.key}"}
    clients = [httpx.Client(base_url=url, timeout=30, headers=headers) for url in stack.urls]
    r = redis.Redis.from_url(stack.redis_url)
    try:
        for client in clients:
            wait_ready(client, 120)
        stack.wait_workers(120)  # both past their startup: both compete for the jobs from the first one

        # (API, body, key): plain bodies alternate between the APIs; each key's two sends (the same bytes: the
        # service compares the body's hash) go to both APIs side by side in the stream, so they race
        stream: list[tuple[int, bytes, str | None]] = [(i % 2, _body(i), None) for i in range(PLAIN)]
        for k in range(KEYED):
            key, body = f"scale-{uuid.uuid4().hex[:8]}", _body(PLAIN + k)
            stream[3 * k : 3 * k] = [(0, body, key), (1, body, key)]

        def post(send: tuple[int, bytes, str | None]) -> httpx.Response:
            api, body, key = send
            headers = {"content-type": "application/json", **({"Idempotency-Key": key} if key else {})}
            return clients[api].post("/v1/assessments", content=body, headers=headers)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(post, stream))
        assert all(a.status_code == 202 for a in answers), [a.text for a in answers if a.status_code != 202]
        ids = [a.json()["id"] for a in answers]
        by_key: dict[str, set[str]] = {}
        replays = 0
        for (_, _, key), aid, a in zip(stream, ids, answers, strict=True):
            if key:
                by_key.setdefault(key, set()).add(aid)
                replays += a.headers.get("Idempotent-Replayed") == "true"
        # one assessment per key, whichever API took which send: one send created it, the other replayed it
        assert all(len(v) == 1 for v in by_key.values()), by_key
        assert replays == KEYED
        wanted = set(ids)
        assert len(wanted) == PLAIN + KEYED
        db = store_of(db_path=str(tmp_path / "trisk.db"))
        stored = stored_ids(db, TENANT)
        assert stored == wanted  # nothing more was created (a duplicate for a key would show here)

        deadline = time.monotonic() + 90
        pending = set(wanted)
        while pending:
            assert time.monotonic() < deadline, f"{len(pending)} not done\n{_logs(tmp_path)}"
            for n, aid in enumerate(sorted(pending)):
                if clients[n % 2].get(f"/v1/assessments/{aid}").json()["status"] in ("done", "failed"):
                    pending.discard(aid)
            time.sleep(0.2)
        time.sleep(1.0)  # a duplicate run, had one been queued, would have written by now

        for aid in sorted(wanted):
            a, b = (c.get(f"/v1/assessments/{aid}") for c in clients)
            assert a.status_code == b.status_code == 200
            assert a.json() == b.json()  # the same result through either API
            done = a.json()
            assert done["status"] == "done" and done["error"] is None, done
            assert sorted(c["id"] for c in done["candidates"]) == [f"c{k}" for k in range(CANDIDATES)]
            assert all(c["risk"]["score"] is not None for c in done["candidates"])

        # each candidate once in the review queue (its items and its order) and, unless forced, once in the pool
        results = {aid: clients[0].get(f"/v1/assessments/{aid}").json()["candidates"] for aid in wanted}
        want_items = sorted(item_id_of(aid, c["id"]) for aid, cands in results.items() for c in cands)
        assert review_item_ids(sqlite_settings(tmp_path), TENANT) == want_items
        want_pooled = [c for cands in results.values() for c in cands if c["risk"]["forced_severity"] is None]
        assert pooled_count(db, TENANT) == len(want_pooled)

        # every job ran once, on one worker, and each worker ran some
        logs = _logs(tmp_path)
        runs = {w: STARTED.findall(logs[w]) for w in ("worker-0", "worker-1")}
        jobs = Counter(job for found in runs.values() for job, _ in found)
        assert set(jobs) == {f"{aid}:cheap" for aid in wanted}, jobs
        assert set(jobs.values()) == {1}, [j for j, n in jobs.items() if n > 1]
        assert all(runs.values()), {w: len(f) for w, f in runs.items()}
        print("jobs per worker:", {w: len(f) for w, f in runs.items()})
    finally:
        r.close()
        for c in clients:
            c.close()
