"""Error spans from the judges: parsing, locating quotes in the candidate, merging across judges, and the cascade's
``error_spans`` check against the scripted server (good, partial, hallucinated and malformed spans)."""

from __future__ import annotations

import json

import pytest

from service.core.findings import JUDGE_SPAN_RULE, findings_of
from service.core.judges.llm import (
    MQM_WEIGHTS,
    NO_PROVIDER,
    SPANS_PROMPT_VERSION,
    CascadeItem,
    JudgeSpans,
    LocatedSpan,
    locate_quote,
    merge_spans,
    parse_spans,
    plan_cascade,
    run_cascade,
)
from service.core.types import SignalSkipped, SignalValue, Span
from service.platform.settings import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer, Reply

from .support import judge, make_client, panel, settings_for

SOURCE = "Na kho, bhikkhave, cattāro satipaṭṭhānā bhāvetabbā."
CANDIDATE = "Mendicants, the four  kinds of Mindfulness should be developed by the wise."


def answer(*errors: tuple[str, str, str]) -> str:
    return json.dumps({"errors": [{"span": q, "category": c, "severity": s} for q, c, s in errors]})


# --- parsing ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "finish", "error"),
    [
        ('{"errors": []}', "stop", None),
        ('```json\n{"errors": [{"span": "x", "category": "Fluency", "severity": " Minor"}]}\n```', "stop", None),
        ('Here it is: {"errors": [{"span": "x", "category": "style", "severity": "major"}]} done', "stop", None),
        ('{"errors": []', "length", "truncated"),
        ("", "stop", "empty"),
        ("There are no errors.", "stop", "no_json_object"),
        ('{"errors": [}', "stop", "no_json_object"),
        ('{"spans": []}', "stop", "no_errors_list"),
        ('{"errors": "none"}', "stop", "no_errors_list"),
        ('{"errors": [{"span": "x", "category": "accuracy/grammar", "severity": "minor"}]}', "stop", "bad_error_item"),
        ('{"errors": [{"span": "x", "category": "fluency", "severity": "neutral"}]}', "stop", "bad_error_item"),
        ('{"errors": [{"span": "", "category": "fluency", "severity": "minor"}]}', "stop", "bad_error_item"),
        ('{"errors": [{"category": "fluency", "severity": "minor"}]}', "stop", "bad_error_item"),
        ('{"errors": ["x"]}', "stop", "bad_error_item"),
    ],
    ids=[
        "empty-list",
        "fenced-case-spaces",
        "prose-around",
        "truncated",
        "empty",
        "prose",
        "broken-json",
        "no-errors-key",
        "errors-not-list",
        "unknown-category",
        "unknown-severity",
        "empty-quote",
        "missing-quote",
        "not-an-object",
    ],
)
def test_parse_spans(text: str, finish: str, error: str | None) -> None:
    spans, got = parse_spans(text, finish)
    assert got == error
    assert (spans is None) == (error is not None)


def test_parse_spans_reads_category_and_severity_never_guesses() -> None:
    spans, error = parse_spans(
        answer(("four kinds", "Accuracy/Number", "MAJOR"), ("wise", "accuracy/addition", "minor"))
    )
    assert error is None and spans is not None
    assert [(s.quote, s.category, s.severity) for s in spans] == [
        ("four kinds", "accuracy/number", "major"),
        ("wise", "accuracy/addition", "minor"),
    ]
    # one bad item spoils the answer: no partial reading with a made-up category
    bad = answer(("four kinds", "accuracy/number", "major"), ("wise", "meaning", "minor"))
    assert parse_spans(bad) == (None, "bad_error_item")


# --- locating ----------------------------------------------------------------------------------------------------


def test_locate_exact_then_normalised_never_guessed() -> None:
    assert locate_quote(CANDIDATE, "four  kinds") == (16, 27, "exact")
    # whitespace collapsed and case folded: the offsets are the candidate's own, double space included
    start, end, how = locate_quote(CANDIDATE, "Four kinds of mindfulness") or (0, 0, "")
    assert (CANDIDATE[start:end], how) == ("four  kinds of Mindfulness", "normalised")
    assert locate_quote(CANDIDATE, "the eightfold path") is None
    assert locate_quote(CANDIDATE, "four kind of") is None  # close is not found
    text = "the wise and the wise"
    assert locate_quote(text, "wise") == (4, 8, "exact")
    assert locate_quote(text, "wise", [(4, 8)]) == (17, 21, "exact")  # the same judge quoting it twice
    assert locate_quote(text, "WISE", [(4, 8)]) == (17, 21, "normalised")
    decomposed = "Sa\u0304vatthi\u0304"  # NFD in the quote, NFC in the text
    assert locate_quote("near Sāvatthī", decomposed) == (5, 13, "exact")


