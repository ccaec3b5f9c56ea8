"""Request rate limits per key and per tenant, failed authentications per client address, in Redis (shared by every
API replica), and the daily LLM spend budget per tenant.

Requests: a fixed one-minute window on the Redis clock per key and per tenant (one Lua script, so the two counts
and the decision are atomic); a request over either limit is refused with the seconds until its window ends. The
answer's headers follow the IETF RateLimit header fields draft: ``RateLimit-Policy: "key";q=600;w=60,
"tenant";q=1200;w=60`` and ``RateLimit: "key";r=<remaining>;t=<seconds to reset>`` for the tighter of the two.

LLM spend: calls and tokens per tenant and UTC day. Before a judge call is sent it reserves its worst case (an upper
bound of its prompt's tokens plus its ``max_tokens``) together with one call, in one Lua script: refused when either
would pass the day's budget (the check then reads ``skipped`` with the reason). After the answer the reservation is
settled to the tokens the provider reports (a call without an answer releases it). Reservations are shared by every
worker through Redis, so concurrent calls cannot take the day over its token budget together; a worker lost between
the two steps leaves its reservation counted (the day ends under budget, never over).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from service.platform.redis_client import REDIS_REFUSING, redis_unavailable

__all__ = ["Decision", "FailureLimiter", "RateLimiter", "Reservation", "SpendExhausted", "SpendMeter", "charged_to"]

logger = logging.getLogger("trisk.ratelimit")

# KEYS: key counter, tenant counter. ARGV: key limit, tenant limit (0 = none), window seconds.
# Returns {allowed (1/0), key remaining, tenant remaining, seconds to the window's end, which limit refused}.
# allow-oom: the limits hold while Redis is full (its counters are a few bytes per issued key and tenant, gone after
# two windows), and a request that needs no Redis write of its own (a verdict, a read) is not refused for it
_CHECK = """#!lua flags=allow-oom
local t = redis.call('TIME')
local now = tonumber(t[1])
local window = tonumber(ARGV[3])
local start = now - (now % window)
local reset = start + window - now
local kkey = KEYS[1] .. ':' .. start
local tkey = KEYS[2] .. ':' .. start
local klimit, tlimit = tonumber(ARGV[1]), tonumber(ARGV[2])
local kn = tonumber(redis.call('GET', kkey) or '0')
local tn = tonumber(redis.call('GET', tkey) or '0')
if klimit > 0 and kn >= klimit then return {0, 0, tlimit - tn, reset, 'key'} end
if tlimit > 0 and tn >= tlimit then return {0, klimit - kn, 0, reset, 'tenant'} end
kn = redis.call('INCR', kkey)
redis.call('EXPIRE', kkey, window * 2)
tn = redis.call('INCR', tkey)
redis.call('EXPIRE', tkey, window * 2)
return {1, klimit - kn, tlimit - tn, reset, ''}
"""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after: int  # seconds until the window ends
    limited_by: str  # "key", "tenant" or ""
    headers: dict[str, str]


class RateLimiter:
    def __init__(self, redis: Any, *, per_key: int, per_tenant: int, window_seconds: int = 60) -> None:
        self.redis = redis
        self.per_key = per_key
        self.per_tenant = per_tenant
        self.window = window_seconds
        self._check = redis.register_script(_CHECK)

    @property
    def enabled(self) -> bool:
        return self.per_key > 0 or self.per_tenant > 0

    def policy(self) -> str:
        parts = []
        if self.per_key > 0:
            parts.append(f'"key";q={self.per_key};w={self.window}')
        if self.per_tenant > 0:
            parts.append(f'"tenant";q={self.per_tenant};w={self.window}')
        return ", ".join(parts)

    async def check(self, key_id: str, tenant: str) -> Decision:
        allowed, k_left, t_left, reset, which = await self._check(
            keys=[f"trisk:rl:key:{key_id}", f"trisk:rl:tenant:{tenant}"],
            args=[self.per_key, self.per_tenant, self.window],
        )
        limited_by = which.decode() if isinstance(which, bytes) else str(which)
        # the tighter of the two limits names the RateLimit field
        rows = [(int(k_left), "key")] if self.per_key > 0 else []
        if self.per_tenant > 0:
            rows.append((int(t_left), "tenant"))
        remaining, name = min(rows) if rows else (0, "key")
        headers = {
            "RateLimit-Policy": self.policy(),
            "RateLimit": f'"{name}";r={max(0, remaining)};t={int(reset)}',
        }
        return Decision(bool(allowed), int(reset), limited_by, headers)


# KEYS: the subject's failure counter. ARGV: window seconds. Returns {failures in this window, seconds to its end}.
_FAIL = """
local t = redis.call('TIME')
local now = tonumber(t[1])
local window = tonumber(ARGV[1])
local start = now - (now % window)
local key = KEYS[1] .. ':' .. start
local n = redis.call('INCR', key)
redis.call('EXPIRE', key, window * 2)
return {n, start + window - now}
"""


class FailureLimiter:
    """Failed authentications per subject (a client address, or a presented key id: one instance each), in fixed
    windows on the Redis clock (shared by every replica).

    ``record`` counts one failure and says whether the subject is now over ``per_window``; a subject over it is
    also remembered in this process until its window ends (``blocked``), so its further failures cost no Redis round
    trip. At most ``max_blocked`` subjects are remembered (the oldest go first)."""

    def __init__(
        self,
        redis: Any,
        *,
        per_window: int,
        window_seconds: int = 60,
        max_blocked: int = 10_000,
        prefix: str = "trisk:rl:authfail:",
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.per_window = per_window
        self.window = window_seconds
        self.max_blocked = max_blocked
        self._fail = redis.register_script(_FAIL)
        self._blocked: OrderedDict[str, float] = OrderedDict()  # subject -> monotonic time its block ends

    @property
    def enabled(self) -> bool:
        return self.per_window > 0

    def blocked(self, subject: str) -> int:
        """Seconds the subject's failures stay refused (0 = not refused)."""
        until = self._blocked.get(subject)
        if until is None:
            return 0
        left = until - time.monotonic()
        if left <= 0:
            del self._blocked[subject]
            return 0
        return max(1, math.ceil(left))

    async def record(self, subject: str) -> int:
        """Count a failure of ``subject``; the seconds it is refused from now on (0 = still within its limit). A Redis
        that refuses writes (full) leaves the failure uncounted, said in the log: the answer stays the 401 it is.
        Unlike the request limits, these counters are not written past a full Redis, since their keys are as many as
        the addresses or key ids a client can send."""
        try:
            n, reset = await self._fail(keys=[self.prefix + subject], args=[self.window])
        except REDIS_REFUSING as exc:
            logger.warning("failed authentication of %s not counted: %s", subject, redis_unavailable(exc).detail)
            return 0
        if int(n) <= self.per_window:
            return 0
        self._blocked[subject] = time.monotonic() + int(reset)
        self._blocked.move_to_end(subject)
        while len(self._blocked) > self.max_blocked:
            self._blocked.popitem(last=False)
        return max(1, int(reset))


