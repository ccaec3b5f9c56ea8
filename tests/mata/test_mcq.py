"""MCQ robustness variants and runs against the local protocol server."""

from __future__ import annotations

import pytest

from service.companions.mata import (
    MCQ_PROMPT_HASHES,
    NONE_OF_THE_OTHERS,
    McqAnswered,
    McqAnswerRequest,
    McqFormatFailure,
    McqItem,
    McqOption,
    McqRunReport,
    McqRunRequest,
    McqRunSkipped,
    mcq_variants,
    read_answer,
    run_mcq,
)
from service.core.judges.llm import Endpoint
from service.platform.errors import InputError
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.llm.support import make_client

ITEM = McqItem(
    id="q1",
    question="Which river flows through Rajahmundry?",
    options=[McqOption("Krishna"), McqOption("Kaveri"), McqOption("Godavari", correct=True), McqOption("Tungabhadra")],
    category="geography",
)

# variant -> options in order, key (by hand: the others keep their relative order)
EXPECTED = {
    "original": (["Krishna", "Kaveri", "Godavari", "Tungabhadra"], "C"),
    "A": (["Godavari", "Krishna", "Kaveri", "Tungabhadra"], "A"),
    "B": (["Krishna", "Godavari", "Kaveri", "Tungabhadra"], "B"),
    "C": (["Krishna", "Kaveri", "Godavari", "Tungabhadra"], "C"),
    "D": (["Krishna", "Kaveri", "Tungabhadra", "Godavari"], "D"),
    "NE": (["Krishna", "Kaveri", "Tungabhadra", "None of the others"], "D"),
    "NR": (["Krishna", "Kaveri", "None of the others", "Tungabhadra"], "C"),
}


def test_variants_by_hand() -> None:
    variants = mcq_variants(ITEM)
    assert [v.variant for v in variants] == list(EXPECTED)
    for v in variants:
        options, key = EXPECTED[v.variant]
        assert [o.text for o in v.options] == options, v.variant
        assert [o.label for o in v.options] == ["A", "B", "C", "D"]
        assert v.answer == key and v.answer_text == options["ABCD".index(key)]
        assert v.category == "geography" and v.item_id == "q1"


def test_negation_variants_in_telugu_and_custom_text() -> None:
    ne, nr = mcq_variants(ITEM, language="te", variants=["NR", "NE"])
    assert (ne.variant, nr.variant) == ("NE", "NR")  # canonical order whatever the request's order
    assert ne.options[-1].text == NONE_OF_THE_OTHERS["te"] == "మిగతావేవీ కావు"
    (custom,) = mcq_variants(ITEM, none_text="All of these are wrong", variants=["NR"])
    assert custom.options[2].text == "All of these are wrong" and custom.answer == "C"


def test_first_option_correct_and_three_options() -> None:
    item = McqItem("q2", "2 + 2?", [McqOption("4", correct=True), McqOption("3"), McqOption("5")])
    by_name = {v.variant: ([o.text for o in v.options], v.answer) for v in mcq_variants(item)}
    assert by_name == {
        "original": (["4", "3", "5"], "A"),
        "A": (["4", "3", "5"], "A"),
        "B": (["3", "4", "5"], "B"),
        "C": (["3", "5", "4"], "C"),
        "NE": (["3", "5", "None of the others"], "C"),
        "NR": (["None of the others", "3", "5"], "A"),
    }


