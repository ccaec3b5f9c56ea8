"""``/v1/keys`` (create, list, revoke the tenant's API keys) and ``/v1/callbacks/secret`` (its signing secret)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import Controller, Request, Response, delete, get, post

from service.app.auth import access, principal_of
from service.app.keys.schemas import CallbackSecretOut, KeyCreated, KeyOut, KeyRequest, key_out
from service.app.resources import Resources
from service.platform.auth import new_key
from service.platform.errors import NotReady
from service.state.durable.access import AccessStore

__all__ = ["CallbackSecretController", "KeyController"]


def _access(resources: Resources) -> AccessStore:
    if resources.access is None:
        raise NotReady("the key store is not open")
    return resources.access


class KeyController(Controller):
    path = "/v1/keys"
    tags = ["access"]

    @post(operation_id="createKey", **access("admin"), summary="Create an API key for this tenant", status_code=201)
    async def create(self, data: KeyRequest, resources: Resources, tenant: str) -> Response[KeyCreated]:
        expires = None if data.expires_in_days is None else time.time() + data.expires_in_days * 86400
        token, record = new_key(tenant, data.name, data.scopes, expires_at=expires)
        await asyncio.to_thread(_access(resources).add_key, record)
        return Response(KeyCreated(key=token, record=key_out(record)), status_code=201)

    @get(operation_id="listKeys", **access("admin"), summary="This tenant's API keys (never their secrets)")
    async def list_keys(self, resources: Resources, tenant: str) -> list[KeyOut]:
        return [key_out(k) for k in await asyncio.to_thread(_access(resources).keys, tenant)]

    @delete(
        "/{key_id:str}",
        operation_id="revokeKey",
        **access("admin"),
        summary="Revoke one of this tenant's keys (it stops working within seconds)",
        description=(
            "409 for the calling key itself, and for the tenant's last live admin key: the tenant keeps a way in "
            "(the operator's `trisk keys revoke` may revoke either)."
        ),
        status_code=200,
    )
    async def revoke(self, request: Request[Any, Any, Any], key_id: str, resources: Resources, tenant: str) -> KeyOut:
        by = principal_of(request).key_id  # the tenant keeps a way in: not itself, not the last admin key (409)
        key = await asyncio.to_thread(_access(resources).revoke_key, key_id, tenant=tenant, by=by)
        if resources.keys is not None:
            resources.keys.forget(key_id)
        return key_out(key)


class CallbackSecretController(Controller):
    path = "/v1/callbacks/secret"
    tags = ["access"]

    @get(
        operation_id="getCallbackSecret",
        **access("admin"),
        summary="The secret this tenant's callbacks are signed with",
    )
    async def read(self, resources: Resources, tenant: str) -> CallbackSecretOut:
        secret = await asyncio.to_thread(_access(resources).callback_secret, tenant)
        return CallbackSecretOut(tenant=tenant, secret=secret.decode())

    @post(
        "/rotate",
        operation_id="rotateCallbackSecret",
        **access("admin"),
        summary="Replace the callback signing secret (callbacks are signed with the new one from now on)",
        status_code=200,
    )
    async def rotate(self, resources: Resources, tenant: str) -> CallbackSecretOut:
        secret = await asyncio.to_thread(_access(resources).rotate_callback_secret, tenant)
        return CallbackSecretOut(tenant=tenant, secret=secret.decode())
