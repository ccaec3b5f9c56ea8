"""Poller evaluations: validate a request into a plan, ask the judges, aggregate per dimension across judges.

Per judge the answer is parsed strictly (``_parsing``); an answer without any usable score is asked again with the
temperature raised one step, up to ``max_attempts``; an answer with some scores is kept as it is and its failed
dimensions stay failures. Across judges, per dimension: n, mean, median, min, max and spread (max - min) of the
scores given. The overall average is the mean of the per-dimension means (the research's "average" column) and
is given only when every dimension has at least one score: a dimension without one would make the average a
mean over different dimensions than the other evaluations' averages.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import msgspec

from service.companions.poller._dimensions import PromptLanguage, resolve_dimensions
from service.companions.poller._parsing import (
    DeclaredRole,
    DimensionFailure,
    DimensionResult,
    DimensionScore,
    PollerParse,
    parse_poller_answer,
)
from service.companions.poller._persona import Persona, persona_version, validate_persona
from service.companions.poller._prompts import (
    DEFAULT_STRATEGY,
    DEFAULT_TEMPERATURE,
    Protocol,
    Strategy,
    build_poller_messages,
    prompt_hash,
    prompt_version,
    uses_persona,
)
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
    "INTERPRETATION_MAX_CHARS",
    "MAX_INTERPRETATIONS",
    "POEM_MAX_CHARS",
    "DimensionStats",
    "InterpretationIn",
    "PoemIn",
    "PollerEvaluation",
    "PollerEvaluationRequest",
    "PollerItem",
    "PollerJudgeResult",
    "PollerPlan",
    "PollerScored",
    "PollerSignature",
    "PollerSkipped",
    "PollerUnanswered",
    "dimension_stats",
    "overall_average",
    "panel_scores",
    "plan_poller_evaluation",
    "run_poller_evaluation",
]

POEM_MAX_CHARS = 20_000
INTERPRETATION_MAX_CHARS = 20_000
MAX_INTERPRETATIONS = 100


class PoemIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    text: str
    title: str | None = None


class InterpretationIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One reader's interpretation; ``model`` names the model that wrote it, if one did (self-family exclusion)."""

    id: str
    text: str
    model: str | None = None


class PollerEvaluationRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Score interpretations of one poem: give ``interpretation`` (one) or ``interpretations`` (several).

    The persona is given by id (``persona_id``, resolved by the caller) or inline; P0 uses none and ignores one.
    Judges: a panel name or inline ``judges`` (models on the configured provider); neither = the default panel.
    """

    poem: PoemIn
    interpretation: str | None = None
    interpretations: list[InterpretationIn] | None = None
    persona_id: str | None = None
    persona: Persona | None = None
    strategy: Strategy = DEFAULT_STRATEGY
    dimensions: list[str] | None = None
    panel: str | None = None
    judges: list[JudgeSpec] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = DEFAULT_TEMPERATURE
    language: PromptLanguage = "en"
    exclude_own_family: bool = True
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=5)] = 2
    # trisk: the default prompt; paper: the research's setup (unpublished poems, detailed reasons; see _prompts)
    protocol: Protocol = "trisk"


class PollerPlan(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A validated request, ready for a worker: everything resolved (persona, dimensions, judges)."""

    poem: PoemIn
    interpretations: list[InterpretationIn]
    persona: Persona | None
    persona_id: str | None
    persona_version: str | None
    strategy: Strategy
    language: PromptLanguage
    temperature: float
    dimensions: list[str]
    panel: Panel
    exclude_own_family: bool
    max_attempts: int
    protocol: Protocol = "trisk"


