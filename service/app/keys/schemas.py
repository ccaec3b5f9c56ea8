"""Request and response types of the key and callback-secret endpoints."""

from __future__ import annotations

from typing import Annotated

import msgspec

from service.platform.auth import ApiKey, Scope

__all__ = ["CallbackSecretOut", "KeyCreated", "KeyOut", "KeyRequest", "key_out"]


class KeyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A new key for the caller's own tenant."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=200, description="who or what uses the key")]
    scopes: Annotated[list[Scope], msgspec.Meta(min_length=1)]
    expires_in_days: Annotated[float, msgspec.Meta(gt=0, le=3650)] | None = None


class KeyOut(msgspec.Struct):
    """A key as listed: never its secret."""

    key_id: str
    tenant: str
    name: str
    scopes: list[Scope]
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None


class KeyCreated(msgspec.Struct):
    """The new key; ``key`` is shown this once and stored only as a hash."""

    key: str
    record: KeyOut


class CallbackSecretOut(msgspec.Struct):
    """The HMAC-SHA256 key callbacks of this tenant are signed with (header Trisk-Signature)."""

    tenant: str
    secret: str


def key_out(k: ApiKey) -> KeyOut:
    return KeyOut(k.key_id, k.tenant, k.name, list(k.scopes), k.created_at, k.expires_at, k.revoked_at, k.last_used_at)