@pytest.mark.parametrize(
    ("options", "kwargs", "message"),
    [
        ([McqOption("a"), McqOption("b")], {}, "exactly one correct option, it has 0"),
        ([McqOption("a", True), McqOption("b", True)], {}, "exactly one correct option, it has 2"),
        ([McqOption("a", True)], {}, "give 2-10 options"),
        ([McqOption("a", True), McqOption("None of the others")], {}, "already reads"),
        ([McqOption("a", True), McqOption(" ")], {}, r"options\[1\].text is empty"),
        ([McqOption("a", True), McqOption("b")], {"variants": ["E"]}, "unknown variant"),
    ],
)
def test_bad_items(options: list[McqOption], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        mcq_variants(McqItem("x", "q?", options), **kwargs)  # type: ignore[arg-type]


def test_read_answer_endpoint_shape() -> None:
    assert read_answer(McqAnswerRequest(text="ANSWER: c", answer="C")) == McqAnswered("C", True)
    assert read_answer(McqAnswerRequest(text="", answer="C")) == McqFormatFailure("empty")
    assert read_answer(McqAnswerRequest(text="ANSWER: E", labels=["A", "B", "C", "D", "E"])) == McqAnswered("E")
    with pytest.raises(InputError, match="not one of the labels"):
        read_answer(McqAnswerRequest(text="A", answer="F"))
    with pytest.raises(InputError, match="distinct single letters"):
        read_answer(McqAnswerRequest(text="A", labels=["A", "A"]))


def _endpoint(fake: FakeOpenAIServer, model: str) -> Endpoint:
    return Endpoint(base_url=fake.base_url, api_key="k", model=model)


async def _run(fake: FakeOpenAIServer, model: str, **kwargs: object) -> McqRunReport:
    items = [ITEM, McqItem("q2", "2 + 2?", [McqOption("3"), McqOption("4", True), McqOption("5"), McqOption("6")])]
    request = McqRunRequest(model=model, items=items, **kwargs)  # type: ignore[arg-type]
    async with make_client() as client:
        report = await run_mcq(client, _endpoint(fake, model), request)
    assert isinstance(report, McqRunReport)
    return report


async def test_a_model_that_always_says_a_shows_its_position_bias(fake: FakeOpenAIServer) -> None:
    fake.script("always-a", [Reply("Thinking...\nANSWER: A")])
    report = await _run(fake, "always-a")
    stats = {s.variant: s for s in report.variants}
    assert list(stats) == ["original", "A", "B", "C", "D", "NE", "NR"]
    assert {v: s.accuracy for v, s in stats.items()} == {
        "original": 0.0,  # keys C and B
        "A": 1.0,
        "B": 0.0,
        "C": 0.0,
        "D": 0.0,
        "NE": 0.0,
        "NR": 0.0,
    }
    assert all(s.asked == 2 and s.format_failures == 0 and s.choices == {"A": 2} for s in stats.values())
    assert report.profile.position_accuracy == {"A": 1.0, "B": 0.0, "C": 0.0, "D": 0.0}
    assert report.profile.position_spread == 1.0 and report.profile.ne_drop == 0.0
    assert len(fake.requests) == 14 and all(r.temperature == 0.0 for r in fake.requests)
    assert report.prompt_hash == MCQ_PROMPT_HASHES["en"] and report.cost.calls == 14


async def test_format_failures_are_counted_apart_from_wrong_answers(fake: FakeOpenAIServer) -> None:
    fake.script("rambler", [Reply("గోదావరి నది రాజమండ్రి గుండా ప్రవహిస్తుంది.")])
    report = await _run(fake, "rambler", language="te", variants=["original", "NE"])
    for s in report.variants:
        assert (s.asked, s.correct, s.wrong, s.format_failures) == (2, 0, 0, 2)
        # nothing could be read: no accuracy (not 0%), with the reason
        figures = (s.accuracy, s.standard_error, s.format_failure_rate, s.accuracy_when_answered)
        assert figures == (None, None, 1.0, None)
        assert s.reason == "no readable answer: 2 of 2 format failures (no ANSWER line)"
    assert report.profile.ne_drop is None and report.profile.reason == "no readable answer in variant(s) original, NE"
    assert all(isinstance(a.reading, McqFormatFailure) and a.reading.error == "no_answer" for a in report.answers)
    assert "ANSWER: X" in fake.requests[0].user_text and "బహుళైచ్ఛిక" in fake.requests[0].user_text


async def test_unreachable_model_and_no_provider(fake: FakeOpenAIServer) -> None:
    fake.script("broken", [Reply(None, status=400)])
    report = await _run(fake, "broken", variants=["NR"])
    (stats,) = report.variants
    assert (stats.asked, stats.failed, stats.accuracy) == (2, 2, None)
    assert all(a.reading is None and a.error is not None for a in report.answers)
    async with make_client() as client:
        skipped = await run_mcq(
            client, Endpoint(base_url="", api_key="", model="m"), McqRunRequest(model="m", items=[ITEM])
        )
    assert skipped == McqRunSkipped("no LLM provider configured")


async def test_a_bad_item_stops_the_run_before_any_question(fake: FakeOpenAIServer) -> None:
    bad = McqItem("bad", "q?", [McqOption("a"), McqOption("b")])
    with pytest.raises(InputError, match="items\\[1\\]: a multiple-choice item needs exactly one"):
        async with make_client() as client:
            await run_mcq(client, _endpoint(fake, "m"), McqRunRequest(model="m", items=[ITEM, bad]))
    assert fake.requests == []


async def test_per_category_accuracy_with_standard_errors(fake: FakeOpenAIServer) -> None:
    fake.script("always-c", [Reply("ANSWER: C")])
    report = await _run(fake, "always-c", variants=["original", "A", "B"])
    by = {c.category: c for c in report.categories}
    assert set(by) == {"geography", None}
    geo = by["geography"]  # the Godavari item: C is right in original only (1 of 3)
    assert (geo.asked, geo.correct, geo.format_failures) == (3, 1, 0)
    assert geo.accuracy == pytest.approx(1 / 3) and geo.standard_error == pytest.approx(((1 / 3) * (2 / 3) / 3) ** 0.5)
    original = next(v for v in report.variants if v.variant == "original")
    assert original.accuracy == 0.5 and original.standard_error == pytest.approx((0.25 / 2) ** 0.5)
