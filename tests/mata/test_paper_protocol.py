"""``protocol: "paper"``: Inspect's model-graded-fact prompt and grade pattern, its multiple-choice template and strict
ANSWER: reading, the research's "none of the others"; each with its own prompt hash, beside trisk's stricter default."""

from __future__ import annotations

from service.companions.mata import (
    GRADE_PROMPT_HASHES,
    MCQ_PROMPT_HASHES,
    Graded,
    GradeRequest,
    McqAnswered,
    McqFormatFailure,
    McqItem,
    McqOption,
    McqRunReport,
    McqRunRequest,
    build_grade_messages,
    build_mcq_messages,
    mcq_variants,
    parse_grade,
    plan_grades,
    read_mcq_answer,
    run_grades,
    run_mcq,
)
from service.core.judges.llm import Endpoint, JudgeSpec
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.llm.support import make_client, settings_for

INSPECT_PROMPT = """
You are comparing a submitted answer to an expert answer on a given question. Here is the data:

[BEGIN DATA]
************
[Question]: What is 2 + 2?
************
[Expert]: 4
************
[Submission]: four
************
[END DATA]

Compare the factual content of the submitted answer with the expert answer. Ignore any differences in style, grammar, or punctuation.

Does the submission contain the content in the expert answer?


After assessing the submitted answer, reply with 'GRADE: $LETTER' (without quotes) where LETTER is one of CI.  Please choose ONE option for the grade: either "C" for correct answers, or "I" for incorrect answers.

For example, after reviewing a correct answer you might write 'GRADE: C' or after reviewing an incorrect answer you might write 'GRADE: I'.

First, write out in a step by step manner your reasoning about the criterion to be sure that your conclusion is correct. Avoid simply stating the correct answers at the outset. Then, end with your answer formatted as 'GRADE: $LETTER' (without quotes) where LETTER is one of CI.

"""  # noqa: E501  (Inspect's text as it is, from inspect_ai 0.3.90)


def test_the_paper_grade_prompt_is_inspects_model_graded_fact_verbatim() -> None:
    (message,) = build_grade_messages(language="en", question="What is 2 + 2?", answer="4", response="four",
                                      protocol="paper")  # fmt: skip
    assert message.role == "user" and message.content == INSPECT_PROMPT


def test_the_paper_grade_reading_is_inspects_pattern_and_no_match_counts_incorrect() -> None:
    def paper(text: str) -> tuple[str | None, str | None, str | None]:
        g = parse_grade(text, "stop", language="en", protocol="paper")
        return g.verdict, g.error, g.counted_as

    assert paper("Reasoning...\nGRADE: C") == ("correct", None, None)
    assert paper("It is right.") == ("incorrect", None, "no GRADE line: incorrect (Inspect's rule)")
    # Inspect's pattern needs the grade on the last line: a grade followed by more lines does not match
    assert paper("GRADE: C\nI am confident.")[0] == "incorrect"
    assert parse_grade("GRADE: C\nI am confident.", "stop", language="en").verdict == "correct"  # trisk reads it
    assert paper("GRADE: P")[0] == "partial"
    # a cut-off answer is a format failure under either protocol, never a verdict
    assert paper("GRADE: C") != paper("") and paper("")[1] == "empty"


async def test_a_paper_grade_names_its_protocol_and_prompt_hash(fake: FakeOpenAIServer) -> None:
    fake.script("inspector", [Reply("The submission says four, which is 4.")])
    request = GradeRequest(question="What is 2 + 2? (paper)", answer="4", response="four", protocol="paper",
                           judges=[JudgeSpec("inspector", "openai")])  # fmt: skip
    async with make_client() as client:
        (graded,) = await run_grades(client, plan_grades(request), settings_for(fake))
    assert isinstance(graded, Graded) and graded.verdict == "incorrect"
    (judge,) = graded.judges
    assert judge.status == "valid" and judge.counted_as == "no GRADE line: incorrect (Inspect's rule)"
    assert graded.signature.protocol == "paper"
    assert graded.signature.prompt_hash != GRADE_PROMPT_HASHES["en"]
    assert graded.signature.prompt_version == "mata-grade/en/inspect-0.3.90"
    assert "[BEGIN DATA]" in fake.requests_for("inspector")[0].user_text


def test_the_paper_mcq_prompt_and_strict_reading() -> None:
    (message,) = build_mcq_messages(language="te", question="Q?", options=[("A", "x"), ("B", "y")], protocol="paper")
    assert message.content == (
        "Answer the following multiple choice question. The entire content of your response should be of the "
        "following format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of A,B.\n\nQ?\n\nA) x\nB) y"
    )

    def paper(text: str) -> object:
        return read_mcq_answer(text, labels=["A", "B", "C", "D"], answer="C", protocol="paper")

    assert paper("Let me think.\nANSWER: C\n") == McqAnswered("C", True)
    assert paper("ANSWER: C, Godavari") == McqFormatFailure("multiple_choices", "C, Godavari")  # Inspect marks A, C, D
    assert read_mcq_answer("ANSWER: C, Godavari", labels=["A", "B", "C", "D"], answer="C") == McqAnswered("C", True)
    assert paper("The answer is (C).") == McqFormatFailure("no_answer")  # no ANSWER: line at all


async def test_a_paper_mcq_run_uses_the_researchs_none_of_the_others(fake: FakeOpenAIServer) -> None:
    item = McqItem("q", "2 + 2?", [McqOption("3"), McqOption("4", True), McqOption("5")])
    ne = mcq_variants(item, language="te", variants=["NE"], protocol="paper")[0]
    assert ne.answer_text == "none of the others"
    fake.script("mcq", [Reply("ANSWER: C")])
    request = McqRunRequest(model="mcq", items=[item], variants=["NE"], protocol="paper")
    async with make_client() as client:
        report = await run_mcq(client, Endpoint(fake.base_url, "k", "mcq"), request)
    assert isinstance(report, McqRunReport)
    assert report.protocol == "paper" and report.none_text == "none of the others"
    assert report.prompt_hash != MCQ_PROMPT_HASHES["en"] and report.variants[0].correct == 1
