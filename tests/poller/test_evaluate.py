"""Poller evaluations end to end against the local OpenAI-protocol server: judges, retries, aggregation, skips."""

from __future__ import annotations

import msgspec
import pytest

from service.companions.poller import (
    POLLER_PROMPT_HASHES,
    DimensionScore,
    InterpretationIn,
    PoemIn,
    PollerEvaluation,
    PollerEvaluationRequest,
    PollerScored,
    PollerSkipped,
    PollerUnanswered,
    dimension_stats,
    overall_average,
    panel_scores,
    persona_version,
    plan_poller_evaluation,
    run_poller_evaluation,
)
from service.core.judges.llm import JudgeSpec
from service.platform.errors import InputError
from service.platform.settings import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.llm.support import make_client, settings_for

from .support import INTERPRETATION, PERSONA, POEM, TITLE

EIGHT_EN = """Role: I am Bei Dao, and this is my poem.
Content: 80 - sees the era
Language: 70 - notes the plain words
Imagery: 75 - the epitaph
Rhetorical techniques: 60 - misses the antithesis
Rhythm: 65 - ok
Defamiliarization: 50 - little
Thought and emotion: 85 - right
Modernity: 70 - fair"""
EIGHT_ZH = """角色：我是北岛
内容：90分
语言：80分
意象：85分
修辞手法：70分
节奏：75分
陌生化：60分
思想情感：95分
现代性：80分"""
EIGHT_JSON = (
    '{"role": "the poet", "scores": {"content": 70, "language": 60, "imagery": 65, "rhetorical_techniques": 50, '
    '"rhythm": 55, "defamiliarization": 40, "thought_and_emotion": 75, "modernity": 60}}'
)


def _request(**kwargs: object) -> PollerEvaluationRequest:
    options: dict[str, object] = {
        "poem": PoemIn(POEM, TITLE),
        "interpretation": INTERPRETATION,
        "persona": PERSONA,
        "judges": [JudgeSpec("judge-a", "openai"), JudgeSpec("judge-b", "qwen"), JudgeSpec("judge-c", "google")],
    }
    options.update(kwargs)
    return PollerEvaluationRequest(**options)  # type: ignore[arg-type]


async def _run(
    fake: FakeOpenAIServer, request: PollerEvaluationRequest, settings: LLMSettings | None = None
) -> PollerEvaluation:
    plan = plan_poller_evaluation(request)
    async with make_client() as client:
        return await run_poller_evaluation(client, plan, settings or settings_for(fake))


async def test_three_judges_three_formats_aggregated(fake: FakeOpenAIServer) -> None:
    fake.script("judge-a", [Reply(EIGHT_EN)])
    fake.script("judge-b", [Reply(EIGHT_ZH)])
    fake.script("judge-c", [Reply(EIGHT_JSON)])
    result = await _run(fake, _request())
    (item,) = result.items
    assert isinstance(item, PollerScored)
    assert [j.status for j in item.judges] == ["valid", "valid", "valid"]
    a, b, c = item.judges
    assert (a.role.names_author, b.role.names_author, c.role.names_author) == (True, True, False)  # type: ignore[union-attr]
    assert (
        a.overall == pytest.approx(69.375) and b.overall == pytest.approx(79.375) and c.overall == pytest.approx(59.375)
    )
    # by hand, per dimension over (a, b, c): content 80, 90, 70 -> mean 80, median 80, spread 20
    content = item.dimensions[0]
    assert (content.dimension, content.n, content.mean, content.median, content.min, content.max, content.spread) == (
        "content",
        3,
        80.0,
        80.0,
        70.0,
        90.0,
        20.0,
    )
    defamiliarization = item.dimensions[5]
    assert (defamiliarization.mean, defamiliarization.median, defamiliarization.spread) == (50.0, 50.0, 20.0)
    assert item.overall == pytest.approx((69.375 + 79.375 + 59.375) / 3)
    assert panel_scores(item)["thought_and_emotion"] == pytest.approx(85.0)
    # the judges were asked at the research's temperature, each once, with the persona in the prompt
    assert sorted(r.temperature for r in fake.requests) == [0.1, 0.1, 0.1]
    assert all(PERSONA.experience_and_views in r.user_text for r in fake.requests)
    sig = result.signature
    assert (sig.strategy, sig.language, sig.temperature, sig.prompt_hash) == (
        "P3",
        "en",
        0.1,
        POLLER_PROMPT_HASHES["en"],
    )
    assert sig.persona_version == persona_version(PERSONA) and sig.judges == ["judge-a", "judge-b", "judge-c"]
    assert result.cost.calls == 3 and item.cost.calls == 3


