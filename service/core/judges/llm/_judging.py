"""The ask-parse-retry loop shared by every judge: one temperature step per unparseable answer, bounded by attempts.

A judge that answered but whose answers did not parse reads ``invalid`` with the last parse error and its raw answer,
also when the deadline then cut off a further attempt: it did answer, so it is not reported as a timeout. Only a
judge that never gave an answer reads ``timed_out`` (or ``failed``). ``dominant_cause`` words what most judges that
gave nothing had in common, for a check's or a tier's reason."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

import msgspec

from service.core.judges.llm._client import ChatMessage, Endpoint, LLMClient
from service.core.judges.llm._guard import CallGuard, Cost
from service.platform.errors import UpstreamError, UpstreamTimeout
from service.platform.ratelimit import SpendExhausted
from service.platform.telemetry import JUDGE_PARSE_FAILURES

if TYPE_CHECKING:
    from service.core.judges.llm._panels import Judge
    from service.platform.settings import LLMSettings

__all__ = [
    "PARSE_ERROR_WORDS",
    "Attempt",
    "AttemptOptions",
    "Cost",
    "JudgeAnswer",
    "JudgeResult",
    "JudgeRun",
    "JudgeStatus",
    "Outcome",
    "Unreadable",
    "ask_until_parsed",
    "dominant_cause",
    "dominant_status",
    "readable",
]

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

    @classmethod
    def of(cls, settings: LLMSettings) -> AttemptOptions:
        """The settings' options: their temperature, ``parse_attempts`` answers at the most."""
        return cls(temperature=settings.temperature, max_attempts=settings.parse_attempts)

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


class Outcome(Generic[T]):
    """What the loop ended with; ``value`` is set only when ``status == "valid"``."""

    __slots__ = ("attempts", "cost", "error", "parse_error", "status", "value")

    def __init__(self) -> None:
        self.value: T | None = None
        self.status: JudgeStatus = "invalid"
        self.error: str | None = None
        self.parse_error: str | None = None  # the last answer's parse error (status invalid)
        self.attempts: list[Attempt] = []
        self.cost = Cost()

    @property
    def raw(self) -> str | None:
        """The last answer as the judge wrote it (kept for an invalid one: the user sees what did not parse)."""
        return self.attempts[-1].raw if self.attempts else None


# an answer with nothing to parse: cut off at max_tokens (its end, a number or a closing brace, may be missing too)
# or empty; every parser reads these first, before its own format
Unreadable = Literal["truncated", "empty"]


def readable(text: str | None, finish_reason: str | None) -> tuple[str | None, Unreadable | None]:
    """``(text, None)`` when there is an answer to parse; ``(None, "truncated")`` for one cut off at max_tokens
    (finish_reason "length"), ``(None, "empty")`` for no text."""
    if finish_reason == "length":
        return None, "truncated"
    if text is None or not text.strip():
        return None, "empty"
    return text, None


# what a parse error code means, for reasons a user reads ("3 of 3 judges gave answers that do not parse: ...")
PARSE_ERROR_WORDS: dict[str, str] = {
    "truncated": "truncated at max_tokens",
    "empty": "empty answers",
    "not_a_number": "not a number",
    "wrong_scale": "a score on a 0-1 scale",
    "out_of_range": "a score out of range",
    "no_scores": "no dimension scored",
    "no_grade": "no GRADE line",
    "unknown_grade": "an unknown grade letter",
    "partial_not_enabled": "a partial grade without partial credit",
    "both_yes_and_no": "both yes and no",
    "neither_yes_nor_no": "neither yes nor no",
    "no_answer": "no ANSWER line",
    "not_an_option": "a letter that is not an option",
    "multiple_choices": "several letters",
    "no_json_object": "no JSON object",
    "missing_pali": 'no "pali" field',
    "empty_pali": 'an empty "pali" field',
    "no_errors_list": 'no "errors" list',
    "bad_error_item": "an error without a quote, a known category or a severity",
}


class JudgeAnswer(msgspec.Struct, frozen=True):
    """How one judge's call ended, as ``dominant_cause`` counts it: the base of every judge's result."""

    status: JudgeStatus
    parse_error: str | None = None  # why the last answer did not parse (status invalid): "truncated", ...
    error: str | None = None


