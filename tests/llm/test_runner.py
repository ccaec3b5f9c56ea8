"""The panel runner: one failing judge call cancels its siblings in every panel (GEMBA, backtranslation with GEMBA in
the cascade, MATA grading, Poller, adjudication), and the failure leaves as itself, not as an ExceptionGroup."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service.companions.mata import GradeRequest, plan_grades, run_grades
from service.companions.poller import PoemIn, PollerEvaluationRequest, plan_poller_evaluation, run_poller_evaluation
from service.core.judges.llm import (
    CascadeItem,
    ChatResult,
    Cost,
    Endpoint,
    JudgeSpec,
    Usage,
    run_all,
    run_cascade,
    score_candidate,
    select_judges,
)
from service.platform.settings import LLMSettings
from service.review.adjudication import run_panel
from tests.llm.support import judge, panel

# loopback, and never dialled: the client below answers in-process
SETTINGS = LLMSettings(base_url="http://127.0.0.1:9/v1", api_key="k")
SLOW = ("slow-a", "slow-b")


class Panicky:
    """A client whose ``broken`` model raises an unexpected error once its siblings are waiting on their answers;
    the others wait for an answer that never comes and record being cancelled."""

    def __init__(self) -> None:
        self.waiting: list[str] = []
        self.cancelled: list[str] = []

    async def chat(self, endpoint: Endpoint, messages: Any, **kwargs: Any) -> ChatResult:
        if endpoint.model == "broken":
            while len(self.waiting) < len(SLOW):
                await asyncio.sleep(0)
            raise RuntimeError("boom")
        self.waiting.append(endpoint.model)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.append(endpoint.model)
            raise
        return ChatResult("50", "stop", endpoint.model, Usage(), 1.0, 1)  # pragma: no cover - cancelled first


def _judges() -> list[Any]:
    return [judge("broken", "openai"), *(judge(m, "openai") for m in SLOW)]


def _specs() -> list[JudgeSpec]:
    return [JudgeSpec(model=j.model, family=j.family) for j in _judges()]


async def _gemba(client: Any) -> object:
    selection = select_judges(panel(*_judges()), None)
    return await score_candidate(client, selection, SETTINGS, source="Evaṃ me sutaṃ.", candidate="Thus I heard.")


async def _cascade(client: Any) -> object:
    # GEMBA of the first judge's panel and the backtranslation run side by side: both are siblings of one unit
    item = CascadeItem("c1", "Evaṃ me sutaṃ.", "Thus I heard.", routing_score=1.0)
    return await run_cascade(client, [item], panel(*_judges()), SETTINGS, budget_fraction=1.0, max_calls=10)


async def _grades(client: Any) -> object:
    plan = plan_grades(GradeRequest(question="Q?", answer="A.", response="A.", judges=_specs()))
    return await run_grades(client, plan, SETTINGS)


async def _poller(client: Any) -> object:
    request = PollerEvaluationRequest(
        poem=PoemIn(text="A poem."), interpretation="It is a poem.", judges=_specs(), strategy="P0"
    )
    return await run_poller_evaluation(client, plan_poller_evaluation(request), SETTINGS)


async def _adjudication(client: Any) -> object:
    return await run_panel(client, _judges(), SETTINGS, source="Evaṃ.", reference="Thus.", candidate="So.")


PANELS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "gemba": _gemba,
    "cascade": _cascade,
    "mata": _grades,
    "poller": _poller,
    "adjudication": _adjudication,
}


@pytest.mark.parametrize("name", list(PANELS))
async def test_one_failing_judge_call_cancels_its_siblings(name: str) -> None:
    client = Panicky()
    with pytest.raises(RuntimeError, match="boom"):  # itself, not an ExceptionGroup
        await PANELS[name](client)
    # already when the failure arrives, not some time later: nothing runs on for a unit that failed
    assert sorted(client.cancelled) == sorted(client.waiting) and len(client.cancelled) >= len(SLOW)


async def test_run_all_keeps_the_order_and_raises_the_first_failure() -> None:
    async def after(seconds: float, value: str) -> str:
        await asyncio.sleep(seconds)
        return value

    assert await run_all(after(0.02, "a"), after(0, "b")) == ["a", "b"]

    async def fails(seconds: float, error: Exception) -> None:
        await asyncio.sleep(seconds)
        raise error

    with pytest.raises(KeyError):
        await run_all(fails(0.01, KeyError("first")), fails(0.05, ValueError("later")))
    assert await run_all() == []


def test_a_total_cost_sums_every_field() -> None:
    parts = [Cost(calls=1, cache_hits=2, prompt_tokens=3, completion_tokens=4, timeouts=1, seconds=0.25)] * 3
    assert Cost.total(parts) == Cost(6 // 2, 6, 9, 12, 3, 0.75)
    assert Cost.total([]) == Cost()
