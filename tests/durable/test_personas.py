"""Persona versions in the durable store (both engines): every change a version, the same text no new one, a
deletion a tombstone, each tenant its own."""

from __future__ import annotations

import uuid

import pytest

from service.companions.personas.store import PersonaStore
from service.companions.poller import Persona, persona_version
from service.platform.errors import NotFound
from service.state.durable import DurableStore

FIRST = Persona(author="Bei Dao", basic_information="Born in Beijing in 1949.")
SECOND = Persona(author="Bei Dao", basic_information="Born in Beijing in 1949.", critics_comments="A Misty poet.")


@pytest.fixture
def tenant() -> str:
    return f"test-personas-{uuid.uuid4().hex[:10]}"


def test_versions_tombstones_and_tenants(durable_store: DurableStore, tenant: str) -> None:
    personas = PersonaStore(durable_store)
    created = personas.create(tenant, FIRST)
    assert created.version == persona_version(FIRST)
    assert personas.update(tenant, created.id, FIRST).version == created.version  # the same text: no new version
    changed = personas.update(tenant, created.id, SECOND)
    assert [r.version for r in personas.versions(tenant, created.id)] == [created.version, changed.version]
    assert personas.get(tenant, created.id).persona == SECOND
    assert personas.get(tenant, created.id, created.version).persona == FIRST  # an earlier version stays readable
    with pytest.raises(NotFound):
        personas.get(tenant, created.id, "0" * 16)
    # another tenant sees nothing of it and cannot change or delete it
    other = f"{tenant}-other"
    assert personas.list(other) == []
    for call in (lambda: personas.get(other, created.id), lambda: personas.update(other, created.id, FIRST)):
        with pytest.raises(NotFound):
            call()
    with pytest.raises(NotFound):
        personas.delete(other, created.id)
    assert [r.id for r in personas.list(tenant)] == [created.id]
    personas.delete(tenant, created.id)
    assert personas.list(tenant) == []
    with pytest.raises(NotFound):
        personas.get(tenant, created.id)
    with pytest.raises(NotFound):
        personas.delete(tenant, created.id)