class JudgeResult(JudgeAnswer, frozen=True, kw_only=True):
    """What every judge's result starts with: the judge, how its call ended, its last answer as written, the error
    (None when valid) and, when its answers did not parse, the last parse error. Each judge kind adds its value."""

    judge_id: str
    model: str
    family: str
    raw: str | None
    error: str | None  # given by every result (None when valid), not defaulted

    @classmethod
    def of(cls, judge: Judge, outcome: Outcome[Any], **fields: Any) -> Self:
        """The result of ``judge`` from how its loop ended, with the kind's own ``fields``."""
        return cls(**cls.header(judge, outcome), **fields)

    @classmethod
    def header(cls, judge: Judge, outcome: Outcome[Any]) -> dict[str, Any]:
        return {
            "judge_id": judge.id,
            "model": judge.model,
            "family": judge.family,
            "status": outcome.status,
            "raw": outcome.raw,
            "error": None if outcome.status == "valid" else outcome.error,
            "parse_error": outcome.parse_error if outcome.status == "invalid" else None,
        }


class JudgeRun(JudgeResult, frozen=True, kw_only=True):
    """A judge result that keeps every answer it gave and what the judge cost."""

    attempts: list[Attempt]
    cost: Cost

    @classmethod
    def header(cls, judge: Judge, outcome: Outcome[Any]) -> dict[str, Any]:
        return {**super().header(judge, outcome), "attempts": outcome.attempts, "cost": outcome.cost}


_CAUSE_ORDER: tuple[JudgeStatus, ...] = ("invalid", "timed_out", "failed", "skipped")
_CAUSE_WORDS: dict[str, str] = {
    "invalid": "gave answers that do not parse",
    "timed_out": "gave no answer in time",
    "failed": "could not be reached",
    "skipped": "were not asked",
}


def dominant_status(answers: Sequence[JudgeAnswer]) -> JudgeStatus | None:
    """The most common way the judges that gave nothing ended; None when every one gave a value (or none was asked).
    Ties go to the cause a user can act on first: answers that do not parse, then timeouts, failures, skips."""
    counts = {status: sum(1 for a in answers if a.status == status) for status in _CAUSE_ORDER}
    status = max(_CAUSE_ORDER, key=lambda s: (counts[s], -_CAUSE_ORDER.index(s)))
    return status if counts[status] else None


def dominant_cause(answers: Sequence[JudgeAnswer]) -> str | None:
    """``dominant_status`` in words, with its commonest detail: "3 of 3 judges gave answers that do not parse:
    truncated at max_tokens", "2 of 3 judges gave no answer in time: ..."; None when there is nothing to explain."""
    status = dominant_status(answers)
    if status is None:
        return None
    mine = [a for a in answers if a.status == status]
    noun = "judge" if len(answers) == 1 else "judges"
    head = f"{len(mine)} of {len(answers)} {noun} {_CAUSE_WORDS[status]}"
    if status == "invalid":
        errors = [a.parse_error or "unparseable" for a in mine]
        top = max(dict.fromkeys(errors), key=errors.count)
        return f"{head}: {PARSE_ERROR_WORDS.get(top, top)}"
    details = [a.error for a in mine if a.error]
    return f"{head}: {max(dict.fromkeys(details), key=details.count)}" if details else head


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
            _cut_off(outcome, "timed_out", refusal)
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
            _cut_off(outcome, "skipped", exc.reason)
            return
        except UpstreamTimeout as exc:
            if exc.extra.get("refused"):  # benched while it waited for a connection slot: nothing was sent
                _cut_off(outcome, "timed_out", exc.detail)
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
            _cut_off(outcome, "failed", f"{type(exc).__name__}: {exc.detail}")
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
        outcome.parse_error = error
        outcome.error = f"unparseable answer: {error}"
    outcome.status = "invalid"


def _cut_off(outcome: Outcome[T], status: JudgeStatus, error: str) -> None:
    """The loop ends without a value: ``status`` with ``error``, unless the judge had already answered something that
    did not parse; then it stays invalid (it did answer) and the error says both."""
    if outcome.parse_error is not None:
        outcome.status = "invalid"
        outcome.error = f"unparseable answer: {outcome.parse_error}; then {error}"
        return
    outcome.status, outcome.error = status, error


def _timed_out(outcome: Outcome[T], exc: Exception, started: float, guard: CallGuard | None, judge: str) -> None:
    """A call that did not answer in time: counted and timed; under a guard the judge's timeout is recorded
    (``timed_out``), without one it is an upstream failure like any other."""
    outcome.cost.seconds = round(outcome.cost.seconds + time.perf_counter() - started, 3)
    outcome.cost.timeouts += 1
    attempts = exc.extra.get("attempts") if isinstance(exc, UpstreamTimeout) else 1
    outcome.cost.calls += attempts if isinstance(attempts, int) else 1
    detail = exc.detail if isinstance(exc, UpstreamTimeout) else "no answer before the LLM deadline"
    if guard is None:
        _cut_off(outcome, "failed", f"UpstreamTimeout: {detail}")
        return
    guard.timed_out(judge)
    _cut_off(outcome, "timed_out", f"timed out: {detail}")
