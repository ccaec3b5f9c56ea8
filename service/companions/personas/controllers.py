"""``/v1/personas``: create, read, list, change (a new version) and delete the personas of poets."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Controller, delete, get, post, put

from service.app.auth import access
from service.app.resources import Resources
from service.companions.personas.store import PersonaRecord, PersonaStore
from service.companions.poller import PERSONA_FIELD_MAX_CHARS, Persona, validate_persona
from service.platform.errors import NotReady

__all__ = ["PersonaController", "PersonaDeleted"]


class PersonaDeleted(msgspec.Struct):
    id: str
    deleted: bool


def _personas(resources: Resources) -> PersonaStore:
    if resources.db is None:
        raise NotReady("the durable store is not open")
    return PersonaStore(resources.db)


class PersonaController(Controller):
    path = "/v1/personas"
    tags = ["poller"]

    @post(
        operation_id="createPersona",
        **access("admin"),
        summary="Create a persona (the author a Poller judge plays)",
        description=(
            f"Each text field holds at most {PERSONA_FIELD_MAX_CHARS:,} characters (the research summarised each poet "
            "in 1,000-2,500 words). The answer's version is the content hash an evaluation records."
        ),
        status_code=201,
    )
    async def create(self, data: Persona, resources: Resources, tenant: str) -> PersonaRecord:
        validate_persona(data)
        return await asyncio.to_thread(_personas(resources).create, tenant, data)

    @get(operation_id="listPersonas", **access("read"), summary="This tenant's personas, latest versions")
    async def list_all(self, resources: Resources, tenant: str) -> list[PersonaRecord]:
        return await asyncio.to_thread(_personas(resources).list, tenant)

    @get("/{persona_id:str}", operation_id="getPersona", **access("read"), summary="A persona's latest version")
    async def read(self, persona_id: str, resources: Resources, tenant: str) -> PersonaRecord:
        return await asyncio.to_thread(_personas(resources).get, tenant, persona_id)

    @get(
        "/{persona_id:str}/versions",
        operation_id="listPersonaVersions",
        **access("read"),
        summary="Every version of a persona, oldest first (what each evaluation's persona version points at)",
    )
    async def versions(self, persona_id: str, resources: Resources, tenant: str) -> list[PersonaRecord]:
        return await asyncio.to_thread(_personas(resources).versions, tenant, persona_id)

    @put(
        "/{persona_id:str}",
        operation_id="updatePersona",
        **access("admin"),
        summary="Change a persona: a new version (the earlier ones stay readable)",
    )
    async def update(self, persona_id: str, data: Persona, resources: Resources, tenant: str) -> PersonaRecord:
        validate_persona(data)
        return await asyncio.to_thread(_personas(resources).update, tenant, persona_id, data)

    @delete(
        "/{persona_id:str}",
        operation_id="deletePersona",
        **access("admin"),
        summary="Delete a persona (a tombstone version: evaluations keep the text they used)",
        status_code=200,
    )
    async def remove(self, persona_id: str, resources: Resources, tenant: str) -> PersonaDeleted:
        await asyncio.to_thread(_personas(resources).delete, tenant, persona_id)
        return PersonaDeleted(id=persona_id, deleted=True)