class SpendExhausted(Exception):
    """The tenant's LLM budget for the day is used up; LLM checks read skipped with this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# KEYS: calls counter, tokens counter (settled tokens plus open reservations). ARGV: call limit (0 = none), token
# limit (0 = none), ttl seconds, tokens to reserve. Returns {taken (1/0), calls, tokens}.
_RESERVE = """
local calls = tonumber(redis.call('GET', KEYS[1]) or '0')
local tokens = tonumber(redis.call('GET', KEYS[2]) or '0')
local climit, tlimit, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
if climit > 0 and calls >= climit then return {0, calls, tokens} end
if tlimit > 0 and tokens + want > tlimit then return {0, calls, tokens} end
calls = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
tokens = redis.call('INCRBY', KEYS[2], want)
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
return {1, calls, tokens}
"""
_TTL = 2 * 86400


class Reservation(msgspec.Struct, frozen=True):
    """Tokens held for one call on one day's counter (settled on that counter, even after midnight)."""

    tokens_key: str
    tokens: int


class SpendMeter:
    """The daily LLM budget of one tenant (``calls_per_day``/``tokens_per_day`` 0 = unlimited)."""

    def __init__(self, redis: Any, tenant: str, *, calls_per_day: int, tokens_per_day: int) -> None:
        self.redis = redis
        self.tenant = tenant
        self.calls_per_day = calls_per_day
        self.tokens_per_day = tokens_per_day
        self._reserve = redis.register_script(_RESERVE)

    def _keys(self) -> tuple[str, str]:
        day = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        base = f"trisk:t:{self.tenant}:spend:{day}"
        return f"{base}:calls", f"{base}:tokens"

    async def reserve(self, tokens: int) -> Reservation:
        """Count one call and hold ``tokens`` (the call's worst case) against today's budget, or raise
        SpendExhausted when either would pass it."""
        calls, tokens_key = self._keys()
        if self.calls_per_day <= 0 and self.tokens_per_day <= 0:
            return Reservation(tokens_key, 0)  # nothing to refuse: the tokens are counted when settled
        want = max(0, int(tokens))
        ok, used_calls, used_tokens = await self._reserve(
            keys=[calls, tokens_key], args=[self.calls_per_day, self.tokens_per_day, _TTL, want]
        )
        if not ok:
            raise SpendExhausted(
                f"tenant {self.tenant!r} has used today's LLM budget ({int(used_calls)} of {self.calls_per_day or '∞'} "
                f"calls, {int(used_tokens)} of {self.tokens_per_day or '∞'} tokens, this call could take {want}; "
                "TRISK_LLM_CALLS_PER_DAY, TRISK_LLM_TOKENS_PER_DAY)"
            )
        return Reservation(tokens_key, want)

    async def settle(self, reservation: Reservation, spent: int) -> None:
        """Replace a reservation by the tokens the call really spent (0 for a call without an answer)."""
        delta = max(0, int(spent)) - reservation.tokens
        if delta == 0:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.incrby(reservation.tokens_key, delta)
            pipe.expire(reservation.tokens_key, _TTL)
            await pipe.execute()

    async def used(self) -> tuple[int, int]:
        """Today's calls and tokens (open reservations included)."""
        calls, tokens = self._keys()
        a, b = await self.redis.mget(calls, tokens)
        return int(a or 0), int(b or 0)


def charged_to(client: Any, redis: Any, tenant: str, llm_settings: Any) -> Any:
    """``client`` (an LLMClient, or None without a provider) charged to ``tenant``'s daily budget."""
    if client is None:
        return None
    meter = SpendMeter(
        redis, tenant, calls_per_day=llm_settings.calls_per_day, tokens_per_day=llm_settings.tokens_per_day
    )
    return client.metered(meter)
