"""A Redis that loses its whole dataset loses no acknowledged assessment: the API and a worker process on a private
redis-server, 200 assessments (single ones and a batch), a FLUSHALL in the middle of the run; the worker's reconciler
queues the lost jobs again from the durable store's unfinished records and every assessment reaches a final status,
each once; afterwards Redis holds nothing of them but ARQ's bounded job results."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from service.core.novelty import NoveltyIndex
from tests.records_support import store_of, stored_ids
from tests.support.evaluation import Stack, one_host_env, wait_ready
from tests.support.redis_server import private_redis_server

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(75)

TENANT = "evaluation"  # the tenant of the key Stack issues
SINGLE = 150
BATCH = 50
SOURCE = "Ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane anāthapiṇḍikassa ārāme."
PHRASES = [
    "The blessed one was staying near Sāvatthī in Jeta's grove, Anāthapiṇḍika's monastery.",
    "At one time the Buddha was staying near Sāvatthī, in Jeta's Grove, in the monastery of Anāthapiṇḍika.",
]


def _item(i: int) -> dict[str, object]:
    return {
        "source": {"text": f"{SOURCE} ({uuid.uuid4().hex[:8]} {i})", "lang": "pli"},
        "candidates": [{"id": f"c{k}", "text": f"{PHRASES[k]} ({i})"} for k in range(2)],
        "checks": ["length_ratio", "hard_flags"],
    }


def test_a_flushall_mid_run_loses_no_acknowledged_assessment(tmp_path: Path, sn12_index: NoveltyIndex) -> None:
    index = sn12_index.save(tmp_path / "sn.trisk")
    with private_redis_server(tmp_path) as url:
        env = one_host_env(tmp_path, index, TRISK_RECONCILE_SECONDS="2")
        stack = Stack(url, workers=1, env=env, apis=1, log_dir=tmp_path)
        r = redis.Redis.from_url(url)
        client = httpx.Client(base_url=stack.url, timeout=30, headers={"Authorization": f"Bearer {stack.key}"})
        try:
            wait_ready(client, 120)
            stack.wait_workers(120)

            def post(i: int) -> str:
                a = client.post("/v1/assessments", json=_item(i))
                assert a.status_code == 202, a.text
                return str(a.json()["id"])

            with ThreadPoolExecutor(4) as pool:
                ids = list(pool.map(post, range(SINGLE // 2)))
                b = client.post("/v1/batches", json={"items": [_item(SINGLE + k) for k in range(BATCH)]})
                assert b.status_code == 202, b.text
                queued_before = r.zcard(stack.env["TRISK_QUEUE_NAME"])
                r.flushall()  # every queued job, lease, result and lane state is gone
                ids += list(pool.map(post, range(SINGLE // 2, SINGLE)))
            assert queued_before > 0, "the worker had drained the queue before the FLUSHALL: nothing was lost"
            stored = stored_ids(store_of(db_path=env["TRISK_DB_PATH"]), TENANT)
            assert set(ids) <= stored and len(stored) == SINGLE + BATCH  # the batch's items are rows as well
            ids = sorted(stored)

            deadline = time.monotonic() + 300
            statuses: dict[str, str] = {}
            while True:
                statuses = {aid: client.get(f"/v1/assessments/{aid}").json()["status"] for aid in ids}
                if all(s in ("done", "failed") for s in statuses.values()) or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            assert Counter(statuses.values()) == {"done": SINGLE + BATCH}, (Counter(statuses.values()), _log(tmp_path))
            worker_log = (tmp_path / "worker-0.log").read_text(errors="replace")
            assert "reconciled:" in worker_log  # the reconciler, not luck, brought the lost jobs back
            reconciled = [line.split("reconciled: ")[1] for line in worker_log.splitlines() if "reconciled: " in line]
            print(f"FLUSHALL with {queued_before} jobs queued: {len(ids)} of {len(ids)} done; {reconciled}")
            time.sleep(3)  # a reconcile round after the last one finished queues nothing
            # nothing of a finished assessment stays in Redis but ARQ's job results (kept for an hour)
            leftovers = [
                k.decode()
                for k in r.scan_iter(count=1000)
                if any(aid in k.decode() for aid in ids[:20]) and not k.decode().startswith("arq:result:")
            ]
            assert leftovers == []
        finally:
            client.close()
            stack.close()


def _log(folder: Path) -> str:
    return json.dumps({p.stem: p.read_text(errors="replace")[-3000:] for p in sorted(folder.glob("*.log"))})
