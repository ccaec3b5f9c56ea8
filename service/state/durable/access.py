"""API keys and callback secrets in the durable store (the same engine and transactions as ``DurableStore``).

A key row is written once; revoking it adds a revocation row; its last-used time is the one mutable value, kept in a
table of its own. The callback secret of a tenant is its latest ``callback_secrets`` row, created on first use, sealed
at rest (``service.platform.sealing``: AES-GCM under TRISK_SECRET_KEYS; older plaintext rows still read).
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from service.platform.auth import ApiKey, Scope, authenticate, is_live, new_key
from service.platform.errors import Conflict, NotFound, Unauthorized
from service.platform.sealing import Sealer
from service.state.durable.engine import lock
from service.state.durable.schema import api_key_last_used, api_key_revocations, api_keys, callback_secrets
from service.state.durable.store import DuplicateRecord, DurableStore

__all__ = ["AccessStore", "ensure_key_file", "issue_key"]


def _key_of(row: Any) -> ApiKey:
    scopes: list[Scope] = [s for s in row.scopes.split(",") if s]
    return ApiKey(
        key_id=row.key_id,
        tenant=row.tenant,
        name=row.name,
        scopes=scopes,
        secret_sha256=row.secret_sha256,
        created_at=float(row.created_at),
        expires_at=None if row.expires_at is None else float(row.expires_at),
        revoked_at=None if row.revoked_at is None else float(row.revoked_at),
        last_used_at=None if row.last_used_at is None else float(row.last_used_at),
    )


class AccessStore:
    """Keys and callback secrets; blocking I/O like ``DurableStore`` (call from a thread on an event loop)."""

    def __init__(self, store: DurableStore, sealer: Sealer | None = None) -> None:
        self.store = store
        if sealer is None:
            from service.platform.settings import get_settings

            sealer = Sealer.from_setting(get_settings().durable.secret_keys)
        self.sealer = sealer

    def _keys_query(self) -> sa.Select[Any]:
        k, r, u = api_keys.c, api_key_revocations.c, api_key_last_used.c
        return sa.select(
            k.key_id,
            k.tenant,
            k.name,
            k.scopes,
            k.secret_sha256,
            k.created_at,
            k.expires_at,
            r.revoked_at,
            u.last_used_at,
        ).select_from(
            api_keys.outerjoin(api_key_revocations, r.key_id == k.key_id).outerjoin(
                api_key_last_used, u.key_id == k.key_id
            )
        )

    def add_key(self, key: ApiKey) -> ApiKey:
        with self.store._insert() as con:
            con.execute(
                api_keys.insert().values(
                    key_id=key.key_id,
                    tenant=key.tenant,
                    name=key.name,
                    scopes=",".join(key.scopes),
                    secret_sha256=key.secret_sha256,
                    created_at=key.created_at,
                    expires_at=key.expires_at,
                )
            )
        return key

    def find_key(self, key_id: str) -> ApiKey | None:
        with self.store._read() as con:
            row = con.execute(self._keys_query().where(api_keys.c.key_id == key_id)).first()
        return None if row is None else _key_of(row)

    def keys(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key of a tenant (of all tenants for ``None``: the operator's CLI), oldest first."""
        query = self._keys_query().order_by(api_keys.c.created_at, api_keys.c.key_id)
        if tenant is not None:
            query = query.where(api_keys.c.tenant == tenant)
        with self.store._read() as con:
            return [_key_of(r) for r in con.execute(query).all()]

    def revoke_key(self, key_id: str, *, tenant: str | None = None, by: str | None = None) -> ApiKey:
        """Revoke a key (of ``tenant``: another tenant's key is NotFound, as a key that never existed); revoking a
        revoked key changes nothing. ``by``: the key asking, through the API, where a tenant must keep a way in: a
        key cannot revoke itself, and the tenant's last live admin key cannot be revoked (Conflict, 409). The
        operator's CLI passes no ``by`` and may do both."""
        key = self.find_key(key_id)
        if key is None or (tenant is not None and key.tenant != tenant):
            raise NotFound(f"no API key {key_id!r}")
        if key.revoked_at is not None:
            return key
        if by is not None and by == key_id:
            raise Conflict(
                "a key cannot revoke itself: revoke it with another admin key of the tenant, or ask the operator "
                "(trisk keys revoke)",
                extra={"reason": "self_revocation"},
            )
        try:
            with self.store._insert() as con:
                if by is not None and "admin" in key.scopes:
                    # counted under the tenant's key lock: two admins revoking each other at once cannot both pass
                    lock(con, f"keys:{key.tenant}")
                    rows = con.execute(self._keys_query().where(api_keys.c.tenant == key.tenant)).all()
                    admins = [k for k in map(_key_of, rows) if "admin" in k.scopes and is_live(k)]
                    if not any(k.key_id != key_id for k in admins):
                        raise Conflict(
                            f"key {key_id!r} is the tenant's last admin key: create another admin key first, or ask "
                            "the operator (trisk keys revoke)",
                            extra={"reason": "last_admin_key"},
                        )
                con.execute(
                    api_key_revocations.insert().values(key_id=key_id, tenant=key.tenant, revoked_at=time.time())
                )
        except DuplicateRecord:
            pass  # revoked concurrently
        found = self.find_key(key_id)
        assert found is not None
        return found

    def touch_key(self, key_id: str, at: float) -> None:
        """Record when a key was last used (an upsert: the one row that changes)."""
        insert = pg_insert if self.store.dialect == "postgresql" else sqlite_insert
        statement = insert(api_key_last_used).values(key_id=key_id, last_used_at=at)
        statement = statement.on_conflict_do_update(index_elements=["key_id"], set_={"last_used_at": at})
        with self.store._insert() as con:
            con.execute(statement)

    def callback_secret(self, tenant: str) -> bytes:
        """The tenant's current callback signing secret, created on first use."""
        c = callback_secrets.c
        query = sa.select(c.secret).where(c.tenant == tenant).order_by(c.id.desc()).limit(1)
        with self.store._read() as con:
            secret = con.execute(query).scalar_one_or_none()
        if secret is None:
            return self.rotate_callback_secret(tenant)
        return self.sealer.open(str(secret), tenant).encode()

    def rotate_callback_secret(self, tenant: str) -> bytes:
        """A new signing secret for the tenant's callbacks (the old one stops being used at once)."""
        secret = secrets.token_urlsafe(32)
        self._append_secret(tenant, secret)
        return secret.encode()

    def _append_secret(self, tenant: str, secret: str) -> None:
        sealed = self.sealer.seal(secret, tenant)
        with self.store._insert() as con:
            con.execute(callback_secrets.insert().values(tenant=tenant, secret=sealed, created_at=time.time()))

    def reseal_callback_secrets(self) -> list[str]:
        """Every tenant whose current secret is plain or sealed under another key than the first gets it appended
        again under the first (the secret does not change); returns those tenants."""
        c = callback_secrets.c
        latest = sa.select(c.tenant, sa.func.max(c.id).label("id")).group_by(c.tenant).subquery()
        query = sa.select(c.tenant, c.secret).join(latest, c.id == latest.c.id).order_by(c.tenant)
        with self.store._read() as con:
            rows = con.execute(query).all()
        done = []
        for tenant, stored in rows:
            if self.sealer.needs_reseal(str(stored)):
                self._append_secret(tenant, self.sealer.open(str(stored), tenant))
                done.append(tenant)
        return done


def issue_key(
    store: DurableStore, tenant: str, name: str, scopes: list[str], *, expires_at: float | None = None
) -> tuple[str, ApiKey]:
    """Create and store a key; the token is returned this once."""
    token, record = new_key(tenant, name, scopes, expires_at=expires_at)
    AccessStore(store).add_key(record)
    return token, record


def ensure_key_file(store: DurableStore, path: Path, *, tenant: str, name: str, scopes: list[str]) -> tuple[str, bool]:
    """The key kept in ``path`` (mode 600) if it is still valid in this store, else a new one written there;
    returns the token and whether it is new. ``make up`` uses it for the local admin key."""
    access = AccessStore(store)
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
        try:
            authenticate(token, access.find_key)
            return token, False
        except Unauthorized:
            pass  # revoked, expired or from another database: make a new one
    token, _ = issue_key(store, tenant, name, scopes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n", encoding="utf-8")
    os.chmod(path, 0o600)
    return token, True
