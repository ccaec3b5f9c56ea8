"""The Poller answer parser against the formats real models write, and against junk."""

from __future__ import annotations

import pytest

from service.companions.poller import (
    DimensionFailure,
    DimensionScore,
    parse_poller_answer,
    resolve_dimensions,
)

from .support import PERSONA

THREE = resolve_dimensions(["content", "rhetorical_techniques", "thought_and_emotion"])

# answer -> expected per dimension (a score, or the parse error), for content / rhetorical / thought & emotion
TABLE: list[tuple[str, str, dict[str, float | str]]] = [
    (
        "plain lines",
        "Content: 85 - The reader sees the scene.\nRhetorical techniques: 70 - misses the irony\n"
        "Thought and emotion: 90 - right",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "markdown, numbering, units",
        "1. **Content**: **85/100** – good\n2. *Rhetorical Techniques*: 70分\n3. `Thought & Emotion`: 90 points",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "Chinese with full-width digits and colons",
        "内容：８５分。读者看到了场景。\n修辞手法：７０ - 忽略了反讽\n思想情感：90分",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "bilingual labels",
        "内容（Content）：85\nRhetorical techniques (修辞手法): 70\n思想与情感: 90",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "markdown table with header",
        "| Dimension | Score | Reason |\n|---|:---:|---|\n| Content | 85 | fine |\n"
        "| **Rhetorical techniques** | 70 | thin |\n| Thought and emotion | 90 | deep |",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "Chinese table, reason column first",
        "| 理由 | 维度 | 评分 |\n|---|---|---|\n| 很好 | 内容 | 85 |\n| 一般 | 修辞 | 70分 |\n"
        "| 深刻 | 思想情感 | N/A |",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": "not_a_number"},
    ),
    (
        "JSON in a code fence",
        '```json\n{"content": {"score": 85, "reason": "r"}, "rhetorical_techniques": "70", '
        '"thought_and_emotion": 90.0}\n```',
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "JSON list",
        '[{"dimension": "Content", "score": 85}, {"dimension": "修辞手法", "score": 101}, '
        '{"name": "thought and emotion", "score": true}]',
        {"content": 85.0, "rhetorical_techniques": "out_of_range", "thought_and_emotion": "not_a_number"},
    ),
    (
        "JSON with a dimension twice (kept, not silently overwritten)",
        '{"scores": {"content": 85, "content": 60, "rhetorical_techniques": 70}}',
        {"content": "conflicting", "rhetorical_techniques": 70.0, "thought_and_emotion": "missing"},
    ),
    (
        "headings with Score and Reason lines",
        "### Content\nScore: 85\nReason: sees the scene\n\n### Rhetorical techniques (70/100)\n"
        "### Thought and emotion\nThe reader is close.\n评分：90",
        {"content": 85.0, "rhetorical_techniques": 70.0, "thought_and_emotion": 90.0},
    ),
    (
        "out of range, other scales, fractions, ranges",
        "Content: 101\nRhetorical techniques: 8/10\nThought and emotion: 0.55",
        {"content": "out_of_range", "rhetorical_techniques": "wrong_scale", "thought_and_emotion": "fraction_scale"},
    ),
    (
        "negative, range",
        "Content: -1 - terrible\nRhetorical techniques: 80-85\nThought and emotion: 70 to 75",
        {"content": "out_of_range", "rhetorical_techniques": "ambiguous", "thought_and_emotion": "ambiguous"},
    ),
    (
        "a dimension given twice: same score counts once, another score conflicts",
        "Content: 85 - a\nContent: 85 - b\nRhetorical techniques: 70\nRhetorical techniques: 75\n"
        "Thought and emotion: 90",
        {"content": 85.0, "rhetorical_techniques": "conflicting", "thought_and_emotion": 90.0},
    ),
    (
        "prose around the lines, an overall line, a word instead of a number",
        "Here is my evaluation.\nContent: 85 - ok\nRhetorical techniques: N/A\nOverall: 80\nThought and emotion: ٨٥",
        {"content": 85.0, "rhetorical_techniques": "missing", "thought_and_emotion": "missing"},
    ),
    (
        "zero is a score",
        "Content: 0 - completely wrong\nRhetorical techniques: 100\nThought and emotion: 0.0",
        {"content": 0.0, "rhetorical_techniques": 100.0, "thought_and_emotion": 0.0},
    ),
]


