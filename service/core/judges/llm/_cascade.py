"""The cascade: spend LLM checks on the riskiest tail by routing score, within a budget fraction and a call cap.

Planning is pure (``plan_cascade``): candidates are ranked by routing score (highest first, NaN last, ties by
id), the top ``budget_count(n, budget_fraction)`` are eligible (``service.core.budget``: ceil, at least one), and
in rank order each eligible candidate gets GEMBA (one call per selected judge), then backtranslation (one call), then,
when asked for (``error_spans``, off by default: its answers are long), error spans (one call per selected judge)
while the nominal calls fit under ``max_calls``; the first check that does not fit ends the spending (nothing ranked
lower is back-filled). The cap budgets nominal calls; parse and HTTP retries are reported in ``cost`` but not
pre-budgeted. Without a provider every check is skipped ("no LLM provider configured").

Running is bounded (``CallGuard``): every call shares the deadline ``settings.deadline_seconds``; a check whose
judges did not answer in time reads ``timed_out``, one whose judges all failed ``failed``, each with the reason.
The cost is reported in total and per judge (calls, tokens, timeouts, seconds).
"""

from __future__ import annotations

import math
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from service.core.budget import budget_count
from service.core.judges.llm._backtranslation import BacktranslationResult, backtranslate, backtranslation_signal
from service.core.judges.llm._client import NO_PROVIDER
from service.core.judges.llm._gemba import GembaResult, gemba_signal, score_candidate
from service.core.judges.llm._guard import CallGuard
from service.core.judges.llm._judging import AttemptOptions, Cost, JudgeRun, dominant_cause, dominant_status
from service.core.judges.llm._panels import JudgeSelection, Panel, select_judges
from service.core.judges.llm._runner import (
    NO_ELIGIBLE_JUDGE_AFTER_EXCLUSION,
    below_budget,
    call_cap_reached,
    check_disabled,
    run_all,
)
from service.core.judges.llm._spans import SpansResult, mark_spans, spans_signal
from service.core.types import SignalResult, SignalSkipped
from service.platform.errors import InputError

if TYPE_CHECKING:
    from service.core.judges.llm._client import LLMClient
    from service.platform.settings import LLMSettings

__all__ = [
    "NO_PROVIDER",
    "CandidateChecks",
    "CascadeItem",
    "CascadePlan",
    "CascadeResult",
    "CheckOutcome",
    "CheckStatus",
    "PlannedCandidate",
    "plan_cascade",
    "planned_with",
    "run_cascade",
]


CheckName = Literal["gemba", "backtranslation", "error_spans"]


