"""Request state must never reach a page or a URL: the session token (an HttpOnly cookie) nowhere, the form token
only in its own form field. Every browser and page test checks what it saw with ``leaks``/``assert_no_leaks``."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MAX_URL", "assert_no_leaks", "leaks", "urls_in"]

# a workbench URL carries an item id and a few filters; one that grows past this carries something it should not
MAX_URL = 1_000
_FORM_FIELD = re.compile(r'<input type="hidden" name="csrf" value="([^"]*)">')
_URL_ATTR = re.compile(r'(?:href|action|src|hx-get|hx-post)="([^"]*)"')


def urls_in(html: str) -> list[str]:
    """Every URL a page links, posts or loads."""
    return _URL_ATTR.findall(html)


def leaks(text: str, *, session_token: str, form_token: str, urls: Iterable[str] = ()) -> list[str]:
    """What ``text`` (a page) and ``urls`` (the page's own address, redirects) give away: the session token anywhere,
    the form token outside ``<input type="hidden" name="csrf" value=...>``, a URL holding either or over MAX_URL."""
    found = []
    if session_token and session_token in text:
        found.append("the session token is in the page")
    outside = _FORM_FIELD.sub("", text)
    if form_token and form_token in outside:
        found.append("the form token is in the page outside its form field")
    for url in [*urls, *urls_in(text)]:
        for name, token in (("session", session_token), ("form", form_token)):
            if token and token in url:
                found.append(f"the {name} token is in the URL {url[:120]!r}")
        if len(url) > MAX_URL:
            found.append(f"a URL of {len(url):,} characters: {url[:120]!r}...")
    return found


def assert_no_leaks(text: str, *, session_token: str, form_token: str, urls: Iterable[str] = ()) -> None:
    found = leaks(text, session_token=session_token, form_token=form_token, urls=urls)
    assert not found, found
