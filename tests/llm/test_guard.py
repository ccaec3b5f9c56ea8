"""Bounded judge work: call sizes per call type, the shared deadline and benching of a judge that keeps timing out."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from service.core.judges.llm import CallGuard, Judge, max_tokens_for, score_candidate, select_judges
from service.platform.settings import LLMSettings, get_settings
from tests.fakes.openai_server import FakeOpenAIServer, fake, openai_server  # noqa: F401
from tests.llm.support import judge, make_client, panel, settings_for

SETTINGS = LLMSettings(gemba_max_tokens=16, text_max_tokens=1024)
PLAIN = Judge(id="j", model="m", family="openai")
REASONING = Judge(id="r", model="m", family="openai", max_tokens=8000)


@pytest.mark.parametrize(
    ("call", "judge", "source_chars", "expected"),
    [
        ("gemba", PLAIN, 500, 16),  # a GEMBA answer is one number
        ("gemba", None, 0, 16),
        ("gemba", REASONING, 500, 8000),  # the judge's own override wins for every call type
        ("backtranslation", PLAIN, 100, 164),  # about the source's length, plus room
        ("backtranslation", PLAIN, 5000, 1024),  # never beyond the free-text cap
        ("backtranslation", REASONING, 100, 8000),
        ("text", PLAIN, 0, 1024),
    ],
)
def test_max_tokens_per_call_type(call: str, judge: Judge | None, source_chars: int, expected: int) -> None:
    assert max_tokens_for(call, judge, SETTINGS, source_chars=source_chars) == expected  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_deadline_is_shared_and_a_judge_is_benched_after_its_second_timeout() -> None:
    clock = Clock()
    guard = CallGuard(10.0, clock=clock)
    assert guard.refusal("a") is None and guard.remaining() == 10.0
    guard.timed_out("a")
    assert guard.refusal("a") is None and "a" not in guard.benched  # one timeout: asked again
    guard.timed_out("a")
    assert "timed out 2 times" in str(guard.refusal("a")) and guard.benched == {"a"}
    assert guard.refusal("b") is None  # another judge is still asked
    clock.now = 110.0
    assert "deadline of 10 s passed" in str(guard.refusal("b")) and guard.benched == {"a", "b"}


def test_no_deadline_when_the_setting_is_zero() -> None:
    guard = CallGuard(0.0)
    assert guard.remaining() == float("inf") and guard.refusal("a") is None


async def test_waiting_for_a_call_slot_counts_against_the_deadline(fake: FakeOpenAIServer) -> None:  # noqa: F811
    # one call per 5 s: the second and third judges would wait 5 and 10 s for their turn; the deadline is 1.5 s
    judges = [judge(f"score-{80 + i}", "openai", f"j{i}") for i in range(3)]
    selection = select_judges(panel(*judges), None)
    guard = CallGuard(1.5)
    started = time.monotonic()
    async with make_client(requests_per_second=0.2) as client:
        result = await score_candidate(
            client, selection, settings_for(fake), source="Evaṃ me sutaṃ.", candidate=f"Thus I heard {time.time()}.",
            guard=guard,
        )  # fmt: skip
    assert time.monotonic() - started < 3.0
    assert [j.status for j in result.judges] == ["valid", "timed_out", "timed_out"]
    assert result.stats.n_valid == 1 and result.stats.n_judges == 3
    assert guard.costs["j1"].timeouts == 1 and guard.costs["j0"].timeouts == 0


def test_a_shutdown_without_a_deadline_is_not_a_timeout() -> None:
    from workers.policy import llm_job_timeout, stopped_by_timeout

    settings = replace(get_settings(), llm=LLMSettings(deadline_seconds=0.0))
    limit = llm_job_timeout(settings)
    assert not stopped_by_timeout(0.0, limit, settings.llm.deadline_seconds)  # cancelled at once: a shutdown
    assert stopped_by_timeout(5.0, 2.0, settings.llm.deadline_seconds)  # ARQ's timeout (2 s) passed
