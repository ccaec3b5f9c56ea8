"""The real ARQ worker in-process, in burst mode, against the test Redis; a callback receiver (API, worker tests)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from arq.worker import Worker

from service.platform.settings import Settings
from workers.lifecycle import shutdown, startup
from workers.settings import WorkerSettings, redis_settings


class StaticIndexes:
    """Novelty indexes already in memory (the tests' corpus slice), in place of the worker's lazy loader."""

    def __init__(self, indexes: dict[str, Any]) -> None:
        self.indexes = indexes

    async def get(self) -> dict[str, Any]:
        return self.indexes


def run_worker_burst(
    settings: Settings,
    *,
    max_jobs: int = 4,
    ctx: dict[str, Any] | None = None,
    functions: Sequence[Any] | None = None,
    max_burst_jobs: int = -1,
) -> Any:
    """Process every queued job (deferred retries included), or ``max_burst_jobs`` of them, then return the worker
    (its counters say how many jobs ran, failed and were retried). ``ctx`` overrides the worker's shared clients
    (fakes, counters): startup keeps whatever is already there; ``functions`` the worker's jobs (e.g. a shorter ARQ
    timeout)."""

    async def main() -> Worker:
        worker = Worker(
            functions=list(functions) if functions is not None else WorkerSettings.functions,
            redis_settings=redis_settings(settings.redis.url),
            queue_name=settings.redis.queue_name,
            on_startup=startup,
            on_shutdown=shutdown,
            on_job_end=WorkerSettings.on_job_end,
            burst=True,
            max_burst_jobs=max_burst_jobs,
            poll_delay=0.05,
            max_jobs=max_jobs,
            queue_read_limit=WorkerSettings.queue_read_limit,
            on_job_start=WorkerSettings.on_job_start,
            after_job_end=WorkerSettings.after_job_end,
            handle_signals=False,
            # the test process must not lower its own priority as a real worker does
            ctx={"settings": settings, "nice": False, **(ctx or {})},
        )
        try:
            await worker.main()
        finally:
            await worker.close()
        return worker

    return asyncio.run(main())


def run_job(settings: Settings, job: Any, *args: Any, job_try: int = 1, llm: Any = None) -> str:
    """One job function run directly, as ARQ would run its ``job_try``-th delivery, on a worker's shared clients (by
    default without an LLM provider)."""

    async def go() -> str:
        ctx: dict[str, Any] = {"settings": settings, "llm": llm, "nice": False, "job_try": job_try}
        await startup(ctx)
        try:
            return str(await job(ctx, *args))
        finally:
            await shutdown(ctx)

    return asyncio.run(go())


class BrokenClient:
    """An LLM client whose every call raises something no retry would mend (a bug, a broken dependency)."""

    def metered(self, meter: Any) -> BrokenClient:
        return self

    async def chat(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the judge client is broken")

    async def aclose(self) -> None:
        pass


class CallbackReceiver:
    """A callback endpoint answering a scripted status per request, recording what it received."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[dict[str, Any]] = []
        self.events: list[str | None] = []  # the Trisk-Event header of each POST
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                outer.events.append(self.headers.get("trisk-event"))
                outer.bodies.append(json.loads(body))
                status = outer.statuses[min(len(outer.bodies) - 1, len(outer.statuses) - 1)]
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@contextmanager
def live_worker_heartbeat(settings: Settings, index: Any) -> Iterator[None]:
    """A worker's heartbeat (service.state.worker_registry) on the settings' queue, beating in a thread of its own, for
    tests of the API that expect a live worker with the same index."""
    from redis.asyncio import Redis

    from service import __version__
    from service.state.worker_registry import Capabilities, Heartbeat, IndexState, JudgeConfig

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    caps = Capabilities(
        judges=JudgeConfig(llm_configured=False), index=IndexState(signatures={index.lang: index.signature_id})
    )

    async def begin() -> Heartbeat:
        beat = Heartbeat(Redis.from_url(settings.redis.url), settings.redis.queue_name, __version__, caps)
        await beat.start()
        return beat

    beat = asyncio.run_coroutine_threadsafe(begin(), loop).result(timeout=10)
    try:
        yield
    finally:

        async def end() -> None:
            await beat.stop()
            await beat.redis.aclose()

        asyncio.run_coroutine_threadsafe(end(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
