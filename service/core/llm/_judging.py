"""The ask-parse-retry loop shared by GEMBA and backtranslation: one temperature step per unparseable answer."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

import msgspec

from service.core.errors import UpstreamError, UpstreamTimeout
from service.core.llm._client import ChatMessage, ChatResult, Endpoint, LLMClient
from service.core.ratelimit import SpendExhausted
from service.core.telemetry import JUDGE_PARSE_FAILURES

if TYPE_CHECKING:
    from service.core.llm._guard import CallGuard

__all__ = ["Attempt", "AttemptOptions", "Cost", "JudgeStatus", "Outcome", "ask_until_parsed"]

T = TypeVar("T")
# skipped: the call was not made (the tenant's LLM budget for the day is used up); never a failure of the judge.
# timed_out: the judge did not answer within the work's deadline, or was benched after repeated timeouts
JudgeStatus = Literal["valid", "invalid", "failed", "skipped", "timed_out"]


class AttemptOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """GEMBA's rule: start at ``temperature``, add ``temperature_step`` after each unparseable answer."""

    temperature: float = 0.0
    temperature_step: float = 0.1
    max_attempts: int = 5
    max_temperature: float = 1.0

    def temperature_for(self, attempt: int) -> float:
        return round(min(self.max_temperature, self.temperature + attempt * self.temperature_step), 6)


class Attempt(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One answer and what parsing made of it (``error`` None = parsed)."""

    temperature: float
    raw: str | None
    finish_reason: str | None
    error: str | None
    cached: bool
    latency_ms: float


class Cost(msgspec.Struct, forbid_unknown_fields=True):
    """Upstream spend: HTTP requests made (retries included), cache hits, tokens of non-cached answers, calls that
    timed out, and seconds spent waiting for answers (failed and timed-out calls included)."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    timeouts: int = 0
    seconds: float = 0.0

    def add(self, other: Cost) -> Cost:
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.timeouts += other.timeouts
        self.seconds = round(self.seconds + other.seconds, 3)
        return self

    def add_result(self, result: ChatResult) -> None:
        if result.cached:
            self.cache_hits += 1
            return
        self.calls += result.attempts
        self.prompt_tokens += result.usage.prompt_tokens
        self.completion_tokens += result.usage.completion_tokens


class Outcome(Generic[T]):
    """What the loop ended with; ``value`` is set only when ``status == "valid"``."""

    __slots__ = ("attempts", "cost", "error", "status", "value")

    def __init__(self) -> None:
        self.value: T | None = None
        self.status: JudgeStatus = "invalid"
        self.error: str | None = None
        self.attempts: list[Attempt] = []
        self.cost = Cost()


async def ask_until_parsed(
    client: LLMClient,
    endpoint: Endpoint,
    messages: Sequence[ChatMessage],
    *,
    prompt_version: str,
    parse: Callable[[str | None, str | None], tuple[T | None, str | None]],
    options: AttemptOptions,
    max_tokens: int | None = None,
    guard: CallGuard | None = None,
    judge_id: str | None = None,
) -> Outcome[T]:
    """Ask until ``parse(text, finish_reason)`` yields a value; never guesses, upstream errors end the loop.

    Under a ``guard`` every call shares its deadline, a timeout ends the loop as ``timed_out`` (not retried) and a
    judge the guard has benched is not asked at all; the outcome's cost is charged to the judge on the guard."""
    outcome: Outcome[T] = Outcome()
    judge = judge_id or endpoint.model
    try:
        await _ask(client, endpoint, messages, prompt_version, parse, options, max_tokens, guard, judge, outcome)
    finally:
        if guard is not None:
            guard.charge(judge, outcome.cost)
    return outcome


async def _ask(
    client: LLMClient,
    endpoint: Endpoint,
    messages: Sequence[ChatMessage],
    prompt_version: str,
    parse: Callable[[str | None, str | None], tuple[T | None, str | None]],
    options: AttemptOptions,
    max_tokens: int | None,
    guard: CallGuard | None,
    judge: str,
    outcome: Outcome[T],
) -> None:
    for attempt in range(max(1, options.max_attempts)):
        if guard is not None and (refusal := guard.refusal(judge)) is not None:
            outcome.status, outcome.error = "timed_out", refusal
            return
        temperature = options.temperature_for(attempt)
        started = time.perf_counter()
        try:
            left = None if guard is None else guard.remaining()
            async with asyncio.timeout(None if left is None or math.isinf(left) else left):
                result = await client.chat(
                    endpoint,
                    messages,
                    temperature=temperature,
                    prompt_version=prompt_version,
                    max_tokens=max_tokens,
                    deadline=None if guard is None or math.isinf(guard.deadline) else guard.deadline,
                    admit=None if guard is None else functools.partial(guard.refusal, judge),
                )
        except SpendExhausted as exc:
            outcome.status = "skipped"
            outcome.error = exc.reason
            return
        except UpstreamTimeout as exc:
            if exc.extra.get("refused"):  # benched while it waited for a connection slot: nothing was sent
                outcome.status, outcome.error = "timed_out", exc.detail
                return
            _timed_out(outcome, exc, started, guard, judge)
            return
        except TimeoutError as exc:
            _timed_out(outcome, exc, started, guard, judge)
            return
        except UpstreamError as exc:
            outcome.cost.seconds = round(outcome.cost.seconds + time.perf_counter() - started, 3)
            attempts = exc.extra.get("attempts")
            outcome.cost.calls += attempts if isinstance(attempts, int) else 0  # 0: failed before any request
            outcome.status = "failed"
            outcome.error = f"{type(exc).__name__}: {exc.detail}"
            return
        outcome.cost.add_result(result)
        outcome.cost.seconds = round(outcome.cost.seconds + time.perf_counter() - started, 3)
        value, error = parse(result.text, result.finish_reason)
        outcome.attempts.append(
            Attempt(temperature, result.text, result.finish_reason, error, result.cached, round(result.latency_ms, 3))
        )
        if error is None:
            outcome.value = value
            outcome.status = "valid"
            return
        JUDGE_PARSE_FAILURES.labels(prompt_version, error).inc()
        outcome.error = f"unparseable answer: {error}"
    outcome.status = "invalid"


def _timed_out(outcome: Outcome[T], exc: Exception, started: float, guard: CallGuard | None, judge: str) -> None:
    """A call that did not answer in time: counted and timed; under a guard the judge's timeout is recorded
    (``timed_out``), without one it is an upstream failure like any other."""
    outcome.cost.seconds = round(outcome.cost.seconds + time.perf_counter() - started, 3)
    outcome.cost.timeouts += 1
    attempts = exc.extra.get("attempts") if isinstance(exc, UpstreamTimeout) else 1
    outcome.cost.calls += attempts if isinstance(attempts, int) else 1
    detail = exc.detail if isinstance(exc, UpstreamTimeout) else "no answer before the LLM deadline"
    if guard is None:
        outcome.status, outcome.error = "failed", f"UpstreamTimeout: {detail}"
        return
    guard.timed_out(judge)
    outcome.status, outcome.error = "timed_out", f"timed out: {detail}"
