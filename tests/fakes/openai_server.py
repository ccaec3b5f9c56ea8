"""A local OpenAI-protocol chat server playing scripted judges, for tests and benchmarks (no network needed).

Behaviour is chosen by the model name (the part after the last "/"), unless a script was set for that model:

| model name      | answer                                                                 |
|-----------------|------------------------------------------------------------------------|
| score-<x>       | content "<x>" (e.g. score-87.5 -> "87.5")                              |
| hash-score      | a deterministic integer 40-100 from the prompt's hash; when the prompt |
|                 | asks for {"pali": ...} JSON, a fixed backtranslation in that form;     |
|                 | when it asks for error spans, {"errors": []}                           |
| junk            | prose with two numbers (unparseable)                                   |
| truncated       | content "8", finish_reason "length"                                   |
| ratelimited     | always 429 with Retry-After: 1                                         |
| error-500       | always HTTP 500                                                        |
| slow-<seconds>  | waits, then "75"                                                       |
| echo            | content = the last user message                                        |
| anything else   | 404 {"error": {"message": "model ... does not exist"}}                 |

``script(model, [Reply(...), ...])`` plays the replies in order (the last one repeats). Every request is
recorded; ``max_in_flight`` is the peak number of requests being handled at once (``max_in_flight_for(model)``
per model). A judge that is down is
simply a closed port: ``closed_port_url()``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "closed_port_url",
    "fake",
    "models_with_panel",
    "openai_server",
]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a chat completion with ``content``, or an error ``status`` (with optional headers)."""

    content: str | None = "90"
    status: int = 200
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw_body: bytes | None = None  # sent as-is instead of a completion (for malformed bodies)
    uses_max_tokens: bool = False  # usage says the answer took every token the request allowed (a costly provider)
    stream_bytes: int = 0  # a 200 whose body is this many bytes of one endless string, sent in 64 KiB chunks
    drip_seconds: float = 0.0  # the completion sent one byte every this many seconds


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    model: str
    messages: list[dict[str, Any]]
    temperature: float | None
    max_tokens: int | None
    authorization: str | None
    received_at: float

    @property
    def user_text(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.messages if m.get("role") == "user")