async def test_a_repeated_quote_counts_once_and_is_not_reported_missing(fake: FakeOpenAIServer) -> None:
    twice = ("by the wise", "accuracy/addition", "minor")
    fake.script("good", [Reply(answer(twice, twice, ("kinds", "style", "minor")))])
    for name in ("partial", "hallucinating", "malformed"):
        fake.script(name, [Reply('{"errors": []}')])
    spans = (await _run(fake)).candidates[0].error_spans_result
    assert spans is not None
    good = next(j for j in spans.judges if j.judge_id == "good")
    assert [CANDIDATE[s.start : s.end] for s in good.spans] == ["by the wise", "kinds"]
    assert good.unlocated == [] and good.penalty == 2 * MQM_WEIGHTS["minor"]


def test_the_prompt_is_pinned() -> None:
    """A change of the prompt's text must come with a new version (answers are cached by prompt, results cite it)."""
    from service.core.judges.llm import SPANS_PROMPT_HASH, build_spans_messages

    assert (SPANS_PROMPT_VERSION, SPANS_PROMPT_HASH[:12]) == ("gemba-mqm-spans/1", "9c3bba5bf6b1")
    user = build_spans_messages(SOURCE, CANDIDATE)[1].content
    assert SOURCE in user and CANDIDATE in user and "accuracy/terminology" in user


def _judge(jid: str, *spans: tuple[int, int, str, str]) -> JudgeSpans:
    located = [LocatedSpan(a, b, CANDIDATE[a:b], c, s, "exact") for a, b, c, s in spans]  # type: ignore[arg-type]
    return JudgeSpans(
        judge_id=jid,
        model=jid,
        family=jid,
        status="valid",
        raw="",
        error=None,
        attempts=[],
        cost=_cost(),
        spans=located,
        penalty=0.0,
    )


def _cost():  # type: ignore[no-untyped-def]
    from service.core.judges.llm import Cost

    return Cost()


def test_merge_counts_agreement_over_overlaps() -> None:
    a = _judge("a", (16, 27, "accuracy/number", "major"), (66, 74, "accuracy/addition", "minor"))
    b = _judge("b", (21, 41, "accuracy/terminology", "critical"))
    c = _judge("c", (12, 20, "accuracy/number", "minor"))
    merged = merge_spans(CANDIDATE, [a, b, c])
    assert [(m.start, m.end, m.agreement, m.n_judges) for m in merged] == [(12, 41, 3, 3), (66, 74, 1, 3)]
    first = merged[0]
    assert first.quote == CANDIDATE[12:41]
    assert first.category == "accuracy/number"  # two of three said number
    assert first.severity == "critical"  # one each: the graver wins the tie
    assert [m.judge_id for m in first.marks] == ["c", "a", "b"]
    assert merge_spans(CANDIDATE, [_judge("a"), _judge("b")]) == []
    # agreement counts judges, not spans: one judge quoting two overlapping pieces is one judge
    twice = _judge("a", (16, 27, "accuracy/number", "major"), (21, 42, "accuracy/number", "major"))
    merged = merge_spans(CANDIDATE, [twice, _judge("b", (16, 20, "fluency", "minor")), _judge("c")])
    assert [(m.start, m.end, m.agreement, m.n_judges, len(m.marks)) for m in merged] == [(16, 42, 2, 3, 3)]


def test_judge_spans_become_findings_after_the_flags() -> None:
    from service.core.types import Flag

    merged = merge_spans(CANDIDATE, [_judge("a", (16, 27, "accuracy/number", "major"), (66, 74, "style", "minor"))])
    flags = [Flag(rule="critical.number", severity="major", detail="four vs three")]
    found = findings_of(flags, merged)
    assert [f.id for f in found] == ["critical.number", JUDGE_SPAN_RULE, f"{JUDGE_SPAN_RULE}#2"]
    assert [(f.category, f.severity, f.spans) for f in found[1:]] == [
        ("accuracy/number", "major", (Span(16, 27),)),
        ("style", "minor", (Span(66, 74),)),
    ]
    assert "four  kinds" in found[1].detail and "1 of 1 judges" in found[1].detail
    assert findings_of(flags) == found[:1]  # without spans, the ids of the flags are unchanged


