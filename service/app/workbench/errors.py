"""Errors on the workbench's pages: the API's own problem (status, title, wording, Retry-After) shown as a page; a
missing or ended session goes to the sign-in form instead, and a refused sign-in shows it again with the reason."""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import urlencode

from litestar import Request, Response
from litestar.response import Redirect

from service.app.problems import exception_handlers, problem_for
from service.app.workbench.access import COOKIE, SIGNIN_COOKIE, SignInRequired, cookie
from service.app.workbench.render import page

__all__ = ["page_exception_handlers", "with_page_errors"]


def _page_problem(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, SignInRequired):
        back = request.url.path if request.method == "GET" else ""
        # "your session has ended" only to a browser that had one; a first visit is just asked to sign in
        query = ({"m": "ended"} if request.cookies.get(COOKIE) else {}) | (
            {"next": back + (f"?{request.url.query}" if request.url.query else "")} if back else {}
        )
        return Redirect("/ui/signin" + (f"?{urlencode(query)}" if query else ""), status_code=303)
    problem = problem_for(request, exc)
    body: dict[str, Any] = problem.content if isinstance(problem.content, dict) else {}
    headers = {k: v for k, v in problem.headers.items() if k.lower() == "retry-after"}
    status = problem.status_code or 500
    if request.url.path.rstrip("/") == "/ui/signin" and status in (401, 403, 429):
        token = secrets.token_urlsafe(24)
        form = page(
            request,
            "signin.html",
            status_code=status,
            headers=headers,
            signin_csrf=token,
            next="",
            error=body,
        )
        form.cookies.append(cookie(request, SIGNIN_COOKIE, token, 600, "/ui/signin"))
        return form
    return page(request, "error.html", status_code=status, headers=headers, problem=body)


def page_exception_handlers() -> dict[Any, Any]:
    """Every class the API maps to a problem (so none falls through to the app's JSON handler), and the sign-in."""
    return {**dict.fromkeys(exception_handlers, _page_problem), SignInRequired: _page_problem}


def _is_page(path: str) -> bool:
    return (path == "/ui" or path.startswith("/ui/")) and not path.startswith("/ui/static/")


def with_page_errors(handlers: dict[Any, Any]) -> dict[Any, Any]:
    """The app's handlers, answering with a page for a path of the workbench: errors raised before any page's own
    handlers run (a path no page has: 404, a method none takes: 405) are pages too, not problem+json."""

    def wrapped(api: Any) -> Any:
        def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
            if _is_page(request.url.path):
                return _page_problem(request, exc)
            response: Response[Any] = api(request, exc)
            return response

        return handle

    return {cls: wrapped(h) for cls, h in handlers.items()}
