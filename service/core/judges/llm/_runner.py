"""The panel runner: every judge of a unit of work (and every unit of a job) asked under one ``asyncio.TaskGroup``.

Structured concurrency: when one call fails with an exception (not a judge's recorded failure: an unexpected error,
the worker shutting down), its siblings are cancelled and awaited before the failure leaves ``run_all``, so a unit
that will be retried or ended leaves no judge call running and spending the tenant's budget. The failure leaves as
itself (the first one raised), not wrapped in an ``ExceptionGroup``, so callers catch what they caught before.

The reasons a check, an item or a panel is not asked are worded here, once (``NO_PROVIDER`` and the others).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from service.core.judges.llm._client import NO_PROVIDER
from service.core.judges.llm._guard import CallType, max_tokens_for
from service.core.judges.llm._judging import AttemptOptions, Outcome, ask_until_parsed
from service.core.judges.llm._panels import resolve_endpoint

if TYPE_CHECKING:
    from service.core.judges.llm._client import ChatMessage, LLMClient
    from service.core.judges.llm._guard import CallGuard
    from service.core.judges.llm._panels import Judge
    from service.platform.settings import LLMSettings

__all__ = [
    "NO_ELIGIBLE_JUDGE",
    "NO_ELIGIBLE_JUDGE_AFTER_EXCLUSION",
    "NO_PROVIDER",
    "NO_PROVIDER_CONFIGURED",
    "ask_judge",
    "ask_panel",
    "below_budget",
    "call_cap_reached",
    "check_disabled",
    "panel_too_small",
    "run_all",
]

T = TypeVar("T")

# what a skipped item, check or adjudication reads (NO_PROVIDER itself is the client's: it also refuses the call)
NO_PROVIDER_CONFIGURED = f"{NO_PROVIDER} (TRISK_LLM_BASE_URL is empty)"
NO_ELIGIBLE_JUDGE = "no eligible judge"
NO_ELIGIBLE_JUDGE_AFTER_EXCLUSION = f"{NO_ELIGIBLE_JUDGE} after self-scoring exclusion"


def check_disabled(check: str) -> str:
    return f"{check} disabled for this request"


def below_budget(rank: int, n: int, budget: int, fraction: float) -> str:
    return f"below the review budget: rank {rank} of {n}, budget {budget} ({fraction:.0%})"


def call_cap_reached(max_calls: int) -> str:
    return f"call cap reached (max_calls={max_calls})"


def panel_too_small(panel: str, eligible: int, needed: int) -> str:
    return f"panel {panel!r} has {eligible} eligible judges for this candidate; adjudication needs {needed}"


def _first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception a task raised (a nested group is opened: a task that ran its own group)."""
    first = group.exceptions[0]
    return _first_failure(first) if isinstance(first, BaseExceptionGroup) else first


async def run_all(*coros: Coroutine[Any, Any, T]) -> list[T]:
    """The results in order, all run concurrently in one TaskGroup (see the module docstring)."""
    tasks: list[asyncio.Task[T]] = []
    failure: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except BaseExceptionGroup as failed:
        failure = _first_failure(failed)
    if failure is not None:
        # raised outside the except block, so it does not carry the group as its context
        raise failure
    return [task.result() for task in tasks]


async def ask_judge(
    client: LLMClient,
    judge: Judge,
    settings: LLMSettings,
    messages: Sequence[ChatMessage],
    *,
    call: CallType,
    prompt_version: str,
    parse: Callable[[str | None, str | None], tuple[T | None, str | None]],
    options: AttemptOptions,
    guard: CallGuard | None = None,
    source_chars: int = 0,
) -> Outcome[T]:
    """One judge of a panel asked until its answer parses (``ask_until_parsed``): at the judge's own endpoint, with
    the call type's ``max_tokens`` (``max_tokens_for``), charged to the judge on the guard."""
    return await ask_until_parsed(
        client,
        resolve_endpoint(judge, settings),
        messages,
        prompt_version=prompt_version,
        parse=parse,
        options=options,
        max_tokens=max_tokens_for(call, judge, settings, source_chars=source_chars),
        guard=guard,
        judge_id=judge.id,
    )


async def ask_panel(judges: Sequence[Judge], ask: Callable[[Judge], Coroutine[Any, Any, T]]) -> list[T]:
    """``ask`` every judge of a panel concurrently, results in panel order (``run_all``)."""
    return await run_all(*(ask(judge) for judge in judges))
