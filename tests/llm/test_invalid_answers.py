"""Judges that answer but cannot be parsed read ``invalid`` with the parse error and the raw answer, apart from judges
that timed out or failed; re-asking is bounded by attempts; the reason names the dominant cause."""

from __future__ import annotations

import pytest

from service.core.judges.llm import (
    AttemptOptions,
    CallGuard,
    CascadeItem,
    JudgeAnswer,
    ask_until_parsed,
    build_gemba_messages,
    dominant_cause,
    parse_score,
    resolve_endpoint,
    run_cascade,
)
from tests.fakes.openai_server import FakeOpenAIServer, Reply, fake, openai_server  # noqa: F401
from tests.llm.support import judge, make_client, panel, settings_for

SOURCE = "Evaṁ me sutaṁ."
CANDIDATE = "So I have heard."


async def test_an_unparseable_answer_is_asked_again_only_up_to_the_attempts(fake: FakeOpenAIServer) -> None:  # noqa: F811
    fake.script("prose", [Reply("The score is 10.")])
    settings = settings_for(fake, parse_attempts=3)
    j = judge("prose", "openai")
    async with make_client() as client:
        outcome = await ask_until_parsed(
            client,
            resolve_endpoint(j, settings),
            build_gemba_messages(SOURCE, CANDIDATE),
            prompt_version="t",
            parse=parse_score,
            options=AttemptOptions(max_attempts=settings.parse_attempts),
            guard=CallGuard(60.0),
        )
    assert outcome.status == "invalid"
    assert len(fake.requests_for("prose")) == 3 == len(outcome.attempts)  # the attempts, not the deadline, bound it
    assert outcome.parse_error == "not_a_number" and outcome.raw == "The score is 10."
    assert [a.temperature for a in outcome.attempts] == [0.0, 0.1, 0.2]


async def test_a_judge_that_answered_is_invalid_even_when_the_deadline_then_cuts_it_off(
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    fake.script("cutoff", [Reply("8", finish_reason="length"), Reply("75", delay=5.0)])
    settings = settings_for(fake)
    j = judge("cutoff", "openai")
    async with make_client() as client:
        outcome = await ask_until_parsed(
            client,
            resolve_endpoint(j, settings),
            build_gemba_messages(SOURCE, CANDIDATE),
            prompt_version="t",
            parse=parse_score,
            options=AttemptOptions(max_attempts=5),
            guard=CallGuard(1.0),
        )
    assert outcome.status == "invalid", outcome.error
    assert outcome.parse_error == "truncated" and outcome.raw == "8"
    assert outcome.error is not None and outcome.error.startswith("unparseable answer: truncated; then timed out")
    assert outcome.cost.timeouts == 1


async def test_a_check_whose_judges_all_answer_unparseably_reads_invalid_with_the_cause(
    fake: FakeOpenAIServer,  # noqa: F811
) -> None:
    settings = settings_for(fake, parse_attempts=2, review_budget=1.0)
    p = panel(judge("truncated", "openai", "a"), judge("truncated", "google", "b"), judge("junk", "xai", "c"))
    async with make_client() as client:
        result = await run_cascade(
            client, [CascadeItem("c1", SOURCE, CANDIDATE, routing_score=1.0)], p, settings, backtranslation=False
        )
    (checks,) = result.candidates
    gemba = checks.checks[0]
    assert gemba.status == "invalid"
    assert gemba.reason == "3 of 3 judges gave answers that do not parse: truncated at max_tokens"
    assert gemba.judges == {"invalid": 3} and gemba.attempts == 6
    assert checks.gemba_result is not None
    kept = {j.judge_id: (j.status, j.parse_error, j.raw) for j in checks.gemba_result.judges}
    assert kept["a"] == ("invalid", "truncated", "8") and kept["c"][:2] == ("invalid", "not_a_number")
    assert all(j.score is None for j in checks.gemba_result.judges)  # nothing made up


async def test_one_valid_judge_makes_the_check_run_and_the_others_are_counted(fake: FakeOpenAIServer) -> None:  # noqa: F811
    settings = settings_for(fake, parse_attempts=1, review_budget=1.0)
    p = panel(judge("score-80", "openai", "a"), judge("truncated", "google", "b"))
    async with make_client() as client:
        result = await run_cascade(
            client, [CascadeItem("c1", SOURCE, CANDIDATE, routing_score=1.0)], p, settings, backtranslation=False
        )
    gemba = result.candidates[0].checks[0]
    assert gemba.status == "ran" and gemba.reason is None
    assert gemba.judges == {"valid": 1, "invalid": 1} and gemba.attempts == 2


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        ([], None),
        ([JudgeAnswer("valid")], None),
        (
            [JudgeAnswer("invalid", "truncated"), JudgeAnswer("invalid", "empty"), JudgeAnswer("invalid", "truncated")],
            "3 of 3 judges gave answers that do not parse: truncated at max_tokens",
        ),
        (
            [JudgeAnswer("timed_out", error="timed out: slow"), JudgeAnswer("invalid", "empty"), JudgeAnswer("valid")],
            "1 of 3 judges gave answers that do not parse: empty answers",  # a tie: the cause a user can act on
        ),
        (
            [JudgeAnswer("timed_out", error="timed out: a"), JudgeAnswer("timed_out", error="timed out: a")],
            "2 of 2 judges gave no answer in time: timed out: a",
        ),
        (
            [JudgeAnswer("failed", error="UpstreamUnavailable: HTTP 500")],
            "1 of 1 judge could not be reached: UpstreamUnavailable: HTTP 500",
        ),
    ],
)
def test_the_dominant_cause_in_words(answers: list[JudgeAnswer], expected: str | None) -> None:
    assert dominant_cause(answers) == expected
