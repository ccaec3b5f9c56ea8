"""Who is using the workbench: the session cookie's key (checked on every request, so a revoked key's sessions end
within the key cache's few seconds), its scopes per page, the form token of every POST, and the reviewer name.

The pages go through the same door as the API (``service.app.auth.admit``: tenant, logs, rate limits); only how
the key is presented differs: once, in the sign-in form, then as the session it was exchanged for.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie
from litestar.handlers.base import BaseRouteHandler

from service.app.auth import admit, key_cache, reviewer_of, single_query_values
from service.app.workbench.sessions import Session, SessionStore
from service.platform.auth import Principal, principal_of_key
from service.platform.auth import Scope as KeyScope
from service.platform.errors import Forbidden, NotReady, Unauthorized

__all__ = [
    "COOKIE",
    "SIGNIN_COOKIE",
    "SignInRequired",
    "cookie",
    "page_access",
    "require_csrf",
    "reviewer_of",
    "session_in",
    "session_of",
    "session_store",
]

COOKIE = "trisk_session"
SIGNIN_COOKIE = "trisk_signin"  # the sign-in form's token (double submit: nothing else to bind it to yet)
_STATE = "trisk_workbench_session"


class SignInRequired(Unauthorized):
    """No live session: the page answers with the sign-in form instead of a problem."""


def session_store(connection: ASGIConnection[Any, Any, Any, Any]) -> SessionStore:
    redis = getattr(connection.app.state.resources, "redis", None)
    if redis is None:
        raise NotReady("Redis is not connected")
    return SessionStore(redis)


async def _open_session(connection: ASGIConnection[Any, Any, Any, Any]) -> tuple[str, Session, Principal]:
    token = connection.cookies.get(COOKIE)
    session = await session_store(connection).get(token)
    if token is None or session is None:
        raise SignInRequired("sign in with an API key: no session, or it has ended")
    key = await asyncio.to_thread(key_cache(connection).find, session.key_id)
    try:
        principal = principal_of_key(key)
    except Unauthorized as exc:
        raise SignInRequired(exc.detail) from None
    if principal.tenant != session.tenant:  # a key never changes tenant; a session that says otherwise is void
        raise SignInRequired("the session does not match its key: sign in again")
    return token, session, await admit(connection, principal)


def page_access(scope: KeyScope) -> dict[str, Any]:
    """A page's required scope, as ``service.app.auth.access`` is a route's (pages stay out of the OpenAPI document:
    it documents the API, not its pages)."""

    async def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        token, session, principal = await _open_session(connection)
        connection.scope.setdefault("state", {})[_STATE] = (token, session)
        principal.require(scope)
        single_query_values(connection)

    guard.__name__ = f"page_requires_{scope}"
    return {"guards": [guard], "opt": {"scope": scope}}


def session_in(connection: ASGIConnection[Any, Any, Any, Any]) -> tuple[str, Session] | None:
    """The session the page's guard opened (token, record), if it did."""
    found: tuple[str, Session] | None = connection.scope.get("state", {}).get(_STATE)
    return found


def session_of(connection: ASGIConnection[Any, Any, Any, Any]) -> tuple[str, Session]:
    found = session_in(connection)
    if found is None:
        raise SignInRequired("sign in with an API key")
    return found


def require_csrf(session: Session, given: str | None) -> None:
    """Every form that changes something carries the session's form token (besides the SameSite=Strict cookie)."""
    if not session.csrf_ok(given):
        raise Forbidden("the form's token does not match this session (an old page, or another site's form); reload")


def cookie(connection: ASGIConnection[Any, Any, Any, Any], name: str, value: str, age: int, path: str) -> Cookie:
    """A workbench cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), Secure
    over https or when ``TRISK_SESSION_COOKIE_SECURE`` says the service sits behind TLS."""
    settings = connection.app.state.resources.settings
    secure = settings.api.session_cookie_secure or connection.url.scheme == "https"
    return Cookie(key=name, value=value, max_age=age, path=path, httponly=True, samesite="strict", secure=secure)
