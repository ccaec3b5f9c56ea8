"""Callbacks that cannot be turned against us: refused addresses at submit and at delivery, no redirects followed,
signed payloads a receiver can verify."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import ipaddress
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.callbacks import (
    CallbackPolicy,
    CallbackRefused,
    check_address,
    check_url,
    post_callback,
    sign,
    verify,
)
from service.platform.settings import Settings
from tests.conftest import issue_test_key, keyed
from tests.worker_support import run_worker_burst

BODY = {
    "source": {"text": "Evaṃ me sutaṃ. Ekaṃ samayaṃ bhagavā sāvatthiyaṃ viharati.", "lang": "pli"},
    "candidates": [{"id": "a", "text": "Thus have I heard."}, {"id": "b", "text": "So I heard."}],
    "checks": ["hard_flags"],
}
STRICT = CallbackPolicy()  # the default: https only, public addresses only


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped IPv6 is the IPv4 address
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("10.1.2.3", "private"),
        ("192.168.0.9", "private"),
        ("172.16.5.4", "private"),
        ("fd00::1", "private"),
        ("100.64.0.1", "shared"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("93.184.216.34", None),
        ("2606:4700::6810:84e5", None),
    ],
)
def test_address_policy(address: str, refused: str | None) -> None:
    ip = ipaddress.ip_address(address)
    if refused is None:
        check_address(ip, STRICT)
    else:
        with pytest.raises(CallbackRefused, match=refused):
            check_address(ip, STRICT)


def test_allow_list_admits_a_private_network() -> None:
    policy = CallbackPolicy.from_settings(False, "10.0.0.0/8, 127.0.0.1/32", 5.0)
    check_address(ipaddress.ip_address("10.9.9.9"), policy)
    check_address(ipaddress.ip_address("127.0.0.1"), policy)
    with pytest.raises(CallbackRefused):
        check_address(ipaddress.ip_address("127.0.0.2"), policy)


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://example.org/hook", "https"),
        ("ftp://example.org/hook", "https"),
        ("https://127.0.0.1:6379/", "loopback"),
        ("https://169.254.169.254/latest/meta-data/", "link-local"),
        ("https://[::ffff:127.0.0.1]/x", "loopback"),
        ("https://user:pw@example.org/", "credentials"),
        ("https:///nohost", "host"),
    ],
)
def test_submit_refuses_bad_callback_urls(url: str, needle: str) -> None:
    with pytest.raises(CallbackRefused, match=needle):
        check_url(url, STRICT)


@pytest.fixture()
def strict_client(sn12_index: NoveltyIndex, test_settings: Settings) -> Iterator[tuple[Any, Settings]]:
    """The app and a worker under the default policy (no http, nothing private)."""
    settings = replace(
        test_settings,
        redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"),
        jobs=replace(test_settings.jobs, callback_allow_http=False, callback_allow_networks=""),
    )
    with TestClient(
        app=create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    ) as tc:
        yield keyed(tc, issue_test_key(settings)), settings


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379/", "https://127.0.0.1:6379/", "https://169.254.169.254/latest/meta-data/"]
)
def test_the_api_refuses_internal_callbacks_and_writes_nothing(strict_client: tuple[Any, Settings], url: str) -> None:
    client, _ = strict_client
    r = client.post("/v1/assessments", json={**BODY, "callback_url": url})
    assert r.status_code == 422 and r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == "callback_url"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("https://localhost:9/hook", "loopback"),  # a name that resolves inside: refused now, not only at delivery
        ("https://metadata.test/latest", "link-local"),
        ("https://2130706433/hook", "loopback"),  # 127.0.0.1 as one number
        ("https://0x7f000001/hook", "loopback"),  # ... in hex
        ("https://127.1/hook", "loopback"),  # ... in the short dotted form
        ("https://0177.0.0.1/hook", "loopback"),  # ... in octal
        ("https://nowhere.test/hook", "does not resolve"),
    ],
)
def test_submission_resolves_the_callback_host_and_refuses_internal_ones(
    strict_client: tuple[Any, Settings], _loopback_resolver: dict[str, list[str]], url: str, needle: str
) -> None:
    client, _ = strict_client
    _loopback_resolver["metadata.test"] = ["169.254.169.254"]
    r = client.post("/v1/assessments", json={**BODY, "callback_url": url})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == "callback_url" and needle in r.json()["detail"]
    batch = client.post("/v1/batches", json={"items": [BODY, {**BODY, "callback_url": url}]})
    assert batch.status_code == 422 and batch.json()["field"] == "items[1].callback_url"


UNENCODABLE = ["https://a..b/cb", f"https://{'a' * 64}.example/cb", f"https://{'é' * 70}.example/cb"]


@pytest.mark.parametrize("url", UNENCODABLE, ids=["empty-label", "64-char-label", "long-non-ascii-label"])
def test_a_host_that_cannot_be_encoded_is_refused_with_the_reason(
    strict_client: tuple[Any, Settings], url: str
) -> None:
    """The finding: these answered 500 (getaddrinfo's IDNA codec raised UnicodeError). Now a 422 naming the field and
    the reason, on every route that takes callback URLs, before any lookup."""
    client, _ = strict_client
    with pytest.raises(CallbackRefused, match="cannot be encoded as a DNS name: label empty or too long"):
        check_url(url, STRICT)
    single = client.post("/v1/assessments", json={**BODY, "callback_url": url})
    batch = client.post("/v1/batches", json={"items": [BODY, {**BODY, "callback_url": url}]})
    lines = "\n".join(json.dumps(item) for item in (BODY, {**BODY, "callback_url": url}))
    ndjson = client.post("/v1/batches/ndjson", content=lines.encode(), headers={"content-type": "application/x-ndjson"})
    for r, field in ((single, "callback_url"), (batch, "items[1].callback_url"), (ndjson, "items[1].callback_url")):
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["field"] == field and "cannot be encoded as a DNS name" in r.json()["detail"]


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "127.1", "0x7f.1"])
def test_numeric_shorthand_hosts_are_addresses(host: str) -> None:
    with pytest.raises(CallbackRefused, match="loopback"):
        check_url(f"https://{host}/hook", STRICT)


def test_a_name_rebound_after_submission_is_refused_at_delivery(
    strict_client: tuple[Any, Settings], _loopback_resolver: dict[str, list[str]]
) -> None:
    client, settings = strict_client
    _loopback_resolver["rebinding.test"] = ["93.184.216.34"]  # public when the API looks (nothing is sent there)
    aid = client.post("/v1/assessments", json={**BODY, "callback_url": "https://rebinding.test/hook"}).json()["id"]
    _loopback_resolver["rebinding.test"] = ["127.0.0.1"]  # and inside when the worker does
    run_worker_burst(settings)
    cb = client.get(f"/v1/assessments/{aid}").json()["callback"]
    assert cb["status"] == "failed" and cb["attempts"] == 1  # not retried: the answer would be the same
    assert cb["last_error"].startswith("refused: callback address") and "loopback" in cb["last_error"]


class RawReceiver:
    """A loopback receiver that answers by a script of raw bytes: ``stream`` (a 200 and then a body without end, up
    to ``limit`` bytes) or ``drip`` (a whole answer, one byte every ``every`` seconds). Counts what it got out."""

    def __init__(self, mode: str, *, limit: int = 64 << 20, every: float = 0.05) -> None:
        self.mode, self.limit, self.every = mode, limit, every
        self.sent = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook?token=receiver-secret"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            length = int(next(line.split(b":")[1] for line in lines if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            try:
                if self.mode == "stream":
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1099511627776\r\n\r\n")
                    chunk = b"x" * 65536
                    while self.sent < self.limit:
                        conn.sendall(chunk)
                        self.sent += len(chunk)
                else:
                    for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok":
                        conn.sendall(bytes([byte]))
                        self.sent += 1
                        time.sleep(self.every)
            except OSError:
                pass  # the client stopped listening: what it should do

    def close(self) -> None:
        self.sock.close()


LOOPBACK = CallbackPolicy.from_settings(True, "127.0.0.0/8", 1.0)


@pytest.mark.parametrize("mode", ["stream", "drip"])
async def test_a_delivery_reads_a_few_kib_and_ends_at_one_deadline(mode: str) -> None:
    """The finding: the worker read the receiver's whole answer (1.5 GB took a worker from 367 MB to 3.36 GB), and
    httpx's timeout is per read, so a receiver dripping a byte at a time held it for as long as it liked."""
    receiver = RawReceiver(mode)
    started = time.monotonic()
    try:
        async with httpx.AsyncClient() as http:
            try:
                answer = await post_callback(http, receiver.url, b"{}", secret=b"s", policy=LOOPBACK)
            except httpx.ReadTimeout:
                answer = None
    finally:
        receiver.close()
    elapsed = time.monotonic() - started
    if mode == "stream":
        assert answer is not None and answer.status_code == 200  # the receiver said yes: delivered
        assert len(answer.content) <= 4096 and answer.truncated  # ANSWER_BYTES
    else:
        assert answer is None  # the answer was not whole within the deadline
    assert elapsed < 2.5  # one deadline for the delivery (1 s here), not one per read


def test_a_dripping_receiver_fails_the_delivery_visibly(local_client: tuple[Any, Settings]) -> None:
    client, settings = local_client
    receiver = RawReceiver("drip", every=0.2)
    try:
        aid = client.post("/v1/assessments", json={**BODY, "callback_url": receiver.url}).json()["id"]
        jobs = replace(settings.jobs, callback_max_tries=1, callback_timeout_seconds=1.0)
        started = time.monotonic()
        run_worker_burst(replace(settings, jobs=jobs))
        elapsed = time.monotonic() - started
    finally:
        receiver.close()
    cb = client.get(f"/v1/assessments/{aid}").json()["callback"]
    assert cb["status"] == "failed" and "ReadTimeout" in cb["last_error"]
    assert receiver.sent < 20 and elapsed < 15  # the whole answer would have taken 8 s of the worker's time


class Receiver:
    def __init__(self, status: int = 200, location: str | None = None) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(status)
                if location:
                    self.send_header("location", location)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture()
def local_client(sn12_index: NoveltyIndex, test_settings: Settings) -> Iterator[tuple[Any, Settings]]:
    """The tests' policy: http to this machine allowed (the receivers below listen on 127.0.0.1)."""
    settings = replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))
    with TestClient(
        app=create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    ) as tc:
        yield keyed(tc, issue_test_key(settings)), settings


