"""Secrets at rest that must be recoverable (a tenant's callback secret signs every callback, so it cannot be
hashed): sealed with AES-256-GCM under a key from ``TRISK_SECRET_KEYS``, in the same text column as before.

A sealed value reads ``v1:<key id>:<base64url(12-byte nonce + ciphertext + tag)>``, its associated data the owner (a
tenant), so a row copied to another tenant does not open. A value without the prefix is an older plaintext row and
reads as it is; with no key configured new values are stored plain too (and ``trisk secrets status`` says so).

Keys and rotation: ``TRISK_SECRET_KEYS=k2:<base64>,k1:<base64>`` seals with the first and opens with any. To rotate,
put the new key first and keep the old one, then run ``trisk secrets reseal``: the rows are append-only, so it appends
each tenant's current secret again, sealed under the first key (the secret itself does not change, receivers keep
verifying); once no current row names the old key, drop it. A key is made with ``trisk secrets new-key``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["PREFIX", "SealError", "Sealer", "new_key_spec"]

PREFIX = "v1:"
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class SealError(ValueError):
    """A key setting that cannot be read, or a sealed value no configured key opens (the message names the key id,
    never a key)."""


def new_key_spec(key_id: str | None = None) -> str:
    """A fresh ``id:base64`` entry for TRISK_SECRET_KEYS."""
    key_id = key_id or f"k{secrets.token_hex(3)}"
    return f"{key_id}:{base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()}"


@dataclass(frozen=True)
class Sealer:
    """Seals with the first key, opens with any; without keys it stores plain and opens plain (and sealed values
    fail, naming the key they need)."""

    keys: tuple[tuple[str, bytes], ...] = ()
    _by_id: dict[str, AESGCM] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for key_id, key in self.keys:
            self._by_id[key_id] = AESGCM(key)

    @classmethod
    def from_setting(cls, raw: str) -> Sealer:
        keys: list[tuple[str, bytes]] = []
        for entry in (e.strip() for e in raw.split(",")):
            if not entry:
                continue
            key_id, sep, encoded = entry.partition(":")
            if not sep or not _KEY_ID.match(key_id):
                raise SealError("TRISK_SECRET_KEYS: each entry is id:base64 (an id of letters, digits, - and _)")
            try:
                key = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise SealError(f"TRISK_SECRET_KEYS: key {key_id} is not base64") from None
            if len(key) != 32:
                raise SealError(f"TRISK_SECRET_KEYS: key {key_id} has {len(key)} bytes, not 32")
            if any(key_id == k for k, _ in keys):
                raise SealError(f"TRISK_SECRET_KEYS: key id {key_id} is given twice")
            keys.append((key_id, key))
        return cls(tuple(keys))

    @property
    def sealing_key(self) -> str | None:
        """The id of the key new values are sealed with (None: stored plain)."""
        return self.keys[0][0] if self.keys else None

    def seal(self, plain: str, owner: str) -> str:
        if not self.keys:
            return plain
        key_id = self.keys[0][0]
        nonce = os.urandom(12)
        sealed = self._by_id[key_id].encrypt(nonce, plain.encode(), owner.encode())
        return f"{PREFIX}{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, stored: str, owner: str) -> str:
        if not stored.startswith(PREFIX):
            return stored  # a row from before sealing, or stored without a key
        key_id, _, encoded = stored.removeprefix(PREFIX).partition(":")
        aead = self._by_id.get(key_id)
        if aead is None:
            raise SealError(f"a secret is sealed with key {key_id!r}, which TRISK_SECRET_KEYS does not hold")
        try:
            raw = base64.urlsafe_b64decode(encoded)
            return aead.decrypt(raw[:12], raw[12:], owner.encode()).decode()
        except (InvalidTag, binascii.Error, ValueError):
            raise SealError(f"a secret sealed with key {key_id!r} does not open (altered, or another's)") from None

    def needs_reseal(self, stored: str) -> bool:
        """Whether a stored value is not sealed under the first key (plain, or an older key)."""
        if not self.keys:
            return False
        return not stored.startswith(f"{PREFIX}{self.keys[0][0]}:")
