"""Redis restarts under the service: a private redis-server (AOF, noeviction, as `make up` and k8s run it) is stopped,
killed and started again on the same port and AOF while the same app instance (and a real worker process) keeps
running. While Redis is away the API answers 503 problem+json with Retry-After, never 500; it recovers by itself; no
submission that got a 202 is lost; the worker carries on; the review queue's Redis data is still there."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from tests.api.test_assessments import GOOD, _assessment
from tests.conftest import TEST_TENANT, issue_test_key, keyed
from tests.support.local_redis import RedisServer

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(30)

ROOT = Path(__file__).resolve().parents[2]

# one request of each kind of Redis use: the job queue (submissions, batches); reading assessments and batches needs
# no Redis (they are rows of the durable store)
REDIS_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/assessments", _assessment(GOOD[:2])),
    ("POST", "/v1/batches", {"items": [_assessment(GOOD[:2])]}),
]
# the review queue and its leases are in the durable store: they answer while Redis is away
STORE_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/review/queue", None),
    ("POST", "/v1/review/claims", {"n": 1}),
]


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


def on_server(test_settings: Settings, server: RedisServer) -> Settings:
    return replace(test_settings, redis=replace(test_settings.redis, url=server.url))


@pytest.fixture()
def api(sn12_index: NoveltyIndex, test_settings: Settings, redis_server: RedisServer) -> Iterator[Any]:
    """One app instance on the private Redis, for the whole test (never restarted), as a tenant of the test's own:
    the review queue is in the session's durable store, beside other tests' items."""
    settings = on_server(test_settings, redis_server)
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        yield keyed(tc, issue_test_key(settings, tenant=f"{TEST_TENANT}-{uuid.uuid4().hex[:8]}"))


def assert_redis_503(r: Any) -> None:
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/problem+json"), r.headers
    assert int(r.headers["retry-after"]) >= 1
    body = r.json()
    assert body["status"] == 503 and "Redis" in body["detail"], body
    assert body["retry_after"] == int(r.headers["retry-after"])


def call(tc: Any, method: str, path: str, body: dict[str, Any] | None) -> Any:
    return tc.request(method, path, json=body) if body is not None else tc.request(method, path)


def test_redis_away_is_a_503_and_the_same_app_recovers_by_itself(api: Any, redis_server: RedisServer) -> None:
    first = api.post("/v1/assessments", json=_assessment(GOOD))
    assert first.status_code == 202, first.text
    aid = first.json()["id"]

    redis_server.stop()
    for method, path, body in REDIS_ROUTES:
        assert_redis_503(call(api, method, path, body))
    ready = api.get("/health/ready")
    assert ready.status_code == 503 and ready.json()["checks"]["redis"]["ok"] is False
    assert api.get("/v1/novelty/sn22.76:7").status_code == 200, "novelty needs no Redis"
    # the records are the store's: an acknowledged assessment reads as it is while Redis is away
    assert api.get(f"/v1/assessments/{aid}").json()["status"] == "pending"
    assert api.get("/v1/batches/0123456789abcdef").status_code == 404
    for method, path, body in STORE_ROUTES:
        assert call(api, method, path, body).status_code in (200, 201), (method, path, "needs no Redis")

    redis_server.start()  # same port, same AOF directory
    assert api.get("/health/ready").status_code == 200
    assert api.get(f"/v1/assessments/{aid}").json()["status"] == "pending", "the assessment survived the restart"
    again = api.post("/v1/assessments", json=_assessment(GOOD))
    assert again.status_code == 202, again.text
    for method, path, body in REDIS_ROUTES:
        assert call(api, method, path, body).status_code in (200, 201, 202, 404), (method, path)


def test_no_route_answers_500_while_redis_is_away(api: Any, redis_server: RedisServer) -> None:
    """Every route of the OpenAPI document, with placeholder ids and an empty body: a 4xx or a 503, never a 500."""
    schema = api.get("/schema/openapi.json").json()
    redis_server.stop()
    seen: Counter[int] = Counter()
    for path, ops in schema["paths"].items():
        concrete = path.replace("{", "").replace("}", "")  # /v1/x/{id} -> /v1/x/id: a well-formed, unknown id
        for method in ops:
            r = call(api, method.upper(), concrete, {} if method in ("post", "put") else None)
            seen[r.status_code] += 1
            assert r.status_code < 500 or r.status_code == 503, (method, path, r.status_code, r.text)
            if r.status_code == 503 and "Redis" in r.json().get("detail", ""):
                assert_redis_503(r)
    assert seen[503] >= 2, seen  # the routes that queue work did reach Redis (records and the review queue need none)


def test_redis_loading_its_aof_is_a_503_that_says_so(api: Any, redis_server: RedisServer) -> None:
    client = redis_server.client()
    pipe = client.pipeline(transaction=False)
    for i in range(3000):
        pipe.set(f"filler:{i}", "x")
    pipe.execute()
    redis_server.stop()
    redis_server.args += ["--key-load-delay", "500"]  # replaying 3,000 keys takes about a second: Redis says LOADING
    redis_server.start(wait=False)
    deadline = time.monotonic() + 10
    while True:
        r = api.post("/v1/assessments", json=_assessment(GOOD[:2]))  # queueing work needs Redis
        if r.status_code == 503 and "loading" in r.json()["detail"]:
            assert_redis_503(r)
            break
        assert r.status_code == 503 and time.monotonic() < deadline, ("no LOADING answer seen", r.status_code, r.text)
        time.sleep(0.02)
    redis_server.wait_ready()
    assert api.post("/v1/assessments", json=_assessment(GOOD[:2])).status_code == 202


@dataclass
class Load:
    """Submits assessments and polls the acknowledged ones from one thread, recording every answer."""

    tc: Any
    acked: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    wrong: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            r = self.tc.post("/v1/assessments", json=_assessment(GOOD[:2]))
            self.record(r, 202, f"POST #{n}")
            if r.status_code == 202:
                self.acked.append(r.json()["id"])
            if self.acked:
                r = self.tc.get(f"/v1/assessments/{self.acked[n % len(self.acked)]}")
                self.record(r, 200, f"GET after POST #{n}")

    def record(self, r: Any, ok: int, what: str) -> None:
        self.statuses[r.status_code] += 1
        if r.status_code == ok:
            return
        if r.status_code != 503:  # a 404 here is a lost assessment, a 500 an unmapped error
            self.wrong.append(f"{what}: {r.status_code} {r.text[:300]}")
            return
        try:
            assert_redis_503(r)
        except (AssertionError, KeyError, ValueError) as exc:
            self.wrong.append(f"{what}: a 503 without the problem form: {exc!r} {r.headers} {r.text[:300]}")

    def wait_for_acks(self, more: int, seconds: float = 20) -> None:
        target, deadline = len(self.acked) + more, time.monotonic() + seconds
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"the load made no progress: {self.statuses} {self.wrong[:3]}"
            time.sleep(0.02)


def test_no_acknowledged_submission_is_lost_across_restarts(
    api: Any, redis_server: RedisServer, test_settings: Settings
) -> None:
    assert redis_server.client().config_get("appendfsync")["appendfsync"] == "always"
    load = Load(api)
    thread = threading.Thread(target=load.run, daemon=True)
    thread.start()
    try:
        load.wait_for_acks(5)
        redis_server.stop()  # SIGTERM: Redis fsyncs and exits
        time.sleep(0.5)
        redis_server.start()
        load.wait_for_acks(5)
        redis_server.kill()  # SIGKILL mid-stream: only the AOF (fsynced before each reply) is left
        time.sleep(0.5)
        redis_server.start()
        load.wait_for_acks(5)
    finally:
        load.stop.set()
        thread.join(30)
    assert not load.wrong, load.wrong[:5]
    assert load.statuses[503] >= 2, f"Redis was never seen away: {load.statuses}"
    client = redis_server.client()
    queue = on_server(test_settings, redis_server).redis.queue_name
    lost = [aid for aid in load.acked if api.get(f"/v1/assessments/{aid}").status_code != 200]
    unqueued = [aid for aid in load.acked if client.zscore(queue, f"{aid}:cheap") is None]
    assert not lost and not unqueued, (len(load.acked), lost, unqueued)


# -- a real worker process across restarts


def start_worker(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "REDIS_URL": settings.redis.url,
        "TRISK_QUEUE_NAME": settings.redis.queue_name,
        "TRISK_DB_PATH": settings.durable.db_path,
        "TRISK_WORKER_NICE": "0",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "arq", "workers.settings.WorkerSettings"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_done(api: Any, aid: str, worker: subprocess.Popen[bytes], log: Path, seconds: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        assert worker.poll() is None, f"the worker exited:\n{log.read_text(errors='replace')[-3000:]}"
        r = api.get(f"/v1/assessments/{aid}")
        if r.status_code == 200 and r.json()["status"] in ("done", "failed"):
            body: dict[str, Any] = r.json()
            assert body["status"] == "done", body
            return body
        assert time.monotonic() < deadline, f"not done: {r.text[:300]}\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.1)


def review_items(api: Any, aid: str) -> dict[str, str]:
    page = api.get("/v1/review/queue", params={"scope": "all", "status": "any", "limit": 500}).json()
    return {i["id"]: i["status"] for i in page["items"] if i["assessment_id"] == aid}


def test_a_worker_carries_on_across_restarts_and_the_review_queue_survives(
    api: Any, redis_server: RedisServer, test_settings: Settings, tmp_path: Path
) -> None:
    settings = on_server(test_settings, redis_server)
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    try:
        aid = api.post("/v1/assessments", json=_assessment(GOOD)).json()["id"]
        wait_done(api, aid, worker, log)
        # the review items are the tail's, written just after the final result (status done): wait for them
        queued = time.monotonic() + 30
        while len(review_items(api, aid)) < 3 and time.monotonic() < queued:
            time.sleep(0.1)
        claim = api.post("/v1/review/claims", json={"n": 1})
        assert claim.status_code == 201, claim.text
        before = review_items(api, aid)
        assert len(before) == 3 and "leased" in before.values(), before

        for restart in (redis_server.kill, redis_server.stop):
            restart()
            time.sleep(1.0)  # the worker's polls fail meanwhile; it must wait, not exit
            assert worker.poll() is None, f"the worker exited:\n{log.read_text(errors='replace')[-3000:]}"
            redis_server.start()
            assert review_items(api, aid) == before, "the review queue or its lease was lost"
            nxt = api.post("/v1/assessments", json=_assessment(GOOD))
            assert nxt.status_code == 202, nxt.text
            wait_done(api, nxt.json()["id"], worker, log)
    finally:
        worker.terminate()
        worker.wait(30)