def test_payloads_are_signed_with_the_tenants_secret(local_client: tuple[Any, Settings]) -> None:
    client, settings = local_client
    receiver = Receiver()
    try:
        aid = client.post("/v1/assessments", json={**BODY, "callback_url": receiver.url}).json()["id"]
        run_worker_burst(settings)
    finally:
        receiver.close()
    headers, body = receiver.requests[0]
    secret = client.get("/v1/callbacks/secret").json()["secret"].encode()
    assert json.loads(body)["id"] == aid
    assert headers["host"] == receiver.url.split("/")[2]
    assert verify(secret, headers["trisk-signature"], body)
    assert not verify(secret, headers["trisk-signature"], body.replace(b'"done"', b'"fine"'))  # tampered
    assert not verify(b"another tenant's secret", headers["trisk-signature"], body)
    stamp = int(headers["trisk-signature"].split(",")[0].removeprefix("t="))
    assert not verify(secret, headers["trisk-signature"], body, now=stamp + 3600)  # a stale replay
    assert sign(secret, stamp, body) == headers["trisk-signature"]
    # what the README tells a receiver to compute, written out independently of the service's own helper
    expected = hmac.new(secret, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert headers["trisk-signature"] == f"t={stamp},v1={expected}"


def test_redirects_are_not_followed(local_client: tuple[Any, Settings]) -> None:
    client, settings = local_client
    target = Receiver()
    bouncer = Receiver(status=302, location=target.url)
    try:
        aid = client.post("/v1/assessments", json={**BODY, "callback_url": bouncer.url}).json()["id"]
        run_worker_burst(replace(settings, jobs=replace(settings.jobs, callback_max_tries=1)))
    finally:
        bouncer.close()
        target.close()
    cb = client.get(f"/v1/assessments/{aid}").json()["callback"]
    assert cb["status"] == "failed" and "302" in cb["last_error"]
    assert len(bouncer.requests) == 1 and target.requests == []


def test_a_sealed_secret_signs_the_callbacks(sn12_index: NoveltyIndex, test_settings: Settings) -> None:
    """With TRISK_SECRET_KEYS set the API hands out, and the worker signs with, the secret it keeps sealed."""
    from service.platform.sealing import new_key_spec

    settings = replace(
        test_settings,
        redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"),
        durable=replace(test_settings.durable, secret_keys=new_key_spec("t1")),
    )
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    receiver = Receiver()
    try:
        with TestClient(app=app) as tc:
            client = keyed(tc, issue_test_key(settings, tenant=f"test-sealed-{uuid.uuid4().hex[:8]}"))
            secret = client.get("/v1/callbacks/secret").json()["secret"].encode()
            client.post("/v1/assessments", json={**BODY, "callback_url": receiver.url})
            run_worker_burst(settings)
    finally:
        receiver.close()
    headers, body = receiver.requests[0]
    assert verify(secret, headers["trisk-signature"], body)