# --- the cascade's error_spans check against the scripted server -------------------------------------------------

PANEL = panel(
    judge("good", "openai"),
    judge("partial", "google"),
    judge("hallucinating", "xai"),
    judge("malformed", "mistral"),
)


def _item() -> CascadeItem:
    return CascadeItem(id="c1", source=SOURCE, candidate=CANDIDATE, model="meta-llama/llama-3", routing_score=1.0)


async def _run(fake: FakeOpenAIServer, settings: LLMSettings | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
    settings = settings or settings_for(fake, parse_attempts=2)
    async with make_client() as client:
        return await run_cascade(
            client,
            [_item()],
            PANEL,
            settings,
            budget_fraction=1.0,
            max_calls=100,
            gemba=False,
            backtranslation=False,
            error_spans=True,
            **kwargs,  # type: ignore[arg-type]
        )


async def test_good_partial_hallucinated_and_malformed_spans(fake: FakeOpenAIServer) -> None:
    fake.script(
        "good",
        [Reply(answer(("four  kinds", "accuracy/number", "major"), ("by the wise", "accuracy/addition", "minor")))],
    )
    # normalised quote (case, one space), and one quote that is not in the candidate at all
    fake.script(
        "partial",
        [
            Reply(
                answer(
                    ("Four kinds of mindfulness", "accuracy/terminology", "major"),
                    ("not be", "accuracy/negation", "critical"),
                )
            )
        ],
    )
    fake.script("hallucinating", [Reply(answer(("the eightfold path", "accuracy/mistranslation", "critical")))])
    fake.script("malformed", [Reply("The translation is fine, 90/100."), Reply('{"errors": [{"span": "x"}]}')])
    result = await _run(fake)
    checks = result.candidates[0]
    spans = checks.error_spans_result
    assert spans is not None and spans.prompt_version == SPANS_PROMPT_VERSION
    by_judge = {j.judge_id: j for j in spans.judges}
    assert [(s.match, CANDIDATE[s.start : s.end]) for s in by_judge["good"].spans] == [
        ("exact", "four  kinds"),
        ("exact", "by the wise"),
    ]
    assert [(s.match, CANDIDATE[s.start : s.end]) for s in by_judge["partial"].spans] == [
        ("normalised", "four  kinds of Mindfulness")
    ]
    # the quotes not found are reported with their judge, and count for nothing
    assert [u.quote for u in by_judge["partial"].unlocated] == ["not be"]
    assert by_judge["hallucinating"].spans == [] and [u.quote for u in by_judge["hallucinating"].unlocated] == [
        "the eightfold path"
    ]
    assert by_judge["hallucinating"].penalty == 0.0
    assert by_judge["malformed"].status == "invalid" and by_judge["malformed"].parse_error == "bad_error_item"
    assert by_judge["malformed"].spans == [] and by_judge["malformed"].penalty is None
    assert len(by_judge["malformed"].attempts) == 2
    # merged: "four  kinds" (good) overlaps "four  kinds of Mindfulness" (partial): two of the three that answered
    assert [(CANDIDATE[m.start : m.end], m.agreement, m.n_judges) for m in spans.spans] == [
        ("four  kinds of Mindfulness", 2, 3),
        ("by the wise", 1, 3),
    ]
    # the signal: mean MQM penalty over the judges that answered (the malformed one is not one of them)
    signal = checks.error_spans
    assert isinstance(signal, SignalValue)
    expected = (MQM_WEIGHTS["major"] + MQM_WEIGHTS["minor"] + MQM_WEIGHTS["major"] + 0.0) / 3
    assert signal.value == pytest.approx(expected)
    assert signal.detail["n_valid"] == 3 and signal.detail["statuses"]["malformed"] == "invalid"  # type: ignore[index]
    assert signal.detail["unlocated"] == {"partial": ["not be"], "hallucinating": ["the eightfold path"]}
    outcome = next(o for o in checks.checks if o.check == "error_spans")
    assert outcome.status == "ran" and outcome.judges == {"valid": 3, "invalid": 1}
    # only the spans prompt was sent, one per judge (plus the malformed judge's second try)
    assert all('{"errors": []}' in r.user_text for r in fake.requests)
    assert len(fake.requests) == 5
    found = findings_of([], spans.spans)
    assert [(f.id, f.category, f.severity, f.spans) for f in found] == [
        ("judge_span", "accuracy/number", "major", (Span(16, 42),)),  # a tie number/terminology: the typology's order
        ("judge_span#2", "accuracy/addition", "minor", (Span(63, 74),)),
    ]


async def test_all_malformed_is_invalid_never_a_number(fake: FakeOpenAIServer) -> None:
    for name in ("good", "partial", "hallucinating", "malformed"):
        fake.script(name, [Reply("no errors that I can see")])
    checks = (await _run(fake)).candidates[0]
    assert isinstance(checks.error_spans, SignalSkipped)
    assert checks.error_spans.reason.startswith("no valid error spans: good: invalid")
    outcome = next(o for o in checks.checks if o.check == "error_spans")
    assert (
        outcome.status == "invalid" and outcome.reason == "4 of 4 judges gave answers that do not parse: no JSON object"
    )
    assert checks.error_spans_result is not None and checks.error_spans_result.spans == []


async def test_no_provider_skips_with_reason(fake: FakeOpenAIServer) -> None:
    checks = (await _run(fake, settings=LLMSettings(base_url=""))).candidates[0]
    assert checks.error_spans == SignalSkipped(reason=NO_PROVIDER)
    assert checks.error_spans_result is None and fake.requests == []


async def test_a_spent_budget_skips_the_judges_with_its_reason(fake: FakeOpenAIServer) -> None:
    """The tenant's day of tokens is used up: each span call is refused before it is sent (the client reserves the
    call's worst case, max_tokens included, as for GEMBA), and the check reads skipped with the budget's reason."""
    import uuid

    from redis.asyncio import Redis

    from service.platform.ratelimit import SpendMeter

    from .support import REDIS_TEST_URL

    tenant = f"test-spans-{uuid.uuid4().hex[:10]}"
    redis = Redis.from_url(REDIS_TEST_URL)
    try:
        meter = SpendMeter(redis, tenant, calls_per_day=0, tokens_per_day=500)  # below one call's max_tokens of 1024
        async with make_client() as base:
            result = await run_cascade(
                base.metered(meter),
                [_item()],
                PANEL,
                settings_for(fake),
                budget_fraction=1.0,
                max_calls=100,
                gemba=False,
                backtranslation=False,
                error_spans=True,
            )
        checks = result.candidates[0]
        assert fake.requests == []
        assert isinstance(checks.error_spans, SignalSkipped) and "budget" in checks.error_spans.reason
        outcome = next(o for o in checks.checks if o.check == "error_spans")
        assert outcome.status == "skipped" and outcome.judges == {"skipped": 4}
    finally:
        keys = [k async for k in redis.scan_iter(match=f"trisk:t:{tenant}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


async def test_a_slow_judge_reads_timed_out_under_the_deadline(fake: FakeOpenAIServer) -> None:
    for name in ("good", "partial", "hallucinating", "malformed"):
        fake.script(name, [Reply('{"errors": []}', delay=5.0)])
    checks = (await _run(fake, settings=settings_for(fake, deadline_seconds=0.5))).candidates[0]
    assert isinstance(checks.error_spans, SignalSkipped) and "timed_out" in checks.error_spans.reason
    outcome = next(o for o in checks.checks if o.check == "error_spans")
    assert outcome.status == "timed_out"


def test_error_spans_are_opt_in_and_planned_after_the_other_checks() -> None:
    item = _item()
    plan = plan_cascade([item], PANEL, budget_fraction=1.0, max_calls=100)
    assert [o.check for o in plan.candidates[0].checks] == ["gemba", "backtranslation"]  # not asked: not listed
    plan = plan_cascade([item], PANEL, budget_fraction=1.0, max_calls=100, error_spans=True)
    assert plan.candidates[0].runs("error_spans") and plan.planned_calls == 4 + 1 + 4
    # under the call cap GEMBA and backtranslation come first: spans are the first to go
    plan = plan_cascade([item], PANEL, budget_fraction=1.0, max_calls=5, error_spans=True)
    assert [o.status for o in plan.candidates[0].checks] == ["planned", "planned", "skipped"]


def test_the_workbench_marks_judge_spans_where_the_judges_put_them() -> None:
    from service.app.workbench.pages import _findings

    merged = merge_spans(CANDIDATE, [_judge("a", (16, 27, "accuracy/number", "major"))])
    (shown,) = _findings(findings_of([], merged), CANDIDATE, [])
    assert (shown.id, shown.severity, shown.highlights.candidate) == ("judge_span", "major", [(16, 27)])
    assert shown.where == "marked in the candidate"
