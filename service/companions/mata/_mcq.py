"""MCQ robustness: the research's variants of a multiple-choice item and a run that asks a model every variant.

Variants of an item with options in order and exactly one correct (labels A, B, C, ... by position):

| variant      | options                                                                  | key                |
|--------------|--------------------------------------------------------------------------|--------------------|
| ``original`` | as given                                                                 | the correct one    |
| ``A``..      | the correct option moved to that position, the others in their order     | that position      |
| ``NE``       | the correct option removed, "none of the others" appended at the end     | the last position  |
| ``NR``       | the correct option replaced in place by "none of the others"             | its own position   |

In NE and NR "none of the others" is the right answer: the correct text is gone. The run reports, per variant,
accuracy (correct / answered-or-not, upstream failures left out and counted), format failures apart from wrong
answers, and the letters chosen; the profile gives the accuracy per forced position (position bias) and the drop
from ``original`` to NE and NR (negation sensitivity). Each question is asked once (no retry: a format failure
is the measurement).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import msgspec

from service.companions.mata._parsing import McqAnswered, McqFormatFailure, McqReading, read_mcq_answer
from service.companions.mata._prompts import MataLanguage, Protocol, build_mcq_messages, mcq_prompt
from service.core.judges.llm import (
    NO_PROVIDER,
    PARSE_ERROR_WORDS,
    AttemptOptions,
    CallGuard,
    Cost,
    Endpoint,
    Outcome,
    ask_until_parsed,
    max_tokens_for,
    run_all,
)
from service.core.text import require_text
from service.platform.errors import InputError

if TYPE_CHECKING:
    from service.core.judges.llm import LLMClient
    from service.platform.settings import LLMSettings

__all__ = [
    "MAX_MCQ_ITEMS",
    "MAX_OPTIONS",
    "MCQ_TEXT_MAX_CHARS",
    "NONE_OF_THE_OTHERS",
    "PAPER_NONE_OF_THE_OTHERS",
    "LabelledOption",
    "McqAnswerRecord",
    "McqAnswerRequest",
    "McqCategoryStats",
    "McqItem",
    "McqOption",
    "McqProfile",
    "McqRunOutcome",
    "McqRunReport",
    "McqRunRequest",
    "McqRunSkipped",
    "McqVariant",
    "McqVariantStats",
    "McqVariantsRequest",
    "mcq_variants",
    "read_answer",
    "run_mcq",
    "validate_mcq_run",
    "variant_names",
]

MCQ_TEXT_MAX_CHARS = 20_000
MAX_OPTIONS = 10
MAX_MCQ_ITEMS = 1000
_LABELS = "ABCDEFGHIJ"

# the replacement option's text per prompt language (a request may give its own); the paper protocol uses the
# research's own words, in English whatever the language
NONE_OF_THE_OTHERS: dict[MataLanguage, str] = {"en": "None of the others", "te": "మిగతావేవీ కావు"}
PAPER_NONE_OF_THE_OTHERS = "none of the others"


class McqOption(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    text: str
    correct: bool = False


class McqItem(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A multiple-choice item: options in order, exactly one marked correct."""

    id: str
    question: str
    options: list[McqOption]
    category: str | None = None


