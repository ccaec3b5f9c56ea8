"""The ask-parse-retry loop shared by GEMBA and backtranslation: one temperature step per unparseable answer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Literal, TypeVar

import msgspec

from service.core.errors import UpstreamError
from service.core.llm._client import ChatMessage, ChatResult, Endpoint, LLMClient
from service.core.ratelimit import SpendExhausted
from service.core.telemetry import JUDGE_PARSE_FAILURES

__all__ = ["Attempt", "AttemptOptions", "Cost", "JudgeStatus", "Outcome", "ask_until_parsed"]

T = TypeVar("T")
# skipped: the call was not made (the tenant's LLM budget for the day is used up); never a failure of the judge
JudgeStatus = Literal["valid", "invalid", "failed", "skipped"]


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
    """Upstream spend: HTTP requests made (retries included), cache hits, and tokens of non-cached answers."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Cost) -> Cost:
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
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
) -> Outcome[T]:
    """Ask until ``parse(text, finish_reason)`` yields a value; never guesses, upstream errors end the loop."""
    outcome: Outcome[T] = Outcome()
    for attempt in range(max(1, options.max_attempts)):
        temperature = options.temperature_for(attempt)
        try:
            result = await client.chat(
                endpoint, messages, temperature=temperature, prompt_version=prompt_version, max_tokens=max_tokens
            )
        except SpendExhausted as exc:
            outcome.status = "skipped"
            outcome.error = exc.reason
            return outcome
        except UpstreamError as exc:
            attempts = exc.extra.get("attempts")
            outcome.cost.calls += attempts if isinstance(attempts, int) else 0  # 0: failed before any request
            outcome.status = "failed"
            outcome.error = f"{type(exc).__name__}: {exc.detail}"
            return outcome
        outcome.cost.add_result(result)
        value, error = parse(result.text, result.finish_reason)
        outcome.attempts.append(
            Attempt(temperature, result.text, result.finish_reason, error, result.cached, round(result.latency_ms, 3))
        )
        if error is None:
            outcome.value = value
            outcome.status = "valid"
            return outcome
        JUDGE_PARSE_FAILURES.labels(prompt_version, error).inc()
        outcome.error = f"unparseable answer: {error}"
    outcome.status = "invalid"
    return outcome