async def test_partial_answers_keep_their_failures_and_the_overall_needs_every_dimension(
    fake: FakeOpenAIServer,
) -> None:
    fake.script("judge-a", [Reply("Content: 80\nLanguage: 101\nLanguage: 70")])
    fake.script("judge-b", [Reply("Content: 60 - x")])
    result = await _run(fake, _request(judges=[JudgeSpec("judge-a", "openai"), JudgeSpec("judge-b", "qwen")]))
    (item,) = result.items
    assert isinstance(item, PollerScored)
    a = item.judges[0]
    assert a.status == "valid" and a.overall is None
    errors = {d.dimension: getattr(d, "error", None) for d in a.dimensions}
    assert errors["content"] is None and errors["language"] == "conflicting" and errors["modernity"] == "missing"
    assert [(s.dimension, s.n, s.mean) for s in item.dimensions[:2]] == [("content", 2, 70.0), ("language", 0, None)]
    assert item.overall is None  # seven dimensions without any score: no average over a different set
    assert len(fake.requests) == 2  # partial answers are not asked again


async def test_unusable_answer_is_asked_again_one_temperature_step_up(fake: FakeOpenAIServer) -> None:
    fake.script("judge-a", [Reply("I liked it, 80 or so."), Reply(EIGHT_EN)])
    fake.script("judge-b", [Reply("Content: 8", finish_reason="length")])
    request = _request(judges=[JudgeSpec("judge-a", "openai"), JudgeSpec("judge-b", "qwen")], temperature=0.2)
    result = await _run(fake, request)
    (item,) = result.items
    assert isinstance(item, PollerScored)
    a, b = item.judges
    assert a.status == "valid" and [(t.temperature, t.error) for t in a.attempts] == [(0.2, "no_scores"), (0.3, None)]
    assert b.status == "invalid" and b.error == "unparseable answer: truncated" and b.dimensions == []
    assert [t.temperature for t in b.attempts] == [0.2, 0.3]
    assert not any(isinstance(d, DimensionScore) for d in b.dimensions)
    assert item.dimensions[0].n == 1 and item.dimensions[0].mean == 80.0


async def test_invalid_judge_shows_its_failures_but_no_score(fake: FakeOpenAIServer) -> None:
    fake.script("judge-a", [Reply("Content: 0.8\nLanguage: 0.7")])
    result = await _run(fake, _request(judges=[JudgeSpec("judge-a", "openai")], max_attempts=1))
    (item,) = result.items
    # no judge gave a usable answer: not "scored" with n = 0 everywhere, but unanswered with the cause
    assert isinstance(item, PollerUnanswered)
    assert item.reason == "1 of 1 judge gave answers that do not parse: no dimension scored"
    (a,) = item.judges
    assert a.status == "invalid" and a.error == "unparseable answer: no_scores" and a.parse_error == "no_scores"
    assert [getattr(d, "error", None) for d in a.dimensions[:3]] == ["fraction_scale", "fraction_scale", "missing"]
    assert all(s.n == 0 and s.mean is None and s.reason == item.reason for s in item.dimensions)


async def test_without_a_provider_every_item_is_skipped(fake: FakeOpenAIServer) -> None:
    result = await _run(fake, _request(), LLMSettings())
    (item,) = result.items
    assert item == PollerSkipped("1", "no LLM provider configured")
    assert fake.requests == []


async def test_same_family_judges_excluded_or_flagged(fake: FakeOpenAIServer) -> None:
    fake.script("judge-a", [Reply(EIGHT_EN)])
    fake.script("judge-b", [Reply(EIGHT_ZH)])
    judges = [JudgeSpec("judge-a", "openai"), JudgeSpec("judge-b", "qwen")]
    gpt = InterpretationIn("r1", INTERPRETATION, model="openai/gpt-4-turbo")
    excluded = await _run(fake, _request(interpretation=None, interpretations=[gpt], judges=judges))
    (item,) = excluded.items
    assert isinstance(item, PollerScored) and [j.judge_id for j in item.judges] == ["judge-b"]
    assert [e.judge_id for e in item.excluded] == ["judge-a"]
    kept = await _run(
        fake, _request(interpretation=None, interpretations=[gpt], judges=judges, exclude_own_family=False)
    )
    (item,) = kept.items
    assert isinstance(item, PollerScored) and [(j.judge_id, j.same_family) for j in item.judges] == [
        ("judge-a", True),
        ("judge-b", False),
    ]
    alone = await _run(fake, _request(interpretation=None, interpretations=[gpt], judges=judges[:1]))
    assert isinstance(alone.items[0], PollerSkipped) and alone.items[0].reason == "no eligible judge"


