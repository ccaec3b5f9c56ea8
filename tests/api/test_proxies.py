"""Forwarded headers are believed only from TRISK_TRUSTED_PROXIES (issue 31): uvicorn's default trusted
X-Forwarded-For and X-Forwarded-Proto from 127.0.0.1, so anything on the host could pick its client address (and
rotate the failed-authentication limit away) and claim https."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
import uvicorn

from service.app.server import server_options
from service.platform.settings import SettingError, Settings

FORWARDED = b"x-forwarded-for: 203.0.113.9\r\nx-forwarded-proto: https\r\n"


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    """What the app is told about the request: its client address and scheme."""
    body = json.dumps({"client": scope["client"][0], "scheme": scope["scheme"]}).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}
    )
    await send({"type": "http.response.body", "body": body})


def _seen(settings: Settings) -> dict[str, str]:
    """One request from loopback with forwarded headers, through uvicorn as ``trisk serve`` configures it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_echo, log_level="warning", lifespan="off", **server_options(settings))
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        with socket.create_connection(sock.getsockname(), timeout=5) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n" + FORWARDED + b"connection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        return dict(json.loads(answer.partition(b"\r\n\r\n")[2]))
    finally:
        server.should_exit = True


def _with(settings: Settings, proxies: str) -> Settings:
    return replace(settings, api=replace(settings.api, trusted_proxies=proxies))


def test_forwarded_headers_are_ignored_by_default(test_settings: Settings) -> None:
    assert _seen(_with(test_settings, "")) == {"client": "127.0.0.1", "scheme": "http"}


@pytest.mark.parametrize("proxies", ["127.0.0.1", "127.0.0.0/8", "10.0.0.0/8, 127.0.0.1/32"])
def test_forwarded_headers_are_believed_from_a_trusted_proxy(test_settings: Settings, proxies: str) -> None:
    assert _seen(_with(test_settings, proxies)) == {"client": "203.0.113.9", "scheme": "https"}


def test_a_proxy_elsewhere_does_not_make_loopback_trusted(test_settings: Settings) -> None:
    assert _seen(_with(test_settings, "10.0.0.0/8")) == {"client": "127.0.0.1", "scheme": "http"}


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "proxy.internal", "*"])
def test_a_setting_that_is_not_an_address_or_network_stops_the_process(test_settings: Settings, bad: str) -> None:
    with pytest.raises(SettingError, match="TRISK_TRUSTED_PROXIES"):
        server_options(_with(test_settings, bad))


def test_trisk_serve_takes_its_proxy_options_from_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.cli import main
    from service.platform.settings import get_settings

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: seen.update(kw))
    monkeypatch.delenv("TRISK_TRUSTED_PROXIES", raising=False)
    get_settings.cache_clear()  # read again from the environment set here (and after the test: the fixture's)
    main(["serve", "--port", "1"])
    assert seen["proxy_headers"] is False and seen["forwarded_allow_ips"] == []
    monkeypatch.setenv("TRISK_TRUSTED_PROXIES", "10.1.2.3,192.168.0.0/16")
    get_settings.cache_clear()
    try:
        main(["serve", "--port", "1"])
    finally:
        monkeypatch.delenv("TRISK_TRUSTED_PROXIES")
        get_settings.cache_clear()
    assert seen["proxy_headers"] is True and seen["forwarded_allow_ips"] == ["10.1.2.3/32", "192.168.0.0/16"]
