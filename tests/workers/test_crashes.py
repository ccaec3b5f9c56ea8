"""Real worker processes (the ``arq`` command of k8s/worker.yaml) killed, stalled and stopped in the middle of a job,
against a redis-server of the test's own: the assessment still completes exactly once, within the documented bound.

Exactly once means: one stored part per tier, never rewritten once the assessment is done; every candidate's checks
there; each candidate once in the review queue and once in the tenant's score pool; one callback POST. The bounds
follow from workers/lease.py (a lost worker's job is taken again after ``TRISK_JOB_LEASE_SECONDS``) and, for
SIGTERM, from ``job_completion_wait`` in workers/settings.py; README.md ("Failures") gives the arithmetic.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from arq.jobs import deserialize_result

from service.core.novelty import NoveltyIndex
from service.platform.settings import REPO_ROOT, Settings
from tests.conftest import issue_test_key, keyed
from tests.durable_support import review_item_ids, sqlite_settings
from tests.fakes.openai_server import FakeOpenAIServer, Reply, models_with_panel, openai_server  # noqa: F401
from tests.records_support import pooled_count, record_fields, store_of
from tests.support.redis_server import private_redis_server
from tests.worker_support import CallbackReceiver

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(110)

TENANT = "test-crashes"
SOURCE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."
PHRASES = [
    "Endowed with the seven treasures, trained in the three trainings, the great heroes wander, fearless.",
    "Possessed of the seven gems, trained in the three trainings, great heroes roam about, fear abandoned.",
    "Accomplished in seven jewels, trained in the threefold training, the mighty heroes wander, free of dread.",
    "With seven treasures and three trainings the heroes wander without fear or dread.",
]
SLOW_JUDGE = "slow-judge"  # scripted per test: its first answers take longer than the test waits
PANEL = {
    "name": "crash",
    "version": "t1",
    "description": "one scripted judge on the local protocol server",
    "judges_per_candidate": 1,
    "judges": [{"id": "a", "model": SLOW_JUDGE, "family": "anthropic"}],
}
# a worker lost mid-job: the lease lapses, a live worker's next poll (0.5 s) takes the job, the rerun finishes it and
# the callback job follows; a fresh worker's start (~2-5 s) overlaps the lease. Production arithmetic: README
# "Failures". The cheap-tier test runs with the production lease; the others with a short one, to stay quick.
LEASE_SECONDS = Settings.from_env({}).jobs.lease_seconds
SHORT_LEASE_SECONDS = 4.0
SLACK_SECONDS = 30.0


def _candidates(n: int) -> list[dict[str, str]]:
    """Distinct candidates (texts differ, so no embedding is served from another candidate's cache entry)."""
    return [
        {"id": f"c{i}", "text": f"{PHRASES[i % len(PHRASES)]} ({i})", "model": f"vendor/m{i % 3}"} for i in range(n)
    ]


@dataclass
class Stack:
    """The test's own Redis, durable store and queue; the API in process; worker processes as k8s runs them."""

    env: dict[str, str]
    settings: Settings
    folder: Path
    redis: redis.Redis
    api: Any = None
    receiver: CallbackReceiver = field(default_factory=lambda: CallbackReceiver([200]))
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_worker(self, *, lease: float | None = None, drain: int | None = None) -> subprocess.Popen[bytes]:
        """``arq workers.settings.WorkerSettings``, with another lease if given; with ``drain``, the same through arq's
        ``run_worker`` with a shorter ``job_completion_wait`` (the CLI's own code path: a test need not wait 120 s)."""
        env = self.env if lease is None else {**self.env, "TRISK_JOB_LEASE_SECONDS": str(lease)}
        if drain is None:
            cmd = [str(Path(sys.executable).parent / "arq"), "workers.settings.WorkerSettings"]
        else:
            code = "from arq.worker import run_worker; from workers.settings import WorkerSettings as W; "
            cmd = [sys.executable, "-c", code + f"run_worker(W, job_completion_wait={drain})"]
        log = (self.folder / f"worker-{len(self.workers)}.log").open("wb")
        proc = subprocess.Popen(cmd, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.workers.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.folder.glob("worker-*.log")))

    def submit(self, n: int, checks: list[str]) -> str:
        body = {
            "source": {"text": f"{SOURCE} {uuid.uuid4().hex}", "lang": "pli"},
            "candidates": _candidates(n),
            "checks": checks,
            "callback_url": self.receiver.url,
        }
        r = self.api.post("/v1/assessments", json=body)
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def fields(self, aid: str) -> dict[bytes, bytes]:
        return record_fields(store_of(db_path=str(self.folder / "trisk.db")), TENANT, aid)

    def wait_for(self, what: str, check: Callable[[], bool], seconds: float) -> float:
        """Poll ``check`` every 10 ms; the monotonic time it first held."""
        deadline = time.monotonic() + seconds
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {seconds:.0f} s\n{self.logs()}")
            time.sleep(0.01)
        return time.monotonic()

    def wait_delivered(self, aid: str, seconds: float) -> float:
        """Until the assessment is done and its callback delivered (the last step of the whole job chain)."""

        def delivered() -> bool:
            f = self.fields(aid)
            return f.get(b"tail") == b"done" and b'"delivered"' in f.get(b"callback", b"")

        return self.wait_for("assessment done and callback delivered", delivered, seconds)

    def job_result(self, job_id: str) -> Any:
        raw = self.redis.get(f"arq:result:{job_id}")
        assert raw is not None, f"no arq result for {job_id}"
        return deserialize_result(raw)

    def assert_exactly_once(self, aid: str, n: int, checks: list[str]) -> dict[str, Any]:
        """One result per candidate with every check, each candidate once in the queue and the pool, one POST."""
        time.sleep(1.0)  # a duplicate callback job, if one were queued, would be delivered by now
        done = self.api.get(f"/v1/assessments/{aid}").json()
        assert done["status"] == "done" and done["error"] is None, done
        assert sorted(c["id"] for c in done["candidates"]) == sorted(f"c{i}" for i in range(n))
        wanted = {"peer_distance": "peer_centroid_distance", "source_distance": "source_distance"}
        wanted |= {"gemba": "gemba_mean_risk", "length_ratio": "length_ratio_z"}
        for c in done["candidates"]:
            assert c["risk"] is not None and c["risk"]["score"] is not None, c
            for check in checks:
                if check in wanted:
                    assert c["signals"][wanted[check]]["status"] == "value", (check, c["signals"])
        items = review_item_ids(sqlite_settings(Path(self.env["TRISK_DB_PATH"]).parent), TENANT, aid)
        assert len(items) == n, items
        # each stack has a tenant pool of its own: what it holds is this assessment's unforced scores, once
        unforced = [c for c in done["candidates"] if c["risk"]["forced_severity"] is None]
        assert b"pooled" in self.fields(aid)
        assert pooled_count(store_of(db_path=str(self.folder / "trisk.db")), TENANT) == len(unforced)
        posts = [b for b in self.receiver.bodies if b["id"] == aid]
        assert len(posts) == 1 and posts[0]["status"] == "done", [b["status"] for b in posts]
        assert (done["callback"]["status"], done["callback"]["attempts"]) == ("delivered", 1)
        return dict(done)

    def close(self) -> None:
        for p in self.workers:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait(timeout=10)
        self.receiver.close()