async def test_several_interpretations_of_one_poem(fake: FakeOpenAIServer) -> None:
    fake.script("judge-a", [Reply(EIGHT_EN)])
    items = [InterpretationIn("x", "first reading"), InterpretationIn("y", "second reading")]
    result = await _run(
        fake, _request(interpretation=None, interpretations=items, judges=[JudgeSpec("judge-a", "openai")])
    )
    assert [i.interpretation_id for i in result.items] == ["x", "y"]
    assert sorted(r.user_text.count("first reading") for r in fake.requests) == [0, 1]


async def test_p0_ignores_a_persona_and_records_none(fake: FakeOpenAIServer) -> None:
    fake.script("judge-a", [Reply(EIGHT_EN)])
    result = await _run(fake, _request(strategy="P0", judges=[JudgeSpec("judge-a", "openai")]))
    assert result.signature.persona_version is None and result.signature.strategy == "P0"
    (request,) = fake.requests
    assert PERSONA.basic_information not in request.user_text


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"persona": None}, "P3 needs a persona"),
        ({"persona_id": "p1"}, "either persona_id or persona"),
        ({"persona": None, "persona_id": "p1"}, "was not resolved"),
        ({"interpretations": [InterpretationIn("a", "x")]}, "either interpretation or interpretations"),
        ({"interpretation": None}, "either interpretation or interpretations"),
        (
            {"interpretation": None, "interpretations": [InterpretationIn("a", "x"), InterpretationIn("a", "y")]},
            "same id",
        ),
        ({"interpretation": " "}, "interpretation is empty"),
        ({"poem": PoemIn("x" * 20_001)}, "poem.text has 20001 characters"),
        ({"dimensions": ["content", "beauty"]}, "unknown dimension"),
        ({"persona": msgspec.structs.replace(PERSONA, critics_comments="x" * 20_001)}, "the limit is 20000"),
        ({"judges": [JudgeSpec("mystery")]}, "cannot tell the family"),
        ({"judges": None, "panel": "nope"}, "no judge panel"),
    ],
)
def test_bad_requests_are_refused_before_anything_runs(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        plan_poller_evaluation(_request(**changes))


def test_a_stored_persona_is_used_for_persona_id() -> None:
    plan = plan_poller_evaluation(_request(persona=None, persona_id="bei-dao"), persona=PERSONA)
    assert plan.persona == PERSONA and plan.persona_id == "bei-dao"
    assert plan.persona_version == persona_version(PERSONA)
    # the plan round-trips as JSON (it is what a worker gets)
    assert msgspec.json.decode(msgspec.json.encode(plan), type=type(plan)) == plan


def test_unknown_strategy_is_a_schema_error() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"Invalid enum value .P9. - at `\$.strategy`"):
        msgspec.convert({"poem": {"text": "x"}, "interpretation": "y", "strategy": "P9"}, PollerEvaluationRequest)


@pytest.mark.parametrize(
    ("scores", "stats"),
    [
        ([90.0, 70.0, 80.0], (3, 80.0, 80.0, 70.0, 90.0, 20.0)),
        ([55.5, 60.0], (2, 57.75, 57.75, 55.5, 60.0, 4.5)),
        ([100.0], (1, 100.0, 100.0, 100.0, 100.0, 0.0)),
    ],
)
def test_dimension_stats(scores: list[float], stats: tuple[float, ...]) -> None:
    s = dimension_stats("content", scores)
    assert (s.n, s.mean, s.median, s.min, s.max, s.spread) == pytest.approx(stats)


def test_overall_average_needs_every_dimension() -> None:
    assert overall_average([dimension_stats("a", [80.0]), dimension_stats("b", [60.0, 70.0])]) == pytest.approx(72.5)
    assert overall_average([dimension_stats("a", [80.0]), dimension_stats("b", [])]) is None