def models_with_panel(folder: Path, panel: dict[str, Any]) -> Path:
    """A models folder (``TRISK_MODELS_DIR``) with the repo's models and one more judge panel, named as in ``panel``."""
    from service.platform.settings import REPO_ROOT

    models = folder / "models"
    models.mkdir()
    for sub in ("risk", "length", "critical", "embeddings"):
        (models / sub).symlink_to(REPO_ROOT / "models" / sub)
    (models / "panels").mkdir()
    (models / "panels" / f"{panel['name']}.json").write_text(json.dumps(panel))
    return models


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (connection refused), i.e. a judge that is down."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class FakeOpenAIServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._in_flight_by_model: dict[str, int] = {}
        self._max_in_flight_by_model: dict[str, int] = {}
        self._scripts: dict[str, list[Reply]] = {}
        self._served: dict[str, int] = {}
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- control (called from the test thread) ---

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, model: str, replies: Sequence[Reply]) -> None:
        if not replies:
            raise ValueError("a script needs at least one reply")
        self._scripts[model] = list(replies)
        self._served[model] = 0

    def reset(self) -> None:
        self.requests.clear()
        self._scripts.clear()
        self._served.clear()
        self.max_in_flight = self.in_flight  # requests abandoned by an earlier test may still be sleeping
        self._max_in_flight_by_model = dict(self._in_flight_by_model)

    def max_in_flight_for(self, model: str) -> int:
        """Peak concurrent requests for one model since the last reset (immune to other tests' leftovers)."""
        return self._max_in_flight_by_model.get(model, 0)

    def requests_for(self, model: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.model == model]

    def start(self) -> FakeOpenAIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            interface="asgi3",
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=30,
            backlog=4096,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- the ASGI app (runs in the server thread's event loop) ---

    def _reply_for(self, model: str, messages: list[dict[str, Any]]) -> Reply:
        script = self._scripts.get(model)
        if script is not None:
            served = self._served[model]
            self._served[model] = served + 1
            return script[min(served, len(script) - 1)]
        name = model.rsplit("/", 1)[-1]
        if name.startswith("score-"):
            return Reply(name.removeprefix("score-"))
        if name == "hash-score":
            if any('"pali"' in str(m.get("content", "")) for m in messages):
                return Reply(json.dumps({"pali": "evaṃ me sutaṃ ekaṃ samayaṃ bhagavā"}, ensure_ascii=False))
            if any('{"errors": []}' in str(m.get("content", "")) for m in messages):
                return Reply('{"errors": []}')  # an error-span prompt: no errors found
            digest = hashlib.sha256(json.dumps(messages).encode()).digest()
            return Reply(str(40 + digest[0] % 61))
        if name == "junk":
            return Reply("Overall a good translation; I would give it 80 or maybe 85.")
        if name == "truncated":
            return Reply("8", finish_reason="length")
        if name == "ratelimited":
            return Reply(None, status=429, headers={"retry-after": "1"})
        if name == "error-500":
            return Reply(None, status=500)
        if name.startswith("slow-"):
            return Reply("75", delay=float(name.removeprefix("slow-")))
        if name == "echo":
            user = [m for m in messages if m.get("role") == "user"]
            return Reply(str(user[-1].get("content", "")) if user else "")
        return Reply(
            None, status=404, raw_body=json.dumps({"error": {"message": f"model {model} does not exist"}}).encode()
        )

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            model = str(json.loads(body).get("model", ""))
        except (ValueError, AttributeError):
            model = ""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        count = self._in_flight_by_model.get(model, 0) + 1
        self._in_flight_by_model[model] = count
        self._max_in_flight_by_model[model] = max(self._max_in_flight_by_model.get(model, 0), count)
        try:
            await self._handle(scope, body, send)
        finally:
            self.in_flight -= 1
            self._in_flight_by_model[model] -= 1

    async def _handle(self, scope: dict[str, Any], body: bytes, send: Any) -> None:
        if scope["method"] != "POST" or not scope["path"].endswith("/chat/completions"):
            await _send(send, 404, {"error": {"message": "not found"}})
            return
        try:
            request = json.loads(body)
        except ValueError:
            await _send(send, 400, {"error": {"message": "invalid JSON"}})
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        model = str(request.get("model", ""))
        messages = list(request.get("messages", []))
        self.requests.append(
            RecordedRequest(
                path=scope["path"],
                model=model,
                messages=messages,
                temperature=request.get("temperature"),
                max_tokens=request.get("max_tokens"),
                authorization=headers.get("authorization"),
                received_at=time.monotonic(),
            )
        )
        reply = self._reply_for(model, messages)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.raw_body is not None:
            await _send(send, reply.status, reply.raw_body, reply.headers)
            return
        if reply.status != 200:
            await _send(send, reply.status, {"error": {"message": f"scripted HTTP {reply.status}"}}, reply.headers)
            return
        if reply.stream_bytes:
            await _stream(send, reply.stream_bytes)
            return
        prompt_chars = sum(len(str(m.get("content", ""))) for m in messages)
        completion_tokens = max(1, len(reply.content or "") // 4)
        if reply.uses_max_tokens and request.get("max_tokens"):
            completion_tokens = int(request["max_tokens"])
        completion = {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_chars // 4 + completion_tokens,
            },
            "system_fingerprint": "fake",
        }
        if reply.drip_seconds:
            await _drip(send, json.dumps(completion).encode(), reply.drip_seconds)
            return
        await _send(send, 200, completion, reply.headers)


async def _stream(send: Any, size: int) -> None:
    """A 200 whose body never closes its JSON string: ``size`` bytes in 64 KiB chunks (a client must stop early)."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    chunk, sent = b'{"choices": [{"message": {"content": "' + b"x" * (65536 - 40), 0
    while sent < size:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        sent += len(chunk)
        chunk = b"x" * 65536
    await send({"type": "http.response.body", "body": b""})


async def _drip(send: Any, body: bytes, seconds: float) -> None:
    """The answer one byte at a time, ``seconds`` apart: no single read ever waits long, the whole takes ages."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for i in range(len(body)):
        await send({"type": "http.response.body", "body": body[i : i + 1], "more_body": i + 1 < len(body)})
        await asyncio.sleep(seconds)


async def _send(send: Any, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="session")
def openai_server() -> Iterator[FakeOpenAIServer]:
    """One fake server per test session; tests call ``reset()`` (or use a function fixture that does)."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def fake(openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    """The session's fake server, reset before and after the test (scripts and recorded requests)."""
    openai_server.reset()
    yield openai_server
    openai_server.reset()