class PollerJudgeResult(JudgeRun, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One judge on one interpretation. ``dimensions`` is empty when no answer was usable (status not valid).

    ``same_family``: the judge is of the family of the model that wrote the interpretation (it was kept because
    the request did not ask for exclusion). ``overall``: mean of its scores, only when it scored every dimension.
    """

    same_family: bool
    dimensions: list[DimensionResult]
    role: DeclaredRole | None
    overall: float | None


class DimensionStats(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One dimension across judges; every value is None when no judge gave a score (n == 0), and ``reason`` says
    why (the judges' parse failures of it, or how the judges ended)."""

    dimension: str
    n: int
    mean: float | None = None
    median: float | None = None
    min: float | None = None
    max: float | None = None
    spread: float | None = None
    reason: str | None = None


class PollerScored(msgspec.Struct, tag="scored", tag_field="status", forbid_unknown_fields=True, frozen=True):
    interpretation_id: str
    judges: list[PollerJudgeResult]
    excluded: list[ExcludedJudge]
    dimensions: list[DimensionStats]
    overall: float | None
    cost: Cost


class PollerSkipped(msgspec.Struct, tag="skipped", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """Not evaluated, and why (no provider, no eligible judge); never a made-up score."""

    interpretation_id: str
    reason: str
    excluded: list[ExcludedJudge] = []


class PollerUnanswered(msgspec.Struct, tag="unanswered", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """Judges were asked and none gave a usable answer: no score, the dominant cause as ``reason`` ("1 of 1 judge
    gave answers that do not parse: truncated at max_tokens"), and what each judge answered."""

    interpretation_id: str
    reason: str
    judges: list[PollerJudgeResult]
    excluded: list[ExcludedJudge]
    dimensions: list[DimensionStats]
    cost: Cost


PollerItem = PollerScored | PollerSkipped | PollerUnanswered


class PollerSignature(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Everything that decides the prompts and the judges, so a result can be reproduced."""

    prompt_version: str
    prompt_hash: str
    strategy: Strategy
    language: PromptLanguage
    temperature: float
    max_attempts: int
    dimensions: list[str]
    persona_id: str | None
    persona_version: str | None
    panel: str
    panel_version: str
    judges: list[str]
    protocol: Protocol = "trisk"


class PollerEvaluation(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    signature: PollerSignature
    items: list[PollerItem]
    cost: Cost


def plan_poller_evaluation(
    request: PollerEvaluationRequest,
    *,
    persona: Persona | None = None,
    default_panel: str = "strong",
    panels_dir: str | Path | None = None,
) -> PollerPlan:
    """Validate everything before anything is stored or asked; ``persona`` is the stored one for ``persona_id``.

    Raises InputError for: no or two kinds of interpretation, empty or over-long texts, duplicate interpretation
    ids, unknown or repeated dimensions, a persona missing for P1-P4, both ``persona_id`` and ``persona``, a
    persona over its limits, an unknown panel or unusable inline judges.
    """
    require_text(request.poem.text, field="poem.text", max_chars=POEM_MAX_CHARS)
    if request.poem.title:
        require_text(request.poem.title, field="poem.title", max_chars=POEM_MAX_CHARS)
    if (request.interpretation is None) == (request.interpretations is None):
        raise InputError("give either interpretation or interpretations (one of them)")
    if request.interpretation is not None:
        items = [InterpretationIn(id="1", text=request.interpretation)]
    else:
        items = list(request.interpretations or [])
    if not items or len(items) > MAX_INTERPRETATIONS:
        raise InputError(f"interpretations: give 1-{MAX_INTERPRETATIONS}", extra={"limit": MAX_INTERPRETATIONS})
    for i, item in enumerate(items):
        field = "interpretation" if request.interpretation is not None else f"interpretations[{i}].text"
        require_text(item.text, field=field, max_chars=INTERPRETATION_MAX_CHARS)
        if not item.id.strip():
            raise InputError(f"interpretations[{i}].id is empty", extra={"field": f"interpretations[{i}].id"})
    if len({item.id for item in items}) != len(items):
        raise InputError("interpretations: two interpretations have the same id")
    dimensions = resolve_dimensions(request.dimensions)
    if request.persona_id is not None and request.persona is not None:
        raise InputError("give either persona_id or persona, not both")
    chosen = request.persona if request.persona is not None else persona
    if request.persona_id is not None and persona is None:
        raise InputError(f"persona {request.persona_id!r} was not resolved", extra={"field": "persona_id"})
    if not uses_persona(request.strategy):
        chosen = None  # P0: the plain judge; a persona given along is not used (and not recorded)
    elif chosen is None:
        raise InputError(f"strategy {request.strategy} needs a persona (persona_id or persona)")
    if chosen is not None:
        validate_persona(chosen, at="persona")
    panel = choose_panel(request.panel, request.judges, default=default_panel, panels_dir=panels_dir)
    return PollerPlan(
        poem=request.poem,
        interpretations=items,
        persona=chosen,
        persona_id=request.persona_id if chosen is not None else None,
        persona_version=persona_version(chosen) if chosen is not None else None,
        strategy=request.strategy,
        language=request.language,
        temperature=request.temperature,
        dimensions=[d.name for d in dimensions],
        panel=panel,
        exclude_own_family=request.exclude_own_family,
        max_attempts=request.max_attempts,
        protocol=request.protocol,
    )


def dimension_stats(dimension: str, scores: Sequence[float], *, reason: str | None = None) -> DimensionStats:
    if not scores:
        return DimensionStats(dimension=dimension, n=0, reason=reason or "no judge scored it")
    return DimensionStats(
        dimension=dimension,
        n=len(scores),
        mean=statistics.fmean(scores),
        median=float(statistics.median(scores)),
        min=min(scores),
        max=max(scores),
        spread=max(scores) - min(scores),
    )


def overall_average(stats: Sequence[DimensionStats]) -> float | None:
    """Mean of the per-dimension means; None unless every dimension has a score (see the module docstring)."""
    means = [s.mean for s in stats]
    if not means or any(m is None for m in means):
        return None
    return statistics.fmean(m for m in means if m is not None)


def panel_scores(item: PollerScored) -> dict[str, float]:
    """Dimension -> mean across judges, for the dimensions some judge scored (what agreement compares)."""
    return {s.dimension: s.mean for s in item.dimensions if s.mean is not None}


def signature_of(plan: PollerPlan) -> PollerSignature:
    return PollerSignature(
        prompt_version=prompt_version(plan.language, plan.protocol),
        prompt_hash=prompt_hash(plan.language, plan.protocol),
        strategy=plan.strategy,
        language=plan.language,
        temperature=plan.temperature,
        max_attempts=plan.max_attempts,
        dimensions=plan.dimensions,
        persona_id=plan.persona_id,
        persona_version=plan.persona_version,
        panel=plan.panel.name,
        panel_version=plan.panel.version,
        judges=[j.model for j in plan.panel.judges],
        protocol=plan.protocol,
    )


def _usable(parse: PollerParse) -> tuple[PollerParse | None, str | None]:
    return (parse, None) if parse.error is None else (None, parse.error)


async def _judge_one(
    client: LLMClient,
    judge: Judge,
    settings: LLMSettings,
    messages: list[ChatMessage],
    plan: PollerPlan,
    producer_family: str | None,
    guard: CallGuard | None,
) -> PollerJudgeResult:
    dimensions = resolve_dimensions(plan.dimensions)

    def parse(text: str | None, finish_reason: str | None) -> tuple[PollerParse | None, str | None]:
        return _usable(parse_poller_answer(text, finish_reason, dimensions=dimensions, persona=plan.persona))

    options = AttemptOptions(temperature=plan.temperature, max_attempts=plan.max_attempts)
    prompt = prompt_version(plan.language, plan.protocol)
    outcome = await ask_judge(
        client, judge, settings, messages, call="text", prompt_version=prompt, parse=parse, options=options, guard=guard
    )
    last = outcome.attempts[-1] if outcome.attempts else None
    parsed = outcome.value
    if parsed is None and last is not None:
        # unusable as a whole: still show what the last answer gave per dimension (failures only, no score)
        parsed = parse_poller_answer(last.raw, last.finish_reason, dimensions=dimensions, persona=plan.persona)
    results = parsed.dimensions if parsed is not None else []
    scored = [d.score for d in results if isinstance(d, DimensionScore)]
    complete = bool(results) and len(scored) == len(results) and outcome.status == "valid"
    return PollerJudgeResult.of(
        judge,
        outcome,
        same_family=producer_family is not None and judge.family == producer_family,
        dimensions=results if outcome.status == "valid" else [d for d in results if not isinstance(d, DimensionScore)],
        role=parsed.role if parsed is not None else None,
        overall=statistics.fmean(scored) if complete else None,
    )


async def _evaluate_item(
    client: LLMClient, plan: PollerPlan, item: InterpretationIn, settings: LLMSettings, guard: CallGuard | None
) -> PollerItem:
    selection = select_judges(plan.panel, item.model, exclude_same_family=plan.exclude_own_family)
    if not settings.configured:
        return PollerSkipped(item.id, NO_PROVIDER, selection.excluded)
    if not selection.judges:
        return PollerSkipped(item.id, NO_ELIGIBLE_JUDGE, selection.excluded)
    messages = build_poller_messages(
        strategy=plan.strategy,
        language=plan.language,
        poem=plan.poem.text,
        title=plan.poem.title,
        interpretation=item.text,
        dimensions=resolve_dimensions(plan.dimensions),
        persona=plan.persona,
        protocol=plan.protocol,
    )
    family = selection.candidate_family or family_of(item.model)
    judges = await ask_panel(selection.judges, lambda j: _judge_one(client, j, settings, messages, plan, family, guard))
    stats = []
    for name in plan.dimensions:
        scores = [
            d.score
            for j in judges
            if j.status == "valid"
            for d in j.dimensions
            if isinstance(d, DimensionScore) and d.dimension == name
        ]
        stats.append(dimension_stats(name, scores, reason=_unscored(name, judges)))
    cost = Cost.total(j.cost for j in judges)
    if not any(j.status == "valid" for j in judges):
        reason = dominant_cause(judges) or "no judge gave a usable answer"
        return PollerUnanswered(item.id, reason, judges, selection.excluded, stats, cost)
    return PollerScored(item.id, judges, selection.excluded, stats, overall_average(stats), cost)


def _unscored(dimension: str, judges: Sequence[PollerJudgeResult]) -> str:
    """Why no judge scored a dimension: the valid judges' parse failures of it, else how the judges ended."""
    failures = [
        f"{j.judge_id}: {d.error}"
        for j in judges
        if j.status == "valid"
        for d in j.dimensions
        if isinstance(d, DimensionFailure) and d.dimension == dimension
    ]
    if failures:
        return "no judge scored it: " + "; ".join(failures)
    return dominant_cause(judges) or "no judge scored it"


async def run_poller_evaluation(
    client: LLMClient, plan: PollerPlan, settings: LLMSettings, guard: CallGuard | None = None
) -> PollerEvaluation:
    """Every interpretation of the plan, concurrently (the client limits calls per provider), within the guard's
    deadline when one is given."""
    items = await run_all(*(_evaluate_item(client, plan, i, settings, guard) for i in plan.interpretations))
    cost = Cost.total(item.cost for item in items if isinstance(item, PollerScored))
    return PollerEvaluation(signature=signature_of(plan), items=items, cost=cost)
