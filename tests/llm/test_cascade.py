"""The cascade: which candidates get LLM checks under a budget and a call cap, and what it cost."""

from __future__ import annotations

import math

import pytest

from service.core.judges.llm import NO_PROVIDER, CascadeItem, plan_cascade, run_cascade
from service.core.types import SignalSkipped, SignalValue
from service.platform.errors import InputError
from service.platform.settings import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer, Reply

from .support import judge, make_client, panel, settings_for

PANEL = panel(
    judge("score-90", "openai"),
    judge("score-80", "google"),
    judge("score-70", "xai"),
    judge("score-60", "anthropic"),
    per_candidate=3,
)


def items(n: int, model: str = "meta-llama/llama-3.3-70b-instruct") -> list[CascadeItem]:
    # routing scores 0..n-1 shuffled deterministically, so rank order differs from input order
    return [
        CascadeItem(id=f"c{i}", source="Sīlaṁ.", candidate=f"Virtue {i}.", model=model, routing_score=(i * 7) % n)
        for i in range(n)
    ]


def test_budget_picks_the_highest_routing_scores() -> None:
    batch = items(10)
    plan = plan_cascade(batch, PANEL, budget_fraction=0.2, max_calls=1000)
    chosen = {p.id for p in plan.candidates if p.runs("gemba")}
    top2 = {i.id for i in sorted(batch, key=lambda i: -i.routing_score)[:2]}
    assert chosen == top2 and plan.budget_candidates == 2
    assert plan.planned_calls == 2 * (3 + 1)
    skipped = next(p for p in plan.candidates if p.rank == 3)
    assert all(c.status == "skipped" and c.reason.startswith("below the review budget") for c in skipped.checks)  # type: ignore[union-attr]
    assert [p.id for p in plan.candidates] == [i.id for i in batch]  # input order kept


def test_call_cap_limits_spend_gemba_first() -> None:
    plan = plan_cascade(items(10), PANEL, budget_fraction=1.0, max_calls=10)
    assert plan.planned_calls == 8
    by_rank = sorted(plan.candidates, key=lambda p: p.rank)
    assert [(p.runs("gemba"), p.runs("backtranslation")) for p in by_rank[:4]] == [
        (True, True),
        (True, True),
        (False, False),  # 8 spent: GEMBA needs 3 more, over the cap of 10; no back-filling after that
        (False, False),
    ]
    assert {c.reason for p in by_rank[2:] for c in p.checks} == {"call cap reached (max_calls=10)"}


def test_budget_rounds_up_and_nan_ranks_last() -> None:
    batch = [CascadeItem("a", "s", "c", routing_score=math.nan), CascadeItem("b", "s", "c", routing_score=-5.0)]
    plan = plan_cascade(batch, PANEL, budget_fraction=0.2, max_calls=100)
    assert plan.budget_candidates == 1
    assert [p.rank for p in plan.candidates] == [2, 1]
    with pytest.raises(InputError):
        plan_cascade(batch, PANEL, budget_fraction=1.5, max_calls=1)


async def test_no_provider_skips_everything_without_numbers(fake: FakeOpenAIServer) -> None:
    result = await run_cascade(None, items(5), PANEL, LLMSettings(base_url=""), budget_fraction=1.0, max_calls=100)
    assert fake.requests == []
    for c in result.candidates:
        assert c.gemba == SignalSkipped(reason=NO_PROVIDER) and c.backtranslation == SignalSkipped(reason=NO_PROVIDER)
        assert {(o.status, o.reason) for o in c.checks} == {("skipped", NO_PROVIDER)}
        assert c.gemba_result is None and c.backtranslation_result is None
    assert result.cost.calls == 0 and result.plan.planned_calls == 0


async def test_run_cascade_end_to_end_with_costs(fake: FakeOpenAIServer) -> None:
    fake.script("score-90", [Reply('{"pali": "sīla"}')])  # the first eligible judge also backtranslates
    batch = items(10, model="anthropic/claude-opus-4.5")  # the anthropic judge is excluded
    async with make_client() as client:
        result = await run_cascade(client, batch, PANEL, settings_for(fake), budget_fraction=0.2, max_calls=100)
    ran = [c for c in result.candidates if any(o.status == "ran" for o in c.checks)]
    assert len(ran) == 2
    # GEMBA: score-90's first reply is JSON (unparseable as a score) -> invalid; the other two judges score
    assert fake.requests_for("score-60") == []
    for c in ran:
        assert isinstance(c.backtranslation, SignalValue)
        assert c.backtranslation.value == pytest.approx(100 * 308 / 1123, abs=1e-6)
        assert isinstance(c.gemba, SignalValue) and c.gemba.value == pytest.approx(25.0)
        assert c.gemba_result is not None and [e.judge_id for e in c.gemba_result.excluded] == ["score-60"]
    assert result.cost.calls == len(fake.requests)
    assert result.cost.prompt_tokens > 0 and result.cost.completion_tokens > 0
    assert sum(c.cost.calls for c in result.candidates) == result.cost.calls