class CascadeItem(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One candidate: its id, the Pali source, the English text, the model that produced it, its routing score."""

    id: str
    source: str
    candidate: str
    model: str | None = None
    routing_score: float = 0.0


CheckStatus = Literal["planned", "ran", "skipped", "failed", "timed_out", "invalid"]


class CheckOutcome(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A check of one candidate: planned, then ran (a judge gave a value), invalid (judges answered, nothing parsed),
    timed_out (no answer before the deadline), failed (no judge could be reached) or skipped; when it gave nothing,
    ``reason`` names the dominant cause ("3 of 3 judges gave answers that do not parse: truncated at max_tokens").
    ``judges`` counts the judges asked by how each ended; ``attempts`` the answers they gave in all."""

    check: CheckName
    status: CheckStatus
    reason: str | None = None
    judges: dict[str, int] = msgspec.field(default_factory=dict)
    attempts: int = 0


class PlannedCandidate(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    id: str
    rank: int  # 1 = highest routing score
    routing_score: float
    selection: JudgeSelection
    checks: list[CheckOutcome]
    planned_calls: int

    def runs(self, check: CheckName) -> bool:
        return any(c.check == check and c.status == "planned" for c in self.checks)


class CascadePlan(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    budget_fraction: float
    budget_candidates: int
    max_calls: int
    planned_calls: int
    candidates: list[PlannedCandidate]  # in input order


_NOT_ASKED = SignalSkipped(check_disabled("error_spans"))


class CandidateChecks(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Per candidate: the signals for the API, the full results when a check ran, and what it cost."""

    id: str
    rank: int
    routing_score: float
    gemba: SignalResult
    backtranslation: SignalResult
    checks: list[CheckOutcome]
    cost: Cost
    gemba_result: GembaResult | None = None
    backtranslation_result: BacktranslationResult | None = None
    # error spans are asked for only on request (a result stored before they existed reads as not asked)
    error_spans: SignalResult = msgspec.field(default_factory=lambda: _NOT_ASKED)
    error_spans_result: SpansResult | None = None


class CascadeResult(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    plan: CascadePlan
    candidates: list[CandidateChecks]  # in input order
    cost: Cost
    judges: dict[str, Cost] = msgspec.field(default_factory=dict)  # judge id -> what it cost
    timed_out: list[str] = msgspec.field(default_factory=list)  # judges benched for timing out
    deadline_seconds: float | None = None


def _rank_key(item: CascadeItem) -> tuple[int, float, str]:
    score = item.routing_score
    return (1, 0.0, item.id) if math.isnan(score) else (0, -score, item.id)


def plan_cascade(
    items: Sequence[CascadeItem],
    panel: Panel,
    *,
    budget_fraction: float,
    max_calls: int,
    gemba: bool = True,
    backtranslation: bool = True,
    error_spans: bool = False,
    configured: bool = True,
) -> CascadePlan:
    if not 0.0 <= budget_fraction <= 1.0:
        raise InputError("budget_fraction must be between 0 and 1")
    if max_calls < 0:
        raise InputError("max_calls must not be negative")
    n = len(items)
    budget = budget_count(n, budget_fraction)
    ranked = sorted(range(n), key=lambda i: _rank_key(items[i]))
    planned: dict[int, PlannedCandidate] = {}
    spent = 0
    capped = False  # once a check does not fit, nothing ranked lower runs (no back-filling of the tail)
    for rank, index in enumerate(ranked, start=1):
        item = items[index]
        selection = select_judges(panel, item.model)
        wanted: list[tuple[CheckName, bool, int]] = [
            ("gemba", gemba, len(selection.judges)),
            ("backtranslation", backtranslation, 1 if selection.judges else 0),
        ]
        if error_spans:  # opt-in: a plan lists it only when asked for
            wanted.append(("error_spans", True, len(selection.judges)))
        checks: list[CheckOutcome] = []
        calls = 0
        for name, enabled, cost in wanted:
            if not configured:
                checks.append(CheckOutcome(name, "skipped", NO_PROVIDER))
            elif not enabled:
                checks.append(CheckOutcome(name, "skipped", check_disabled(name)))
            elif rank > budget:
                checks.append(CheckOutcome(name, "skipped", below_budget(rank, n, budget, budget_fraction)))
            elif cost == 0:
                checks.append(CheckOutcome(name, "skipped", NO_ELIGIBLE_JUDGE_AFTER_EXCLUSION))
            elif capped or spent + calls + cost > max_calls:
                capped = True
                checks.append(CheckOutcome(name, "skipped", call_cap_reached(max_calls)))
            else:
                checks.append(CheckOutcome(name, "planned"))
                calls += cost
        spent += calls
        planned[index] = PlannedCandidate(item.id, rank, item.routing_score, selection, checks, calls)
    return CascadePlan(budget_fraction, budget, max_calls, spent, [planned[i] for i in range(n)])


def planned_with(
    items: Sequence[CascadeItem],
    panel: Panel,
    settings: LLMSettings,
    *,
    budget_fraction: float | None = None,
    max_calls: int | None = None,
    gemba: bool = True,
    backtranslation: bool = True,
    error_spans: bool = False,
    configured: bool = True,
) -> CascadePlan:
    """``plan_cascade`` with a request's budget and call cap, ``settings.review_budget`` and
    ``settings.max_calls_per_request`` where it gives none (what ``run_cascade`` plans, and what a stopped tier
    reports as planned)."""
    return plan_cascade(
        items,
        panel,
        budget_fraction=settings.review_budget if budget_fraction is None else budget_fraction,
        max_calls=settings.max_calls_per_request if max_calls is None else max_calls,
        gemba=gemba,
        backtranslation=backtranslation,
        error_spans=error_spans,
        configured=configured,
    )


def _skipped_signal(outcome: CheckOutcome) -> SignalSkipped:
    return SignalSkipped(reason=outcome.reason or "not run")


async def _run_one(
    client: LLMClient,
    item: CascadeItem,
    planned: PlannedCandidate,
    settings: LLMSettings,
    options: AttemptOptions,
    guard: CallGuard,
) -> CandidateChecks:
    texts: dict[str, Any] = {"source": item.source, "candidate": item.candidate, "options": options, "guard": guard}
    tasks: list[Coroutine[Any, Any, Any] | None] = [None, None, None]
    if planned.runs("gemba"):
        tasks[0] = score_candidate(client, planned.selection, settings, **texts)
    if planned.runs("backtranslation"):
        # the first judge left after self-exclusion backtranslates, so no family reads its own output back
        tasks[1] = backtranslate(client, planned.selection.judges[0], settings, **texts)
    if planned.runs("error_spans"):
        tasks[2] = mark_spans(client, planned.selection, settings, **texts)
    # a candidate's checks at once, as siblings of one task group
    gemba_result, bt_result, spans_result = await run_all(*(task or _none() for task in tasks))
    checks: list[CheckOutcome] = []
    signals: dict[str, SignalResult] = {}
    for outcome in planned.checks:
        if outcome.status != "planned":
            checks.append(outcome)
            signals[outcome.check] = _skipped_signal(outcome)
            continue
        if outcome.check == "gemba" and isinstance(gemba_result, GembaResult):
            signals["gemba"] = gemba_signal(gemba_result)
            checks.append(_ended("gemba", gemba_result.judges, signals["gemba"]))
        elif outcome.check == "backtranslation" and isinstance(bt_result, BacktranslationResult):
            signals["backtranslation"] = backtranslation_signal(bt_result)
            checks.append(_ended("backtranslation", [bt_result], signals["backtranslation"]))
        elif outcome.check == "error_spans" and isinstance(spans_result, SpansResult):
            signals["error_spans"] = spans_signal(spans_result)
            checks.append(_ended("error_spans", spans_result.judges, signals["error_spans"]))
    return CandidateChecks(
        id=item.id,
        rank=planned.rank,
        routing_score=item.routing_score,
        gemba=signals["gemba"],
        backtranslation=signals["backtranslation"],
        checks=checks,
        cost=Cost.total(r.cost for r in (gemba_result, bt_result, spans_result) if r is not None),
        gemba_result=gemba_result,
        backtranslation_result=bt_result,
        error_spans=signals.get("error_spans", _NOT_ASKED),
        error_spans_result=spans_result,
    )


def _ended(check: CheckName, judges: Sequence[JudgeRun], signal: SignalResult) -> CheckOutcome:
    """A check that ran: ``ran`` when a judge gave a value, else how most of its judges ended (invalid, timed_out,
    failed or skipped: the day's LLM budget), with the dominant cause as its reason."""
    counts: dict[str, int] = {}
    for j in judges:
        counts[j.status] = counts.get(j.status, 0) + 1
    attempts = sum(len(j.attempts) for j in judges)
    status = None if counts.get("valid") else dominant_status(judges)
    if status is None or status == "valid":
        return CheckOutcome(check, "ran", None, counts, attempts)
    if status == "skipped" and isinstance(signal, SignalSkipped):
        return CheckOutcome(check, "skipped", signal.reason, counts, attempts)
    return CheckOutcome(check, status, dominant_cause(judges), counts, attempts)


async def _none() -> Any:
    return None


async def run_cascade(
    client: LLMClient | None,
    items: Sequence[CascadeItem],
    panel: Panel,
    settings: LLMSettings,
    *,
    budget_fraction: float | None = None,
    max_calls: int | None = None,
    gemba: bool = True,
    backtranslation: bool = True,
    error_spans: bool = False,
    options: AttemptOptions | None = None,
    guard: CallGuard | None = None,
) -> CascadeResult:
    """Plan, then run the planned checks concurrently (the client bounds concurrency per provider), all within one
    deadline (``guard``, default ``settings.deadline_seconds`` from now).

    ``error_spans`` asks the panel for error spans too (off by default). ``budget_fraction``/``max_calls`` default
    to ``settings.review_budget``/``settings.max_calls_per_request``.
    With ``settings.base_url`` empty or no client, nothing is called and every check reads skipped.
    """
    guard = guard or CallGuard.from_settings(settings)
    configured = settings.configured and client is not None
    plan = planned_with(
        items,
        panel,
        settings,
        budget_fraction=budget_fraction,
        max_calls=max_calls,
        gemba=gemba,
        backtranslation=backtranslation,
        error_spans=error_spans,
        configured=configured,
    )
    options = options or AttemptOptions.of(settings)
    if client is not None and configured:
        results = await run_all(
            *(
                _run_one(client, item, p, settings, options, guard)
                for item, p in zip(items, plan.candidates, strict=True)
            )
        )
    else:
        results = [
            CandidateChecks(
                id=p.id,
                rank=p.rank,
                routing_score=p.routing_score,
                gemba=SignalSkipped(reason=NO_PROVIDER),
                backtranslation=SignalSkipped(reason=NO_PROVIDER),
                checks=p.checks,
                error_spans=SignalSkipped(reason=NO_PROVIDER),
                cost=Cost(),
            )
            for p in plan.candidates
        ]
    return CascadeResult(
        plan=plan,
        candidates=results,
        cost=Cost.total(r.cost for r in results),
        judges={judge: guard.costs[judge] for judge in sorted(guard.costs)},
        timed_out=sorted(guard.benched),
        deadline_seconds=guard.seconds,
    )
