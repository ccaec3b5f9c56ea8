"""API keys and scopes: who may call what, and which tenant a call belongs to.

A key looks like ``trisk_<key id>_<secret>``: the key id (12 hex characters) names the stored record, the secret
(32 random bytes, url-safe base64) is shown once, at creation, and only its SHA-256 is stored. Checking a key looks
the record up by id and compares digests in constant time (a missing record is compared against a dummy digest, so
timing does not tell an unknown id from a wrong secret). A key carries its tenant, a name, scopes, created and
last-used times, an optional expiry, and can be revoked.

Scopes, and what each implies:

| scope    | for                                                          | implies                  |
|----------|--------------------------------------------------------------|--------------------------|
| `read`   | reading assessments, batches, queue, reports, models, ...    |                          |
| `submit` | novelty, assessments, batches, judge evaluations and grades  | `read`                   |
| `review` | the queue: claims, leases, verdicts, item views, adjudication | `read`                   |
| `admin`  | calibration fits and activation, personas, keys, metrics     | `read`, `submit`, `review` |
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterable
from typing import Literal

import msgspec

from service.platform.errors import Forbidden, InputError, Unauthorized

__all__ = [
    "IMPLIED",
    "SCOPES",
    "ApiKey",
    "Principal",
    "Scope",
    "authenticate",
    "new_key",
    "parse_token",
    "principal_of_key",
    "validate_scopes",
]

Scope = Literal["read", "submit", "review", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "submit", "review", "admin")
IMPLIED: dict[Scope, frozenset[Scope]] = {
    "read": frozenset({"read"}),
    "submit": frozenset({"submit", "read"}),
    "review": frozenset({"review", "read"}),
    "admin": frozenset(SCOPES),
}
_TOKEN = re.compile(r"^trisk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_TENANT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_DUMMY = hashlib.sha256(b"no such key").hexdigest()


class ApiKey(msgspec.Struct, frozen=True):
    """A stored key: never the secret, only its digest."""

    key_id: str
    tenant: str
    name: str
    scopes: list[Scope]
    secret_sha256: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None


class Principal(msgspec.Struct, frozen=True):
    """Who is calling: the key, its tenant, and every scope it grants (implied ones included)."""

    key_id: str
    tenant: str
    name: str
    scopes: frozenset[Scope]

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes

    def require(self, scope: Scope) -> None:
        if not self.allows(scope):
            have = ", ".join(sorted(self.scopes))
            raise Forbidden(f"this key's scopes ({have}) do not include {scope!r}", extra={"required_scope": scope})


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def validate_scopes(scopes: Iterable[str]) -> list[Scope]:
    """The scopes in canonical order; an unknown scope or none at all is bad input."""
    given = list(dict.fromkeys(scopes))
    unknown = [s for s in given if s not in SCOPES]
    if unknown or not given:
        raise InputError(f"scopes must be a non-empty subset of {list(SCOPES)}; got {given}", extra={"known": SCOPES})
    return [s for s in SCOPES if s in given]


def new_key(
    tenant: str, name: str, scopes: Iterable[str], *, expires_at: float | None = None, now: float | None = None
) -> tuple[str, ApiKey]:
    """A fresh key: the token to show once, and the record to store."""
    if not _TENANT.match(tenant):
        raise InputError("tenant must be 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit")
    if not name.strip() or len(name) > 200:
        raise InputError("a key needs a name of 1-200 characters")
    created = time.time() if now is None else now
    if expires_at is not None and expires_at <= created:
        raise InputError("expires_at must be in the future")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    record = ApiKey(
        key_id=key_id,
        tenant=tenant,
        name=name.strip(),
        scopes=validate_scopes(scopes),
        secret_sha256=_digest(secret),
        created_at=created,
        expires_at=expires_at,
    )
    return f"trisk_{key_id}_{secret}", record


def parse_token(token: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed token, else None."""
    m = _TOKEN.match(token.strip())
    return (m.group(1), m.group(2)) if m else None


def authenticate(token: str | None, find: object, *, now: float | None = None) -> Principal:
    """The caller of a request carrying ``token`` (``find(key_id) -> ApiKey | None`` looks the record up); 401 for a
    missing, malformed, unknown, wrong, revoked or expired key, with one message for all of them but a missing one."""
    if not token:
        raise Unauthorized("an API key is required: send Authorization: Bearer <key> or X-API-Key: <key>")
    parsed = parse_token(token)
    key: ApiKey | None = None
    secret = token
    if parsed is not None:
        key_id, secret = parsed
        key = find(key_id)  # type: ignore[operator]
    ok = hmac.compare_digest(_digest(secret), key.secret_sha256 if key is not None else _DUMMY)
    return principal_of_key(key if ok else None, now=now)


def is_live(key: ApiKey, *, now: float | None = None) -> bool:
    """Whether the key still authenticates: neither revoked nor expired."""
    at = time.time() if now is None else now
    return key.revoked_at is None and (key.expires_at is None or key.expires_at > at)


def principal_of_key(key: ApiKey | None, *, now: float | None = None) -> Principal:
    """The caller a key record stands for, once its secret has been checked (here, or at a workbench sign-in whose
    session names the key): 401 for no record, a revoked or an expired one, in the wording of ``authenticate``."""
    if key is None or not is_live(key, now=now):
        raise Unauthorized("the API key is not valid (unknown, revoked or expired)")
    scopes: set[Scope] = set()
    for s in key.scopes:
        scopes |= IMPLIED[s]
    return Principal(key_id=key.key_id, tenant=key.tenant, name=key.name, scopes=frozenset(scopes))
