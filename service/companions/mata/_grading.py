"""MATA grading: a judge panel grades a model's open answer against the ground truth; a strict-majority verdict.

Panel verdict: among the judges whose answer parsed, the verdict with more than half of those votes, provided at
least ``min_parsed_votes`` parsed (default: a majority of the judges asked, floor(n/2) + 1). A tie, a plurality
without a strict majority, or too few parsed votes is ``no_majority``: never decided by the order of the judges.
A judge of the responding model's family is flagged (``same_family``) and kept, or excluded when the request
sets ``exclude_own_family``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from service.companions.mata._parsing import GradeError, GradeParse, Verdict, parse_grade
from service.companions.mata._prompts import MataLanguage, Protocol, build_grade_messages, grade_prompt
from service.core.judges.llm import (
    NO_ELIGIBLE_JUDGE,
    NO_PROVIDER,
    AttemptOptions,
    CallGuard,
    ChatMessage,
    Cost,
    ExcludedJudge,
    Judge,
    JudgeRun,
    JudgeSpec,
    Panel,
    ask_judge,
    ask_panel,
    choose_panel,
    dominant_cause,
    family_of,
    run_all,
    select_judges,
)
from service.core.text import require_text
from service.platform.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from service.core.judges.llm import LLMClient
    from service.platform.settings import LLMSettings

__all__ = [
    "GRADE_TEXT_MAX_CHARS",
    "MAX_GRADE_ITEMS",
    "GradeBatchRequest",
    "GradeItem",
    "GradeOptions",
    "GradeOutcome",
    "GradePlan",
    "GradeRequest",
    "GradeSignature",
    "GradeSkipped",
    "Graded",
    "JudgeGrade",
    "PanelVerdict",
    "VoteCounts",
    "default_quorum",
    "panel_verdict",
    "plan_grades",
    "run_grades",
]

GRADE_TEXT_MAX_CHARS = 20_000
MAX_GRADE_ITEMS = 1000

PanelVerdict = Literal["correct", "incorrect", "partial", "no_majority"]


class GradeOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How to grade: prompt language, partial credit (English only), judges, exclusion, sampling, vote quorum."""

    language: MataLanguage = "en"
    partial_credit: bool = False
    panel: str | None = None
    judges: list[JudgeSpec] | None = None
    exclude_own_family: bool = False
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = 0.0  # the research graded at temperature 0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    min_parsed_votes: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # trisk: the default prompt and strict reading; paper: Inspect's model-graded-fact prompt and grade pattern
    # verbatim, where no GRADE line counts as incorrect (English; see _prompts)
    protocol: Protocol = "trisk"


