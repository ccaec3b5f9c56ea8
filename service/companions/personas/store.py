"""Personas of poets (the Poller judge plays them) in the durable store, versioned: every change is a new version
row and a deletion a tombstone, so an evaluation's persona version names the exact text its prompt used, forever."""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec
import sqlalchemy as sa

from service.companions.poller import Persona, persona_version
from service.platform.errors import NotFound
from service.state.durable.schema import persona_versions
from service.state.durable.store import DurableStore

__all__ = ["PersonaRecord", "PersonaStore"]

_dec = msgspec.json.Decoder(Persona)
_enc = msgspec.json.Encoder()


class PersonaRecord(msgspec.Struct, frozen=True):
    """One version of a persona; ``version`` is the content hash evaluations record."""

    id: str
    version: str
    created_at: float
    persona: Persona


class PersonaStore:
    """Blocking I/O like ``DurableStore`` (call from a thread on an event loop)."""

    def __init__(self, store: DurableStore) -> None:
        self.store = store

    def _append(self, tenant: str, persona_id: str, persona: Persona | None) -> float:
        now = time.time()
        with self.store._insert() as con:
            con.execute(
                persona_versions.insert().values(
                    tenant=tenant,
                    persona_id=persona_id,
                    version="" if persona is None else persona_version(persona),
                    body="" if persona is None else _enc.encode(persona).decode(),
                    deleted=persona is None,
                    created_at=now,
                )
            )
        return now

    def _rows(self, tenant: str, persona_id: str | None = None) -> list[Any]:
        c = persona_versions.c
        query = sa.select(c.persona_id, c.version, c.body, c.deleted, c.created_at).where(c.tenant == tenant)
        if persona_id is not None:
            query = query.where(c.persona_id == persona_id)
        with self.store._read() as con:
            return list(con.execute(query.order_by(c.id)).all())

    def create(self, tenant: str, persona: Persona) -> PersonaRecord:
        pid = uuid.uuid4().hex
        at = self._append(tenant, pid, persona)
        return PersonaRecord(id=pid, version=persona_version(persona), created_at=at, persona=persona)

    def versions(self, tenant: str, persona_id: str) -> list[PersonaRecord]:
        """Every version of a live persona, oldest first (NotFound for an unknown or deleted one)."""
        rows = self._rows(tenant, persona_id)
        if not rows or rows[-1].deleted:
            raise NotFound(f"no persona {persona_id!r}")
        return [
            PersonaRecord(
                id=r.persona_id, version=r.version, created_at=float(r.created_at), persona=_dec.decode(r.body)
            )
            for r in rows
            if not r.deleted
        ]

    def get(self, tenant: str, persona_id: str, version: str | None = None) -> PersonaRecord:
        """The latest version, or the named one (still readable after later changes; not after a deletion)."""
        records = self.versions(tenant, persona_id)
        if version is None:
            return records[-1]
        for record in records:
            if record.version == version:
                return record
        raise NotFound(f"persona {persona_id!r} has no version {version!r}")

    def update(self, tenant: str, persona_id: str, persona: Persona) -> PersonaRecord:
        current = self.get(tenant, persona_id)
        if current.version == persona_version(persona):
            return current  # the same text again: no new version
        at = self._append(tenant, persona_id, persona)
        return PersonaRecord(id=persona_id, version=persona_version(persona), created_at=at, persona=persona)

    def delete(self, tenant: str, persona_id: str) -> None:
        self.get(tenant, persona_id)  # NotFound for an unknown (or another tenant's) persona
        self._append(tenant, persona_id, None)

    def list(self, tenant: str) -> list[PersonaRecord]:
        """The latest version of every live persona of a tenant, oldest persona first."""
        latest: dict[str, Any] = {}
        for row in self._rows(tenant):
            latest[row.persona_id] = row
        return [
            PersonaRecord(
                id=r.persona_id, version=r.version, created_at=float(r.created_at), persona=_dec.decode(r.body)
            )
            for r in latest.values()
            if not r.deleted
        ]
