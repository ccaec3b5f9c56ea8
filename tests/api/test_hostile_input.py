"""Hostile input gets a clear 4xx problem+json and no traceback in the log: JSON nested past any sense, an escaped
NUL in a text (PostgreSQL refuses it in a text column), and a request head of megabytes (bounded by the server)."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from tests.conftest import issue_test_key, keyed

ROUTES = [
    "/v1/assessments",
    "/v1/batches",
    "/v1/novelty",
    "/v1/poller/evaluations",
    "/v1/poller/agreement",
    "/v1/mata/grades",
    "/v1/mata/agreement",
    "/v1/mata/mcq-runs",
    "/v1/personas",
    "/v1/review/claims",
    "/v1/keys",
]


@pytest.fixture()
def client(sn12_index: NoveltyIndex, test_settings: Settings) -> Iterator[Any]:
    settings = replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        yield keyed(tc, issue_test_key(settings))


def _nested(depth: int) -> bytes:
    return b'{"source": {"text": "x", "lang": "pli", "ref": ' + b"[" * depth + b"]" * depth + b"}}"


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_json_is_a_400_without_a_traceback(
    client: Any, caplog: pytest.LogCaptureFixture, path: str, depth: int
) -> None:
    caplog.set_level(logging.INFO)
    for body in (_nested(depth), b"[" * depth + b"]" * depth, b'{"a": ' * depth + b"1" + b"}" * depth):
        r = client.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400, (path, r.status_code, r.text[:300])
        assert r.headers["content-type"].startswith("application/problem+json")
    assert not [rec for rec in caplog.records if rec.exc_info or rec.levelno >= logging.ERROR], caplog.text[-2000:]


PERSONA = {"author": "A", "basic_information": "b", "experience_and_views": "e", "critics_comments": "c"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/personas", {**PERSONA, "basic_information": "born in\u0000 1949"}),
        ("/v1/assessments", {"source": {"text": "ev\u0000", "lang": "pli"}, "candidates": [{"id": "a", "text": "t"}]}),
        ("/v1/keys", {"name": "k\u0000", "scopes": ["read"]}),
    ],
)
def test_an_escaped_nul_is_a_422_on_either_engine(
    sn12_index: NoveltyIndex, test_settings: Settings, durable_settings: Any, path: str, body: dict[str, Any]
) -> None:
    """The finding: an escaped NUL was accepted in texts; PostgreSQL refuses it in a text column, so there the write
    failed after the request was taken (a 500). Refused before anything is stored, on both engines."""
    settings = replace(test_settings, durable=durable_settings)
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        client = keyed(tc, issue_test_key(settings))
        r = client.post(path, json=body)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json") and "NUL" in r.json()["detail"]
        # a literal backslash and "u0000" is text, not a NUL
        fine = client.post("/v1/personas", json={**PERSONA, "critics_comments": "write \\u0000 to end a C string"})
        assert fine.status_code == 201, fine.text


def _serve(app: Any, protocol: Any) -> tuple[Any, int]:
    import socket
    import threading
    import time

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=protocol, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    return server, sock.getsockname()[1]


def _exchange(port: int, head: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        with contextlib.suppress(OSError):  # the server closed before taking it all in: what it should do
            conn.sendall(head)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def test_a_10_mb_request_header_is_a_431_from_the_server() -> None:
    """The finding: a 10 MB request header was accepted (uvicorn's httptools protocol buffers a head of any size)."""
    from service.app.server import bounded_http_protocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):  # the whole body taken in, as a route does
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    server, port = _serve(app, bounded_http_protocol(65_536))
    try:
        big = b"GET / HTTP/1.1\r\nhost: x\r\nx-junk: " + b"a" * (10 << 20) + b"\r\n\r\n"
        answer = _exchange(port, big)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"application/problem+json" in answer and b"TRISK_MAX_HEADER_BYTES" in answer
        fine = b"GET / HTTP/1.1\r\nhost: x\r\nx-fine: " + b"a" * 30_000 + b"\r\nconnection: close\r\n\r\n"
        ok = _exchange(port, fine)
        assert ok.startswith(b"HTTP/1.1 200 ") and ok.endswith(b"ok")
        # a small head with a large body in the same read (an NDJSON batch of 200 KB): the body is not the head
        body = b"x" * 200_000
        post = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body
        ok = _exchange(port, post)
        assert ok.startswith(b"HTTP/1.1 200 "), ok[:200]
    finally:
        server.should_exit = True


def test_trisk_serve_runs_the_bounded_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    from service.cli import main

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    main(["serve", "--port", "1"])
    assert seen["http"].__name__ == "BoundedHttpToolsProtocol"


@pytest.mark.parametrize("byte", [b"\x1b", b"\x7f"], ids=["ESC", "DEL"])
def test_a_control_byte_in_a_header_is_a_400_problem_from_the_server(byte: bytes) -> None:
    """Issue 31: an ESC or DEL byte in a header got uvicorn's plain-text 400; the server answers problem+json too."""
    from service.app.server import bounded_http_protocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    server, port = _serve(app, bounded_http_protocol(65_536))
    try:
        answer = _exchange(port, b"GET / HTTP/1.1\r\nhost: x\r\nx-bad: a" + byte + b"b\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert b"content-type: application/problem+json" in head.lower()
        import json

        problem = json.loads(body)
        assert problem["status"] == 400 and problem["detail"].startswith("the request head is malformed")
    finally:
        server.should_exit = True


BODY_ROUTES = [
    ("/v1/assessments", {"source": {"text": "evaṃ me sutaṃ", "lang": "pli"}, "candidates": [{"id": "a", "text": "t"}]}),
    ("/v1/batches", {"items": []}),
    ("/v1/novelty", {"text": "evaṃ me sutaṃ", "lang": "pli"}),
    ("/v1/personas", PERSONA),
    ("/v1/keys", {"name": "k", "scopes": ["read"]}),
    ("/v1/review/claims", {"n": 1}),
]
OTHER_TYPES = ["text/plain", "application/xml", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"]


@pytest.mark.parametrize(("path", "body"), BODY_ROUTES, ids=[p for p, _ in BODY_ROUTES])
@pytest.mark.parametrize("media", OTHER_TYPES, ids=["text", "xml", "form", "multipart"])
def test_a_json_route_takes_only_application_json(client: Any, path: str, body: dict[str, Any], media: str) -> None:
    """Issue 31: JSON sent as text/plain (what a cross-site form may post without asking), XML, a form or multipart
    was parsed as JSON. Now 415 problem+json naming the media type the route takes; nothing is written."""
    import json

    raw = json.dumps(body).encode()
    r = client.post(path, content=raw, headers={"content-type": media})
    assert r.status_code == 415, (path, media, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["expected"] == "application/json" and "application/json" in r.json()["detail"]
    assert client.post(path, content=raw).status_code == 415  # no Content-Type at all
    ok = client.post(path, content=raw, headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code != 415, ok.text


def test_the_ndjson_route_takes_only_ndjson(client: Any) -> None:
    import json

    line = json.dumps(BODY_ROUTES[0][1]).encode()
    for media in ("application/json", "text/plain"):
        r = client.post("/v1/batches/ndjson", content=line, headers={"content-type": media})
        assert r.status_code == 415 and r.json()["expected"] == "application/x-ndjson", r.text
    assert (
        client.post("/v1/batches/ndjson", content=line, headers={"content-type": "application/x-ndjson"}).status_code
        == 202
    )
