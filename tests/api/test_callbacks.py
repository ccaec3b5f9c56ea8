"""Callbacks that cannot be turned against us: refused addresses at submit and at delivery, no redirects followed,
signed payloads a receiver can verify."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import ipaddress
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.callbacks import CallbackPolicy, CallbackRefused, check_address, check_url, sign, verify
from service.core.novelty import NoveltyIndex
from service.core.settings import Settings
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


def test_a_name_that_resolves_inside_is_refused_at_delivery(strict_client: tuple[Any, Settings]) -> None:
    client, settings = strict_client
    aid = client.post("/v1/assessments", json={**BODY, "callback_url": "https://localhost:9/hook"}).json()["id"]
    run_worker_burst(settings)
    cb = client.get(f"/v1/assessments/{aid}").json()["callback"]
    assert cb["status"] == "failed" and cb["attempts"] == 1  # not retried: the answer would be the same
    assert cb["last_error"].startswith("refused: callback address") and "loopback" in cb["last_error"]


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