@pytest.fixture()
def stack(
    tmp_path: Path,
    sn12_index: NoveltyIndex,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> Iterator[Stack]:
    from litestar.testing import TestClient

    from service.app import create_app
    from service.app.resources import Resources

    models = models_with_panel(tmp_path, PANEL)
    openai_server.script(SLOW_JUDGE, [Reply("80")])
    with private_redis_server(tmp_path) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRISK_", "REDIS_"))}
        env.update(
            REDIS_URL=url,
            TRISK_QUEUE_NAME=f"trisk:crash:{uuid.uuid4().hex[:8]}",
            TRISK_DB_PATH=str(tmp_path / "trisk.db"),
            TRISK_INDEX_PATH=str(tmp_path / "no-index.trisk"),  # single assessments: the API computes novelty
            TRISK_MODELS_DIR=str(models),
            TRISK_LLM_BASE_URL=openai_server.base_url,
            TRISK_LLM_API_KEY="test",
            TRISK_LLM_PANEL="crash",
            TRISK_LLM_MAX_RETRIES="0",
            TRISK_LLM_REVIEW_BUDGET="1.0",
            TRISK_CALLBACK_ALLOW_HTTP="true",  # the receiver listens on http://127.0.0.1
            TRISK_CALLBACK_ALLOW_NETWORKS="127.0.0.0/8",
            TRISK_RATE_PER_KEY="0",
            TRISK_RATE_PER_TENANT="0",
            TRISK_LOG_FORMAT="text",
            TRISK_WORKER_NICE="0",  # timings here measure recovery, not how a shared CPU is divided
        )
        settings = Settings.from_env(env)
        client = redis.Redis.from_url(url)
        st = Stack(env=env, settings=settings, folder=tmp_path, redis=client)
        resources = Resources(settings=settings, indexes={"pli": sn12_index})
        try:
            with TestClient(app=create_app(settings, resources=resources)) as tc:
                st.api = keyed(tc, issue_test_key(settings, TENANT))
                yield st
        finally:
            st.close()
            client.close()
            openai_server.reset()


def _kill(proc: subprocess.Popen[bytes]) -> float:
    proc.kill()  # SIGKILL: no handler runs, the in-progress key and the half-done job stay behind
    proc.wait(timeout=10)
    return time.monotonic()


def _freeze_when_started(stack: Stack, proc: subprocess.Popen[bytes], aid: str) -> None:
    """SIGSTOP the worker the moment its cheap job marks the assessment started (the job takes ~0.5 s; this lands
    within milliseconds), so the job is frozen mid-way, wherever it was, and the test can check that it was."""
    stack.wait_for("the cheap job started", lambda: b"started" in stack.fields(aid), 120)
    proc.send_signal(signal.SIGSTOP)
    assert b"part:cheap" not in stack.fields(aid), "the worker was stopped after the cheap part: the job was too fast"


CHEAP_CHECKS = ["peer_distance", "source_distance", "hard_flags", "critical", "length_ratio"]


def test_a_worker_killed_mid_cheap_job_is_replaced_and_the_assessment_completes_once(stack: Stack) -> None:
    n = 16
    aid = stack.submit(n, CHEAP_CHECKS)
    first = stack.start_worker()
    _freeze_when_started(stack, first, aid)
    killed = _kill(first)  # a stopped process dies at once: the kill lands exactly where the job was frozen
    stack.start_worker()
    bound = LEASE_SECONDS + SLACK_SECONDS  # the production lease: this measures the documented bound itself
    seconds = stack.wait_delivered(aid, bound + 15) - killed
    done = stack.assert_exactly_once(aid, n, CHEAP_CHECKS)
    result = stack.job_result(f"{aid}:cheap")
    assert (result.success, result.job_try) == (True, 2), result  # the dead worker's try, then one more
    assert done["llm"] is None
    print(f"cheap tier: done and delivered {seconds:.1f} s after SIGKILL (lease {LEASE_SECONDS:.0f} s)")
    assert seconds < bound, stack.logs()


LLM_CHECKS = ["peer_distance", "hard_flags", "gemba"]


def _stall_llm_calls(fake: FakeOpenAIServer, calls: int, seconds: float) -> None:
    """The judge's first ``calls`` answers take ``seconds`` (the worker is hit while waiting); later ones are quick."""
    fake.script(SLOW_JUDGE, [Reply("80", delay=seconds)] * calls + [Reply("80")])


def test_a_worker_killed_mid_llm_call_is_replaced_and_the_assessment_completes_once(
    stack: Stack,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    n = 3
    _stall_llm_calls(openai_server, n, 12)
    aid = stack.submit(n, LLM_CHECKS)
    first = stack.start_worker(lease=SHORT_LEASE_SECONDS)
    stack.wait_for("every judge call sent", lambda: len(openai_server.requests_for(SLOW_JUDGE)) == n, 120)
    cheap = stack.fields(aid)[b"part:cheap"]
    # the live worker renews its lease past the first one, and never holds more than a lease (arq alone: 910 s)
    time.sleep(SHORT_LEASE_SECONDS * 1.5)
    assert 0 < stack.redis.pttl(f"arq:in-progress:{aid}:llm") <= SHORT_LEASE_SECONDS * 1000
    killed = _kill(first)
    assert b"part:llm" not in stack.fields(aid)
    stack.start_worker(lease=SHORT_LEASE_SECONDS)
    bound = SHORT_LEASE_SECONDS + SLACK_SECONDS
    seconds = stack.wait_delivered(aid, bound + 15) - killed
    done = stack.assert_exactly_once(aid, n, LLM_CHECKS)
    assert stack.fields(aid)[b"part:cheap"] == cheap  # the cheap tier was not run (or written) again
    assert done["llm"]["cost"]["calls"] == n  # the rerun's calls; the lost ones were never answered
    assert len(openai_server.requests_for(SLOW_JUDGE)) == 2 * n
    assert stack.job_result(f"{aid}:cheap").job_try == 1
    result = stack.job_result(f"{aid}:llm")
    assert (result.success, result.job_try) == (True, 2), result
    print(f"LLM tier: done and delivered {seconds:.1f} s after SIGKILL (lease {SHORT_LEASE_SECONDS:.0f} s)")
    assert seconds < bound, stack.logs()


def test_a_stalled_worker_that_wakes_after_its_job_was_redone_changes_nothing(stack: Stack) -> None:
    """A worker frozen past its lease (a stopped VM, a starved node): another worker redoes the job; when the first
    wakes, it finishes its own run beside the result, and every write of it must be a no-op."""
    n = 6
    aid = stack.submit(n, CHEAP_CHECKS)
    stalled = stack.start_worker(lease=SHORT_LEASE_SECONDS)
    _freeze_when_started(stack, stalled, aid)
    stack.start_worker(lease=SHORT_LEASE_SECONDS)
    stack.wait_delivered(aid, SHORT_LEASE_SECONDS + SLACK_SECONDS)
    before = stack.fields(aid)
    assert stack.job_result(f"{aid}:cheap").job_try == 2
    stalled.send_signal(signal.SIGCONT)
    # the woken worker's own run ends and arq records its result (try 1) over the other's
    stack.wait_for("the woken worker finished its run", lambda: stack.job_result(f"{aid}:cheap").job_try == 1, 60)
    after = stack.fields(aid)
    for part in (b"meta", b"part:cheap", b"final", b"callback"):
        assert after[part] == before[part], part  # written once: the woken run lost every race and wrote nothing
    stack.assert_exactly_once(aid, n, CHEAP_CHECKS)


def _grace_period() -> int:
    from tests.deploy.support import manifest_docs

    (doc,) = [d for d in manifest_docs() if d.kind == "Deployment" and d.name == "trisk-worker"]
    return int(doc.body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])


def _terminate(proc: subprocess.Popen[bytes], seconds: float) -> float:
    """SIGTERM, as Kubernetes sends at a rollout or scale-down; seconds until the process exited (0 = cleanly)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=seconds) == 0
    return time.monotonic() - t0


def test_sigterm_mid_cheap_job_lets_the_job_finish_then_the_worker_exits(stack: Stack) -> None:
    n = 16
    aid = stack.submit(n, CHEAP_CHECKS)
    first = stack.start_worker()
    stack.wait_for("the cheap job started", lambda: b"started" in stack.fields(aid), 120)
    seconds = _terminate(first, _grace_period())
    fields = stack.fields(aid)
    assert b"final" in fields and fields.get(b"tail") == b"done"  # drained: the job ran to its end
    assert stack.job_result(f"{aid}:cheap").job_try == 1  # ...on this worker, once
    print(f"SIGTERM mid cheap job: the job finished and the worker exited {seconds:.1f} s later")
    # the callback job the tail queued waits for the next worker: a draining worker takes no new job
    assert b'"delivered"' not in fields.get(b"callback", b"")
    stack.start_worker()
    stack.wait_delivered(aid, SLACK_SECONDS)
    stack.assert_exactly_once(aid, n, CHEAP_CHECKS)


def test_sigterm_mid_llm_job_past_the_drain_leaves_it_for_the_next_worker(
    stack: Stack,
    openai_server: FakeOpenAIServer,  # noqa: F811
) -> None:
    """An LLM job longer than the drain is cancelled, put back on the queue untouched, and run again by another
    worker at once (no lease to wait for: arq deletes the in-progress key of a cancelled job)."""
    n, drain = 3, 2
    _stall_llm_calls(openai_server, n, 12)
    aid = stack.submit(n, LLM_CHECKS)
    first = stack.start_worker(drain=drain)
    stack.wait_for("every judge call sent", lambda: len(openai_server.requests_for(SLOW_JUDGE)) == n, 120)
    seconds = _terminate(first, drain + 15)
    fields = stack.fields(aid)
    assert b"part:llm" not in fields and b"final" not in fields and b"failed" not in fields  # nothing half-written
    assert stack.redis.zscore(stack.settings.redis.queue_name, f"{aid}:llm") is not None  # back on the queue
    assert not stack.redis.exists(f"arq:in-progress:{aid}:llm")
    print(f"SIGTERM mid LLM job: cancelled after the {drain} s drain, worker exited {seconds:.1f} s after SIGTERM")
    restarted = time.monotonic()
    stack.start_worker()
    took = stack.wait_delivered(aid, SLACK_SECONDS) - restarted
    done = stack.assert_exactly_once(aid, n, LLM_CHECKS)
    assert done["llm"]["cost"]["calls"] == n
    result = stack.job_result(f"{aid}:llm")
    assert (result.success, result.job_try) == (True, 2), result
    print(f"...and done {took:.1f} s after a fresh worker was started")
    assert took < LEASE_SECONDS  # taken at once, not after a lease
