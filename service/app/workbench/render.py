"""Every page is rendered through ``page``: who is signed in, the form token, the message a redirect asked for,
the assets with their hashes; for the workbench's own pages and its error pages alike."""

from __future__ import annotations

import time
from typing import Any

from litestar import Request
from litestar.response import Template

from service.app.workbench.access import reviewer_of, session_in
from service.app.workbench.assets import ASSETS, URLS
from service.platform.auth import Principal

__all__ = ["CSP", "MESSAGES", "page"]

# pages load only their own files: no inline script or style, forms post only here, never framed; every page has it,
# error pages included (an error page under the API's `default-src 'none'` would lose its style and keys)
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

# messages a redirect may ask a page to show, by code (a code, never text from the URL)
MESSAGES = {
    "signed_out": "Signed out.",
    "ended": "Your session has ended or its key is no longer valid: sign in again.",
    "recorded": "Verdict recorded.",
    "empty": "Nothing left to claim with these filters.",
    "released": "Lease released: its unreviewed items are back in the queue.",
    "renewed": "Lease renewed.",
}


def page(
    request: Request[Any, Any, Any],
    name: str,
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Template:
    user = request.scope.get("user")
    principal = user if isinstance(user, Principal) else None
    found = session_in(request)
    base = {
        "principal": principal,
        "reviewer": reviewer_of(principal) if principal is not None else None,
        "csrf": found[1].csrf if found is not None else "",
        "assets": ASSETS,
        "asset_urls": URLS,
        "message": MESSAGES.get(str(request.query_params.get("m", ""))),
        "path": request.url.path,
        "now": time.time(),
    }
    headers = {**(headers or {}), "content-security-policy": CSP}
    return Template(template_name=name, context={**base, **context}, status_code=status_code, headers=headers)