@pytest.mark.parametrize(("name", "answer", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_parse_table(name: str, answer: str, expected: dict[str, float | str]) -> None:
    parsed = parse_poller_answer(answer, dimensions=THREE)
    got: dict[str, float | str] = {}
    for d in parsed.dimensions:
        got[d.dimension] = d.score if isinstance(d, DimensionScore) else d.error
    assert got == expected
    # an answer with no score at all is unusable as a whole (asked again), one with some scores is kept
    assert parsed.error == (None if any(isinstance(v, float) for v in expected.values()) else "no_scores")
    assert [d.dimension for d in parsed.dimensions] == [d.name for d in THREE]


def test_reasons_are_the_judges_own_words() -> None:
    parsed = parse_poller_answer(
        "**Content**: 85 - The reader sees **the** scene，很好。\n内容以外\n修辞手法：７０分，理由：忽略了反讽\n"
        "### Thought and emotion\nScore: 90\nReason: deep",
        dimensions=THREE,
    )
    reasons = [d.reason for d in parsed.dimensions if isinstance(d, DimensionScore)]
    assert reasons == ["The reader sees **the** scene，很好。", "忽略了反讽", "deep"]


@pytest.mark.parametrize(
    ("answer", "finish_reason", "error"),
    [
        ("Content: 85\nRhetorical techniques: 7", "length", "truncated"),
        ("", "stop", "empty"),
        (None, "stop", "empty"),
        ("Overall a fine reading; I would give it 80 or maybe 85.", "stop", "no_scores"),
        ("Content: 101\nRhetorical techniques: 0.7", "stop", "no_scores"),
    ],
)
def test_unusable_answers(answer: str | None, finish_reason: str, error: str) -> None:
    parsed = parse_poller_answer(answer, finish_reason, dimensions=THREE)
    assert parsed.error == error
    assert parsed.scores == {}
    if error in ("truncated", "empty"):
        assert parsed.dimensions == []


def test_failures_quote_what_the_judge_wrote() -> None:
    parsed = parse_poller_answer("Content: 85\nContent: 90\nRhetorical techniques: 8/10", dimensions=THREE)
    content, rhetoric, thought = parsed.dimensions
    assert content == DimensionFailure("content", "conflicting", "85 vs 90")
    assert rhetoric == DimensionFailure("rhetorical_techniques", "wrong_scale", "8/10")
    assert thought == DimensionFailure("thought_and_emotion", "missing")


@pytest.mark.parametrize(
    ("answer", "text", "names", "before"),
    [
        (
            "Role: I am Bei Dao, the author of this poem.\nContent: 85",
            "I am Bei Dao, the author of this poem.",
            True,
            True,
        ),
        ("角色：我是诗人北岛\n内容：85", "我是诗人北岛", True, True),
        ("**Role:** an ordinary reader\nContent: 85", "an ordinary reader", False, True),
        ("Content: 85\nMy role: the poet", "the poet", False, False),
        ('{"role": "I am 北岛", "scores": {"content": 85}}', "I am 北岛", True, None),
    ],
)
def test_declared_role(answer: str, text: str, names: bool, before: bool | None) -> None:
    parsed = parse_poller_answer(answer, dimensions=THREE, persona=PERSONA)
    assert parsed.role is not None
    assert (parsed.role.text, parsed.role.names_author, parsed.role.before_scores) == (text, names, before)


def test_no_role_line_and_no_persona() -> None:
    assert parse_poller_answer("Content: 85", dimensions=THREE, persona=PERSONA).role is None
    role = parse_poller_answer("Role: Bei Dao\nContent: 85", dimensions=THREE).role
    assert role is not None and role.names_author is None


# the layout of the papers' example answers: each dimension's score on its own line, the reason in the paragraph below
PAPER_LAYOUT = """Role: I am Bei Dao, the author of this poem.

1. Content: 85
The reader sees that the poem answers an era of lies
and names what it refuses.

2. Language: 70
**The plain, aphoristic lines are noticed, their irony less so.**

3. Imagery: 75

The gilded sky and the bent reflections of the dead are read as a false heaven.
4. Rhetorical techniques: 60
5. Rhythm: 65 - the short lines are heard
6. Defamiliarization: 50
Little is said about estrangement.
7. Thought and emotion: 85
Right about the defiance.
8. Modernity: 70
Fair."""


def test_reasons_in_the_paragraph_after_the_score_are_read() -> None:
    parsed = parse_poller_answer(PAPER_LAYOUT, dimensions=resolve_dimensions(None), persona=PERSONA)
    assert parsed.error is None and len(parsed.scores) == 8
    reasons = {d.dimension: d.reason for d in parsed.dimensions if isinstance(d, DimensionScore)}
    assert reasons["content"] == "The reader sees that the poem answers an era of lies and names what it refuses."
    assert reasons["language"] == "The plain, aphoristic lines are noticed, their irony less so."
    assert reasons["imagery"] == "The gilded sky and the bent reflections of the dead are read as a false heaven."
    assert reasons["rhetorical_techniques"] is None  # the next dimension follows at once: no reason was given
    assert reasons["rhythm"] == "the short lines are heard"  # a reason on the line itself is kept
    assert reasons["defamiliarization"] == "Little is said about estrangement."
    assert reasons["modernity"] == "Fair."
    assert parsed.role is not None and parsed.role.before_scores