class LabelledOption(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    label: str
    text: str


class McqVariant(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    item_id: str
    variant: str
    question: str
    options: list[LabelledOption]
    answer: str  # the key: the label of the right option
    answer_text: str
    category: str | None = None


class McqVariantsRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    item: McqItem
    language: MataLanguage = "en"
    none_text: str | None = None
    variants: list[str] | None = None


class McqAnswerRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A model's reply to read; ``labels`` are the item's option letters, ``answer`` the key (optional)."""

    text: str
    labels: list[str] = msgspec.field(default_factory=lambda: ["A", "B", "C", "D"])
    answer: str | None = None


class McqRunRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Ask ``model`` (on the configured provider) every variant of every item."""

    model: str
    items: list[McqItem]
    language: MataLanguage = "en"
    none_text: str | None = None
    variants: list[str] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] = 0.0
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # trisk: the default prompt and reading; paper: Inspect's multiple-choice template and its strict ANSWER: reading
    # verbatim, and the research's "none of the others"
    protocol: Protocol = "trisk"


class McqAnswerRecord(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One question asked: the reading, or ``error`` when the model could not be reached (reading None)."""

    item_id: str
    variant: str
    answer: str
    reading: McqReading | None
    raw: str | None
    error: str | None
    category: str | None = None


class McqVariantStats(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``accuracy`` = correct / (asked - failed), with its binomial standard error sqrt(p(1-p)/n);
    ``accuracy_when_answered`` leaves format failures out too. Every rate is None, with ``reason``, when no answer
    could be read (all format failures or upstream failures): a model that answered nothing is not 0% accurate."""

    variant: str
    asked: int
    failed: int
    correct: int
    wrong: int
    format_failures: int
    accuracy: float | None
    format_failure_rate: float | None
    accuracy_when_answered: float | None
    choices: dict[str, int]
    standard_error: float | None = None
    reason: str | None = None


class McqCategoryStats(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One item category (``None``: items without one) over every variant asked: the same figures as a variant's."""

    category: str | None
    asked: int
    failed: int
    correct: int
    format_failures: int
    accuracy: float | None
    standard_error: float | None
    reason: str | None = None


class McqProfile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Position bias: accuracy with the answer forced to each position, and its spread (max - min).
    Negation sensitivity: accuracy of ``original`` minus that of NE and of NR. A figure that rests on a variant
    without a readable answer is None, and ``reason`` says which variants had none."""

    position_accuracy: dict[str, float | None]
    position_spread: float | None
    ne_drop: float | None
    nr_drop: float | None
    reason: str | None = None


class McqRunReport(msgspec.Struct, tag="ran", tag_field="status", forbid_unknown_fields=True, frozen=True):
    model: str
    language: MataLanguage
    prompt_version: str
    prompt_hash: str
    temperature: float
    none_text: str
    variants: list[McqVariantStats]
    profile: McqProfile
    answers: list[McqAnswerRecord]
    cost: Cost
    categories: list[McqCategoryStats] = msgspec.field(default_factory=list)
    protocol: Protocol = "trisk"


class McqRunSkipped(msgspec.Struct, tag="skipped", tag_field="status", forbid_unknown_fields=True, frozen=True):
    reason: str


McqRunOutcome = McqRunReport | McqRunSkipped


def variant_names(n_options: int) -> list[str]:
    return ["original", *_LABELS[:n_options], "NE", "NR"]


def _validate_item(item: McqItem, none_text: str, at: str) -> int:
    """The index of the correct option; InputError for anything that makes the variants meaningless."""
    if not item.id.strip():
        raise InputError(f"{at}.id is empty", extra={"field": f"{at}.id"})
    require_text(item.question, field=f"{at}.question", max_chars=MCQ_TEXT_MAX_CHARS)
    if not 2 <= len(item.options) <= MAX_OPTIONS:
        raise InputError(f"{at}.options: give 2-{MAX_OPTIONS} options", extra={"field": f"{at}.options"})
    for j, option in enumerate(item.options):
        require_text(option.text, field=f"{at}.options[{j}].text", max_chars=MCQ_TEXT_MAX_CHARS)
    correct = [j for j, option in enumerate(item.options) if option.correct]
    if len(correct) != 1:
        raise InputError(
            f"{at}: a multiple-choice item needs exactly one correct option, it has {len(correct)}",
            extra={"field": f"{at}.options"},
        )
    folded = none_text.strip().casefold()
    if any(option.text.strip().casefold() == folded for option in item.options):
        raise InputError(f"{at}: an option already reads {none_text!r}; give another none_text")
    return correct[0]


def _none_text(language: MataLanguage, none_text: str | None, protocol: Protocol = "trisk") -> str:
    if none_text is None:
        return PAPER_NONE_OF_THE_OTHERS if protocol == "paper" else NONE_OF_THE_OTHERS[language]
    return require_text(none_text, field="none_text", max_chars=200).strip()


def _wanted(variants: Sequence[str] | None, n_options: int) -> list[str]:
    known = variant_names(n_options)
    if variants is None:
        return known
    unknown = [v for v in variants if v not in known]
    if unknown or not variants:
        raise InputError(f"unknown variant(s) {unknown or variants}", extra={"known": known})
    return [v for v in known if v in set(variants)]


def mcq_variants(
    item: McqItem,
    *,
    language: MataLanguage = "en",
    none_text: str | None = None,
    variants: Sequence[str] | None = None,
    at: str = "item",
    protocol: Protocol = "trisk",
) -> list[McqVariant]:
    """The item's variants in the order original, A, B, ..., NE, NR (or the ones asked for)."""
    replacement = _none_text(language, none_text, protocol)
    c = _validate_item(item, replacement, at)
    texts = [option.text for option in item.options]
    others = texts[:c] + texts[c + 1 :]
    labels = _LABELS[: len(texts)]
    out: list[McqVariant] = []
    for name in _wanted(variants, len(texts)):
        if name == "original":
            options, key = texts, c
        elif name == "NE":
            options, key = [*others, replacement], len(texts) - 1
        elif name == "NR":
            options, key = [*texts[:c], replacement, *texts[c + 1 :]], c
        else:
            key = labels.index(name)
            options = [*others[:key], texts[c], *others[key:]]
        out.append(
            McqVariant(
                item_id=item.id,
                variant=name,
                question=item.question,
                options=[LabelledOption(label, text) for label, text in zip(labels, options, strict=True)],
                answer=labels[key],
                answer_text=options[key],
                category=item.category,
            )
        )
    return out


def read_answer(request: McqAnswerRequest) -> McqReading:
    """``POST /v1/mata/mcq-answers``: labels must be distinct single letters, the key one of them."""
    labels = [label.strip().upper() for label in request.labels]
    if not labels or any(len(label) != 1 or not label.isalpha() for label in labels) or len(set(labels)) != len(labels):
        raise InputError("labels must be distinct single letters", extra={"field": "labels"})
    if request.answer is not None and request.answer.strip().upper() not in labels:
        raise InputError(f"answer {request.answer!r} is not one of the labels", extra={"field": "answer"})
    if request.text.strip():  # an empty reply is a format failure to report, not bad input
        require_text(request.text, field="text", max_chars=MCQ_TEXT_MAX_CHARS)
    answer = request.answer.strip() if request.answer is not None else None
    return read_mcq_answer(request.text, labels=labels, answer=answer)


def validate_mcq_run(request: McqRunRequest, *, max_tokens_cap: int | None = None) -> list[McqVariant]:
    """Every question the run will ask, validated up front (nothing is asked when one item is bad); ``max_tokens``
    at most ``max_tokens_cap`` (TRISK_LLM_MAX_TOKENS)."""
    if not request.model.strip():
        raise InputError("model is empty", extra={"field": "model"})
    if max_tokens_cap is not None and request.max_tokens is not None and request.max_tokens > max_tokens_cap:
        raise InputError(
            f"max_tokens is {request.max_tokens}; the limit is {max_tokens_cap} (TRISK_LLM_MAX_TOKENS)",
            extra={"field": "max_tokens", "limit": max_tokens_cap},
        )
    if not request.items or len(request.items) > MAX_MCQ_ITEMS:
        raise InputError(f"items: give 1-{MAX_MCQ_ITEMS} items", extra={"limit": MAX_MCQ_ITEMS})
    if len({item.id for item in request.items}) != len(request.items):
        raise InputError("items: two items have the same id")
    questions: list[McqVariant] = []
    for i, item in enumerate(request.items):
        questions += mcq_variants(
            item,
            language=request.language,
            none_text=request.none_text,
            variants=request.variants,
            at=f"items[{i}]",
            protocol=request.protocol,
        )
    return questions


async def _ask(
    client: LLMClient,
    endpoint: Endpoint,
    question: McqVariant,
    request: McqRunRequest,
    max_tokens: int | None,
    guard: CallGuard | None,
) -> tuple[McqAnswerRecord, Cost]:
    messages = build_mcq_messages(
        language=request.language,
        question=question.question,
        options=[(o.label, o.text) for o in question.options],
        protocol=request.protocol,
    )
    labels = [o.label for o in question.options]

    def parse(text: str | None, finish_reason: str | None) -> tuple[McqReading | None, str | None]:
        reading = read_mcq_answer(text, finish_reason, labels=labels, answer=question.answer, protocol=request.protocol)
        return reading, None

    outcome: Outcome[McqReading] = await ask_until_parsed(
        client,
        endpoint,
        messages,
        prompt_version=mcq_prompt(request.language, request.protocol)[0],
        parse=parse,
        options=AttemptOptions(temperature=request.temperature, max_attempts=1),
        max_tokens=max_tokens,
        guard=guard,
    )
    last = outcome.attempts[-1] if outcome.attempts else None
    record = McqAnswerRecord(
        item_id=question.item_id,
        variant=question.variant,
        answer=question.answer,
        reading=outcome.value,
        raw=last.raw if last is not None else None,
        error=outcome.error if outcome.status in ("failed", "timed_out") else None,
        category=question.category,
    )
    return record, outcome.cost


class _Tally(msgspec.Struct):
    asked: int
    failed: int
    correct: int
    wrong: int
    format_failures: int
    accuracy: float | None
    standard_error: float | None
    reason: str | None


def _tally(records: list[McqAnswerRecord]) -> _Tally:
    """Counts, accuracy over the questions that reached the model and its standard error; None with the reason when
    no answer could be read (then there is nothing to be accurate about)."""
    failed = sum(1 for r in records if r.reading is None)
    correct = sum(1 for r in records if isinstance(r.reading, McqAnswered) and r.reading.correct)
    wrong = sum(1 for r in records if isinstance(r.reading, McqAnswered) and not r.reading.correct)
    format_failures = sum(1 for r in records if isinstance(r.reading, McqFormatFailure))
    reached = len(records) - failed
    if correct + wrong == 0:
        errors = [r.reading.error for r in records if isinstance(r.reading, McqFormatFailure)]
        said = []
        if errors:
            top = max(dict.fromkeys(errors), key=errors.count)
            said.append(f"{len(errors)} of {len(records)} format failures ({PARSE_ERROR_WORDS.get(top, top)})")
        if failed:
            said.append(f"{failed} of {len(records)} not answered (upstream)")
        reason = "no readable answer: " + ("; ".join(said) or "nothing was asked")
        return _Tally(len(records), failed, 0, 0, format_failures, None, None, reason)
    p = correct / reached
    return _Tally(len(records), failed, correct, wrong, format_failures, p, math.sqrt(p * (1 - p) / reached), None)


def _stats(variant: str, records: list[McqAnswerRecord]) -> McqVariantStats:
    t = _tally(records)
    reached = t.asked - t.failed
    answered = t.correct + t.wrong
    choices: dict[str, int] = {}
    for r in records:
        if isinstance(r.reading, McqAnswered):
            choices[r.reading.choice] = choices.get(r.reading.choice, 0) + 1
    return McqVariantStats(
        variant=variant,
        asked=t.asked,
        failed=t.failed,
        correct=t.correct,
        wrong=t.wrong,
        format_failures=t.format_failures,
        accuracy=t.accuracy,
        format_failure_rate=t.format_failures / reached if reached else None,
        accuracy_when_answered=t.correct / answered if answered else None,
        choices=dict(sorted(choices.items())),
        standard_error=t.standard_error,
        reason=t.reason,
    )


def _categories(records: list[McqAnswerRecord]) -> list[McqCategoryStats]:
    by: dict[str | None, list[McqAnswerRecord]] = {}
    for r in records:
        by.setdefault(r.category, []).append(r)
    out = []
    for category in sorted(by, key=lambda c: (c is None, c or "")):
        t = _tally(by[category])
        out.append(
            McqCategoryStats(
                category, t.asked, t.failed, t.correct, t.format_failures, t.accuracy, t.standard_error, t.reason
            )
        )
    return out


def _drop(base: float | None, other: float | None) -> float | None:
    return None if base is None or other is None else base - other


def _profile(stats: dict[str, McqVariantStats]) -> McqProfile:
    positions = {name: s.accuracy for name, s in stats.items() if len(name) == 1}
    defined = [a for a in positions.values() if a is not None]
    original = stats["original"].accuracy if "original" in stats else None
    unread = [name for name, s in stats.items() if s.accuracy is None]
    # the spread is over every forced position or none: one position without answers would make it a spread of
    # the others, reading as less position bias than there is
    spread = max(defined) - min(defined) if defined and len(defined) == len(positions) else None
    return McqProfile(
        position_accuracy=positions,
        position_spread=spread,
        ne_drop=_drop(original, stats["NE"].accuracy) if "NE" in stats else None,
        nr_drop=_drop(original, stats["NR"].accuracy) if "NR" in stats else None,
        reason=f"no readable answer in variant(s) {', '.join(unread)}" if unread else None,
    )


async def run_mcq(
    client: LLMClient,
    endpoint: Endpoint,
    request: McqRunRequest,
    settings: LLMSettings | None = None,
    guard: CallGuard | None = None,
) -> McqRunOutcome:
    """Ask every variant concurrently (the client limits calls per provider), within the guard's deadline; skipped
    without a provider. ``max_tokens``: the request's, else the free-text default of ``settings``."""
    questions = validate_mcq_run(request)
    if not endpoint.base_url:
        return McqRunSkipped(NO_PROVIDER)
    max_tokens = request.max_tokens
    if max_tokens is None and settings is not None:
        max_tokens = max_tokens_for("text", None, settings)
    results = await run_all(*(_ask(client, endpoint, q, request, max_tokens, guard) for q in questions))
    by_variant: dict[str, list[McqAnswerRecord]] = {}
    for record, _ in results:
        by_variant.setdefault(record.variant, []).append(record)
    order = variant_names(MAX_OPTIONS)
    stats = {v: _stats(v, by_variant[v]) for v in sorted(by_variant, key=order.index)}
    version, digest = mcq_prompt(request.language, request.protocol)
    return McqRunReport(
        model=endpoint.model,
        language=request.language,
        prompt_version=version,
        prompt_hash=digest,
        temperature=request.temperature,
        none_text=_none_text(request.language, request.none_text, request.protocol),
        protocol=request.protocol,
        variants=list(stats.values()),
        profile=_profile(stats),
        answers=[record for record, _ in results],
        categories=_categories([record for record, _ in results]),
        cost=Cost.total(spent for _, spent in results),
    )
