"""Callbacks that cannot be turned against us: an address policy checked at submit and at delivery, a connection to
the checked address only, no redirects, small timeouts, and an HMAC signature receivers can verify.

The policy: ``https`` only (``http`` too where ``TRISK_CALLBACK_ALLOW_HTTP`` says so); the host is resolved at
submission (``check_url_resolves``: a refused or unknown name is a 422 then) and once more at delivery, and every
address it resolves to must be public: loopback, private (RFC 1918, ULA), link-local (the cloud
metadata address 169.254.169.254 among them), shared (100.64/10), multicast, reserved and unspecified addresses are
refused unless ``TRISK_CALLBACK_ALLOW_NETWORKS`` lists a network that contains them. The request then goes to the
checked address itself (the Host header and TLS server name carry the original host), so a second lookup cannot
rebind the name to an internal address between the check and the connection. Numeric shorthands that
``inet_aton`` reads (``2130706433``, ``0x7f000001``, ``127.1``) are addresses, checked as such.

Bounded: one deadline (``TRISK_CALLBACK_TIMEOUT_SECONDS``) for the whole delivery, resolution included, and at most
``ANSWER_BYTES`` of the receiver's answer read (only its status matters): a receiver that drips or streams without
end costs a worker that long and that much, no more (``service.platform.bounded_http``).

Signature (as webhook providers do it): header ``Trisk-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`` where the
HMAC key is the tenant's callback secret and the message is ``f"{t}.".encode() + body``. A receiver recomputes it
over the raw body, compares in constant time, and rejects a ``t`` too far from its clock (replays).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from service.platform.bounded_http import BoundedResponse, apost
from service.platform.errors import InputError, Unavailable
from service.platform.networks import IPNetwork, parse_networks

__all__ = [
    "ANSWER_BYTES",
    "SIGNATURE_HEADER",
    "CallbackPolicy",
    "CallbackRefused",
    "check_address",
    "check_url",
    "check_url_resolves",
    "post_callback",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "Trisk-Signature"
# of the receiver's answer only the status is used; a few KiB say enough about a failure
ANSWER_BYTES = 4096
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# not covered by the ipaddress module's is_private on every Python version
_SHARED = ipaddress.ip_network("100.64.0.0/10")


class CallbackRefused(InputError):
    """A callback URL or the address it resolves to is not allowed by the policy."""


@dataclass(frozen=True)
class CallbackPolicy:
    allow_http: bool = False
    allow_networks: tuple[IPNetwork, ...] = ()
    timeout_seconds: float = 5.0

    @classmethod
    def from_settings(cls, allow_http: bool, allow_networks: str, timeout_seconds: float) -> CallbackPolicy:
        nets = parse_networks(allow_networks, "TRISK_CALLBACK_ALLOW_NETWORKS")
        return cls(allow_http=allow_http, allow_networks=nets, timeout_seconds=timeout_seconds)


def _unmapped(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip


def check_address(ip: IPAddress, policy: CallbackPolicy) -> None:
    """Refuse an address that is not public, unless the policy's allow-list admits it."""
    ip = _unmapped(ip)
    if any(ip in net for net in policy.allow_networks):
        return
    kinds = [
        name
        # the most specific name first: 0.0.0.0 and 127.0.0.1 also count as "private" in the ipaddress module
        for name, hit in (
            ("unspecified", ip.is_unspecified),
            ("loopback", ip.is_loopback),
            ("link-local (cloud metadata lives here)", ip.is_link_local),
            ("multicast", ip.is_multicast),
            ("shared address space", isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED),
            ("private", ip.is_private),
            ("reserved", ip.is_reserved),
        )
        if hit
    ]
    if kinds:
        raise CallbackRefused(f"callback address {ip} is {kinds[0]}; only public addresses are called back")


