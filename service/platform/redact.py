"""Credentials out of everything printed: URLs lose their passwords, and the configured secrets are masked in any
text (health checks, problem details, log lines, ``trisk settings --current``).

Two layers, because a secret reaches text in two ways: a URL formatted into a message (``redis://:pw@host``), caught
by its shape whatever URL it is, and a secret value quoted by a library in a message of its own (a driver echoing its
connection string, an exception repeating a key), caught by value. The process registers its settings' secrets once
(``remember``: the API's plugin, the worker's startup, the CLI); the log formatters and the problem responses scrub
every text through ``scrub``.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:
    from service.platform.settings import Settings

__all__ = ["MASK", "forget_all", "is_secret_setting", "redact_url", "remember", "remember_value", "scrub"]

MASK = "***"
# query parameters of a URL that carry a credential (libpq's password and sslpassword, API keys in a query)
_SECRET_PARAMS = frozenset({"password", "sslpassword", "api_key", "apikey", "key", "token", "access_token", "secret"})
# scheme://user:password@ (the password may be empty-user form :password@); stops at the first @ after it
_URL_CREDENTIALS = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s/@:]*:)(?P<pw>[^\s@/]+)@")
_PARAM_CREDENTIALS = re.compile(
    r"(?P<head>[?&;\s](?:" + "|".join(sorted(_SECRET_PARAMS)) + r")=)(?P<value>[^&\s'\"]+)", re.IGNORECASE
)
# a secret shorter than this is not masked by value: it would mask ordinary words and numbers everywhere
_MIN_SECRET_CHARS = 6

_lock = threading.Lock()
_secrets: set[str] = set()


def is_secret_setting(env: str) -> bool:
    """Whether a setting holds a credential by itself (its value is never shown, only whether it is set)."""
    return env.endswith(("_API_KEY", "_PASSWORD", "_SECRET", "_TOKEN"))


def redact_url(url: str) -> str:
    """``url`` with its password (and credential query parameters) replaced by ``***``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, sep, _password = userinfo.partition(":")
        netloc = f"{user}{':' + MASK if sep else ''}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in _SECRET_PARAMS for k, _ in pairs):
            query = urlencode([(k, MASK if k.lower() in _SECRET_PARAMS else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def remember_value(secret: str) -> None:
    """Mask this value wherever ``scrub`` sees it (also URL-quoted, as it appears inside a URL)."""
    secret = secret.strip()
    if len(secret) < _MIN_SECRET_CHARS:
        return
    with _lock:
        _secrets.update({secret, quote(secret, safe=""), unquote(secret)})


def remember(settings: Settings) -> None:
    """Register the credentials of a process's settings: passwords inside the Redis, database, LLM and embedding
    URLs, and the keys and passwords that are settings of their own."""
    from service.platform.settings import declared_settings

    for path, spec in declared_settings():
        if path == "SHARED_DIR":
            continue
        group, _, name = path.rpartition(".")
        value = getattr(getattr(settings, group) if group else settings, name)
        if not isinstance(value, str) or not value:
            continue
        if is_secret_setting(spec.env):
            remember_value(value)
        elif "://" in value:
            try:
                parts = urlsplit(value)
            except ValueError:
                continue
            if parts.password:
                remember_value(unquote(parts.password))
            for key, item in parse_qsl(parts.query):
                if key.lower() in _SECRET_PARAMS:
                    remember_value(item)


def forget_all() -> None:
    """Tests only: start from no registered secrets."""
    with _lock:
        _secrets.clear()


def scrub(text: str) -> str:
    """``text`` with URL passwords, credential query parameters and every registered secret masked."""
    if not text:
        return text
    out = _URL_CREDENTIALS.sub(lambda m: f"{m.group('head')}{MASK}@", text)
    out = _PARAM_CREDENTIALS.sub(lambda m: f"{m.group('head')}{MASK}", out)
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in out:
            out = out.replace(secret, MASK)
    return out