class GradeItem(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One answer to grade; ``response_model`` names the model that answered (its family is flagged)."""

    id: str | None = None
    question: str
    answer: str
    response: str
    response_model: str | None = None


class GradeRequest(GradeOptions, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One answer to grade (the single form of ``POST /v1/mata/grades``)."""

    question: str
    answer: str
    response: str
    response_model: str | None = None


class GradeBatchRequest(GradeOptions, forbid_unknown_fields=True, frozen=True, kw_only=True):
    items: list[GradeItem]


class GradePlan(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A validated request: items with ids, the resolved panel and the options."""

    items: list[GradeItem]
    panel: Panel
    language: MataLanguage
    partial_credit: bool
    exclude_own_family: bool
    temperature: float
    max_attempts: int
    min_parsed_votes: int | None
    protocol: Protocol = "trisk"


class JudgeGrade(JudgeRun, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One judge's grade: ``verdict`` only when ``status == "valid"``; ``parse_error`` names a format failure."""

    same_family: bool
    verdict: Verdict | None
    parse_error: GradeError | None
    reasoning: str | None
    # a verdict the protocol gave to an answer it could not read (paper: "no GRADE line: incorrect (Inspect's rule)")
    counted_as: str | None = None


class VoteCounts(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    correct: int = 0
    incorrect: int = 0
    partial: int = 0
    format_failures: int = 0  # answered, but no readable grade (status invalid)
    failed: int = 0  # no answer (upstream error)
    timed_out: int = 0  # no answer before the deadline
    skipped: int = 0  # not asked (the day's LLM budget)


class GradeSignature(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    prompt_version: str
    prompt_hash: str
    language: MataLanguage
    partial_credit: bool
    temperature: float
    max_attempts: int
    panel: str
    panel_version: str
    protocol: Protocol = "trisk"


class Graded(msgspec.Struct, tag="graded", tag_field="status", forbid_unknown_fields=True, frozen=True):
    item_id: str
    verdict: PanelVerdict
    votes: VoteCounts
    min_parsed_votes: int
    response_family: str | None
    judges: list[JudgeGrade]
    excluded: list[ExcludedJudge]
    signature: GradeSignature
    cost: Cost
    # why the panel gave no verdict (no_majority): too few readable votes, with their dominant cause, or a split
    reason: str | None = None


class GradeSkipped(msgspec.Struct, tag="skipped", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """Not graded, and why (no provider, no eligible judge): never a made-up verdict."""

    item_id: str
    reason: str
    excluded: list[ExcludedJudge] = []


GradeOutcome = Graded | GradeSkipped


def plan_grades(
    request: GradeRequest | GradeBatchRequest,
    *,
    default_panel: str = "strong",
    panels_dir: str | Path | None = None,
) -> GradePlan:
    """Validate before anything is stored or asked: texts, ids, partial credit only in English, the judges."""
    if isinstance(request, GradeRequest):
        items = [
            GradeItem(
                id="1",
                question=request.question,
                answer=request.answer,
                response=request.response,
                response_model=request.response_model,
            )
        ]
        prefix = ""
    else:
        if not request.items or len(request.items) > MAX_GRADE_ITEMS:
            raise InputError(f"items: give 1-{MAX_GRADE_ITEMS} items", extra={"limit": MAX_GRADE_ITEMS})
        items = [
            item if item.id is not None else msgspec.structs.replace(item, id=str(i + 1))
            for i, item in enumerate(request.items)
        ]
        prefix = "items[{i}]."
    for i, item in enumerate(items):
        at = prefix.format(i=i)
        for name in ("question", "answer", "response"):
            require_text(getattr(item, name), field=f"{at}{name}", max_chars=GRADE_TEXT_MAX_CHARS)
        if not (item.id or "").strip():
            raise InputError(f"{at}id is empty", extra={"field": f"{at}id"})
    if len({item.id for item in items}) != len(items):
        raise InputError("items: two items have the same id")
    if request.partial_credit and request.language != "en":
        raise InputError("partial credit is defined for the English prompt only (the Telugu prompt is yes/no)")
    panel = choose_panel(request.panel, request.judges, default=default_panel, panels_dir=panels_dir)
    if request.min_parsed_votes is not None and request.min_parsed_votes > len(panel.judges):
        raise InputError(f"min_parsed_votes is larger than the panel ({len(panel.judges)} judges)")
    return GradePlan(
        items=items,
        panel=panel,
        language=request.language,
        partial_credit=request.partial_credit,
        exclude_own_family=request.exclude_own_family,
        temperature=request.temperature,
        max_attempts=request.max_attempts,
        min_parsed_votes=request.min_parsed_votes,
        protocol=request.protocol,
    )


def default_quorum(n_judges: int) -> int:
    """A majority of the judges asked must give a readable grade before the panel decides."""
    return n_judges // 2 + 1


def panel_verdict(verdicts: list[Verdict | None], *, min_parsed_votes: int) -> PanelVerdict:
    """The strict majority of the parsed votes (None = unparsed), given at least ``min_parsed_votes`` of them."""
    parsed = [v for v in verdicts if v is not None]
    if len(parsed) < min_parsed_votes or not parsed:
        return "no_majority"
    candidates: tuple[Verdict, ...] = ("correct", "incorrect", "partial")
    for verdict in candidates:
        if 2 * parsed.count(verdict) > len(parsed):
            return verdict
    return "no_majority"


def _signature(plan: GradePlan) -> GradeSignature:
    version, digest = grade_prompt(plan.language, plan.protocol)
    return GradeSignature(
        prompt_version=version,
        prompt_hash=digest,
        language=plan.language,
        partial_credit=plan.partial_credit,
        temperature=plan.temperature,
        max_attempts=plan.max_attempts,
        panel=plan.panel.name,
        panel_version=plan.panel.version,
        protocol=plan.protocol,
    )


async def _grade_one(
    client: LLMClient,
    judge: Judge,
    settings: LLMSettings,
    messages: list[ChatMessage],
    plan: GradePlan,
    response_family: str | None,
    guard: CallGuard | None,
) -> JudgeGrade:
    def read(text: str | None, finish_reason: str | None) -> GradeParse:
        return parse_grade(
            text, finish_reason, language=plan.language, partial_credit=plan.partial_credit, protocol=plan.protocol
        )

    def parse(text: str | None, finish_reason: str | None) -> tuple[GradeParse | None, str | None]:
        result = read(text, finish_reason)
        return (result, None) if result.error is None else (None, result.error)

    options = AttemptOptions(temperature=plan.temperature, max_attempts=plan.max_attempts)
    prompt = grade_prompt(plan.language, plan.protocol)[0]
    outcome = await ask_judge(
        client, judge, settings, messages, call="text", prompt_version=prompt, parse=parse, options=options, guard=guard
    )
    last = outcome.attempts[-1] if outcome.attempts else None
    parsed = outcome.value
    if parsed is None and last is not None:
        parsed = read(last.raw, last.finish_reason)
    valid = parsed is not None and outcome.status == "valid"
    return JudgeGrade.of(
        judge,
        outcome,
        same_family=response_family is not None and judge.family == response_family,
        verdict=parsed.verdict if valid and parsed is not None else None,
        reasoning=parsed.reasoning if parsed is not None else None,
        counted_as=parsed.counted_as if valid and parsed is not None else None,
    )


def _no_verdict_reason(judges: list[JudgeGrade], quorum: int) -> str:
    parsed = sum(1 for j in judges if j.verdict is not None)
    if parsed >= quorum:
        return f"the {parsed} readable votes have no strict majority"
    unread = dominant_cause(judges)
    return f"{parsed} readable votes of the {quorum} needed" + (f"; {unread}" if unread else "")


def _votes(judges: list[JudgeGrade]) -> VoteCounts:
    verdicts = [j.verdict for j in judges]
    return VoteCounts(
        correct=verdicts.count("correct"),
        incorrect=verdicts.count("incorrect"),
        partial=verdicts.count("partial"),
        format_failures=sum(1 for j in judges if j.status == "invalid"),
        failed=sum(1 for j in judges if j.status == "failed"),
        timed_out=sum(1 for j in judges if j.status == "timed_out"),
        skipped=sum(1 for j in judges if j.status == "skipped"),
    )


async def _grade_item(
    client: LLMClient, plan: GradePlan, item: GradeItem, settings: LLMSettings, guard: CallGuard | None
) -> GradeOutcome:
    item_id = item.id or ""
    selection = select_judges(plan.panel, item.response_model, exclude_same_family=plan.exclude_own_family)
    if not settings.configured:
        return GradeSkipped(item_id, NO_PROVIDER, selection.excluded)
    if not selection.judges:
        return GradeSkipped(item_id, NO_ELIGIBLE_JUDGE, selection.excluded)
    messages = build_grade_messages(
        language=plan.language,
        question=item.question,
        answer=item.answer,
        response=item.response,
        partial_credit=plan.partial_credit,
        protocol=plan.protocol,
    )
    family = selection.candidate_family or family_of(item.response_model)
    judges = await ask_panel(selection.judges, lambda j: _grade_one(client, j, settings, messages, plan, family, guard))
    quorum = plan.min_parsed_votes or default_quorum(len(judges))
    verdict = panel_verdict([j.verdict for j in judges], min_parsed_votes=quorum)
    return Graded(
        item_id=item_id,
        verdict=verdict,
        reason=_no_verdict_reason(judges, quorum) if verdict == "no_majority" else None,
        votes=_votes(judges),
        min_parsed_votes=quorum,
        response_family=family,
        judges=judges,
        excluded=selection.excluded,
        signature=_signature(plan),
        cost=Cost.total(j.cost for j in judges),
    )


async def run_grades(
    client: LLMClient, plan: GradePlan, settings: LLMSettings, guard: CallGuard | None = None
) -> list[GradeOutcome]:
    """Every item of the plan, concurrently (the client limits calls per provider), within the guard's deadline."""
    return await run_all(*(_grade_item(client, plan, item, settings, guard) for item in plan.items))