def _literal(host: str) -> IPAddress | None:
    """The address a host names literally: standard forms, and the IPv4 shorthands the C resolver reads as numbers
    (``2130706433``, ``0x7f000001``, ``127.1``, ``0177.0.0.1``), which must not pass for names."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(ch in "0123456789abcdefxABCDEFX." for ch in host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def check_url(url: str, policy: CallbackPolicy) -> tuple[str, str, int]:
    """The URL's (scheme, host, port) when its form is allowed (scheme, no credentials, and a literal address must be
    public); names are resolved and checked by ``check_url_resolves`` (submission) and at delivery."""
    parts = urlsplit(url)
    allowed = ("https", "http") if policy.allow_http else ("https",)
    if parts.scheme not in allowed:
        raise CallbackRefused(
            f"callback_url must use {' or '.join(allowed)}"
            + ("" if policy.allow_http else " (TRISK_CALLBACK_ALLOW_HTTP)")
        )
    if not parts.hostname:
        raise CallbackRefused("callback_url needs a host")
    if parts.username or parts.password:
        raise CallbackRefused("callback_url must not carry credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise CallbackRefused(f"callback_url has an invalid port: {exc}") from exc
    literal = _literal(parts.hostname)
    if literal is not None:
        check_address(literal, policy)
    else:
        _encodable(parts.hostname)
    return parts.scheme, parts.hostname, port


def _encodable(host: str) -> None:
    """Refuse a name the resolver cannot be asked about: ``getaddrinfo`` encodes it with the same IDNA codec and
    raises UnicodeError (a 500 before this check) for an empty label (``a..b``), a label over 63 octets, or a
    non-ASCII label whose punycode is over-long."""
    try:
        host.encode("idna")
    except UnicodeError as exc:
        reason = exc.__cause__ or exc  # the codec wraps the reason ("label empty or too long")
        raise CallbackRefused(f"callback_url's host cannot be encoded as a DNS name: {reason}") from exc


async def _resolve(host: str, port: int) -> list[IPAddress]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0]) for info in infos]


async def _checked_addresses(host: str, port: int, policy: CallbackPolicy) -> list[IPAddress]:
    """Every address ``host`` resolves to, each allowed by the policy (a name must not hide an internal address
    behind a public one); a literal or shorthand address is itself."""
    literal = _literal(host)
    addresses = [literal] if literal is not None else await _resolve(host, port)
    for ip in addresses:
        check_address(ip, policy)
    return addresses


# resolver answers that say the name does not exist (anything else is the resolver's trouble, not the caller's)
_NO_SUCH_NAME = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA", "EAI_ADDRFAMILY") if hasattr(socket, n)}


async def check_url_resolves(urls: Sequence[tuple[str, str]], policy: CallbackPolicy) -> None:
    """At submission, for ``(field, url)`` pairs: the form of every URL (``check_url``), then each distinct host
    resolved, concurrently and within the policy's timeout, and refused (422 naming the field) when it names an
    address the policy refuses or does not exist. A resolver that fails or is too slow is a 503 to retry."""
    hosts: dict[tuple[str, int], str] = {}
    for field, url in urls:
        _, host, port = check_url(url, policy)
        hosts.setdefault((host, port), field)

    async def one(host: str, port: int, field: str) -> None:
        try:
            await _checked_addresses(host, port, policy)
        except CallbackRefused as exc:
            raise CallbackRefused(f"{field}: {exc.detail}", extra={"field": field}) from exc
        except socket.gaierror as exc:
            if exc.errno in _NO_SUCH_NAME:
                raise CallbackRefused(f"{field}: host {host} does not resolve", extra={"field": field}) from exc
            raise Unavailable(f"could not resolve callback host {host}: {exc.strerror}") from exc

    try:
        async with asyncio.timeout(policy.timeout_seconds):
            await asyncio.gather(*(one(host, port, field) for (host, port), field in hosts.items()))
    except TimeoutError as exc:
        raise Unavailable(f"callback hosts not resolved within {policy.timeout_seconds:g} s") from exc


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The signature header's value for a body sent at ``timestamp``."""
    mac = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: bytes, header: str, body: bytes, *, tolerance_seconds: int = 300, now: float | None = None) -> bool:
    """What a receiver does: recompute the HMAC over the raw body, compare in constant time, refuse stale stamps."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        stamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - stamp) > tolerance_seconds:
        return False
    expected = sign(secret, stamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


async def post_callback(
    http: httpx.AsyncClient,
    url: str,
    body: bytes,
    *,
    secret: bytes,
    policy: CallbackPolicy,
    extra_headers: Sequence[tuple[str, str]] = (),
) -> BoundedResponse:
    """POST ``body`` to ``url`` under the policy: resolve once, check every address, connect to the checked one; all
    of it within the policy's timeout, reading at most ``ANSWER_BYTES`` of the answer."""
    started = time.monotonic()
    scheme, host, port = check_url(url, policy)
    try:
        async with asyncio.timeout(policy.timeout_seconds):
            addresses = await _checked_addresses(host, port, policy)
    except socket.gaierror as exc:
        raise httpx.ConnectError(f"cannot resolve {host}: {exc}") from exc
    except TimeoutError as exc:
        raise httpx.ConnectTimeout(f"cannot resolve {host} within {policy.timeout_seconds:g} s") from exc
    ip = addresses[0]
    parts = urlsplit(url)
    netloc = f"[{ip}]:{port}" if isinstance(ip, ipaddress.IPv6Address) else f"{ip}:{port}"
    target = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
    default_port = 443 if scheme == "https" else 80
    headers = {
        "Host": host if port == default_port else f"{host}:{port}",
        "Content-Type": "application/json",
        "User-Agent": "trisk-callback",
        SIGNATURE_HEADER: sign(secret, int(time.time()), body),
        **dict(extra_headers),
    }
    left = max(0.001, policy.timeout_seconds - (time.monotonic() - started))
    return await apost(
        http,
        target,
        limit=ANSWER_BYTES,
        total_seconds=left,
        strict=False,
        content=body,
        headers=headers,
        extensions={"sni_hostname": host},
        timeout=httpx.Timeout(left, connect=min(3.0, left)),
        follow_redirects=False,
    )
