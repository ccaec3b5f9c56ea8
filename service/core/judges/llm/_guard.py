"""Bounded judge work: one deadline shared by every call of a unit of work (an assessment's LLM tier, a Poller or
MATA job), call sizes per call type, and judges that keep timing out benched for the rest of that unit.

A call made under a guard is sent with its read timeout cut to the time left; a timeout is not retried (it would
spend the deadline again on the same slow judge) but counted, and a judge with ``MAX_TIMEOUTS`` timeouts is asked
nothing more. Every call's tokens, timeouts and seconds are tallied per judge for the cost report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

import msgspec

if TYPE_CHECKING:
    from service.core.judges.llm._client import ChatResult
    from service.core.judges.llm._panels import Judge
    from service.platform.settings import LLMSettings

__all__ = ["BACKTRANSLATION_BASE_TOKENS", "MAX_TIMEOUTS", "CallGuard", "CallType", "Cost", "max_tokens_for"]

# a judge that timed out this often in one unit of work is not asked again in it
MAX_TIMEOUTS = 2
# a backtranslation is about as long as its source: room for that, plus a little for a tokenizer that splits Pali
BACKTRANSLATION_BASE_TOKENS = 64

CallType = Literal["gemba", "backtranslation", "text"]


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

    @classmethod
    def total(cls, costs: Iterable[Cost]) -> Cost:
        """The sum of ``costs`` (a panel's judges, a job's units), as a new Cost."""
        total = cls()
        for cost in costs:
            total.add(cost)
        return total

    def add_result(self, result: ChatResult) -> None:
        if result.cached:
            self.cache_hits += 1
            return
        self.calls += result.attempts
        self.prompt_tokens += result.usage.prompt_tokens
        self.completion_tokens += result.usage.completion_tokens


def max_tokens_for(call: CallType, judge: Judge | None, settings: LLMSettings, *, source_chars: int = 0) -> int:
    """The ``max_tokens`` of one call: the judge's own override (reasoning models think before they answer), else
    the call type's default: a GEMBA answer is a number, a backtranslation is bounded by its source's length."""
    if judge is not None and judge.max_tokens is not None:
        return judge.max_tokens
    if call == "gemba":
        return settings.gemba_max_tokens
    if call == "backtranslation":
        return min(settings.text_max_tokens, BACKTRANSLATION_BASE_TOKENS + source_chars)
    return settings.text_max_tokens


class CallGuard:
    """The deadline and per-judge ledger of one unit of judge work (not shared between units)."""

    def __init__(
        self, seconds: float, *, max_timeouts: int = MAX_TIMEOUTS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self.max_timeouts = max_timeouts
        self.clock = clock
        self.deadline = clock() + seconds if seconds > 0 else math.inf
        self.costs: dict[str, Cost] = {}  # judge id -> what it cost in this unit of work
        self.timeouts: dict[str, int] = {}
        self.benched: set[str] = set()  # judges marked timed_out for the rest of this unit

    @classmethod
    def from_settings(cls, settings: LLMSettings) -> CallGuard:
        return cls(settings.deadline_seconds)

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def charge(self, judge: str, cost: Cost) -> None:
        self.costs.setdefault(judge, Cost()).add(cost)

    def refusal(self, judge: str) -> str | None:
        """Why ``judge`` may not be asked now (None = it may); a refused judge counts as timed out."""
        if self.remaining() <= 0:
            self.benched.add(judge)
            return f"the LLM deadline of {self.seconds:g} s passed"
        if self.timeouts.get(judge, 0) >= self.max_timeouts:
            return f"{judge} timed out {self.timeouts[judge]} times; not asked again"
        return None

    def timed_out(self, judge: str) -> None:
        self.timeouts[judge] = self.timeouts.get(judge, 0) + 1
        if self.timeouts[judge] >= self.max_timeouts or self.remaining() <= 0:
            self.benched.add(judge)
