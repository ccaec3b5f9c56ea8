"""Builders for review tests: AssessmentState-shaped records written into the durable store (assessments and their
review items), labelled items."""

from __future__ import annotations

import time
import uuid
from typing import Any

from redis.asyncio import Redis

from service.core.budget import Budget, tier_of
from service.core.judges.llm import CascadePlan, Cost
from service.core.novelty_report import NoveltySkipped
from service.core.ranking import priority
from service.core.records import (
    AssessmentMeta,
    AssessmentRequest,
    CandidateFinal,
    CandidateIn,
    CandidateOutcome,
    CheapPart,
    CheapSignature,
    FinalPart,
    LLMPart,
    LLMSignature,
    PromptVersion,
    SourceIn,
)
from service.core.risk import RiskResult
from service.core.types import Flag, Severity, SignalValue
from service.platform.settings import get_settings
from service.review import enqueue_for_review, item_id_of
from service.review.calibration import LabelledItem
from service.state.durable import DurableStore, open_store
from service.state.store import AssessmentState, Store
from tests.conftest import TEST_REDIS_URL

REDIS_URL = TEST_REDIS_URL  # this process's test db (one per xdist worker)


def candidate_row(
    pct: float,
    *,
    forced: bool = False,
    score: float = 0.0,
    flags: list[Flag] | None = None,
    rule: str = "test-risk@1.0.0",
    severity: Severity = "major",
) -> CandidateFinal:
    """A final row as the worker writes it: a forced candidate is forced by a flag of ``severity`` (``test_flag``)."""
    severity_or_none: Severity | None = severity if forced else None
    percentile = 100.0 if forced else pct
    risk = RiskResult(
        score=score,
        priority=priority(score, severity_or_none),
        rule=rule,
        components={},
        forced_by_flag="test_flag" if forced else None,
        forced_severity=severity_or_none,
    )
    budget = Budget(percentile=percentile, tier=tier_of(percentile), reference_n=0, seen_n=0, forced=forced)
    return CandidateFinal(risk=risk, routing=None, flags=list(flags or []), budget=budget)


async def write_assessment(
    redis: Redis,
    tenant: str,
    cands: list[dict[str, Any]],
    *,
    ref: str | None = None,
    batch_id: str | None = None,
    gemba: dict[str, dict[str, float]] | None = None,
    db: DurableStore | None = None,
) -> AssessmentState:
    """cands: {"id", "text", "model", "pct", "forced"?, "signals": {name: value}, "flags"?} per candidate; the items go
    to ``db``, by default the store the settings name (the one the app of a test reads)."""
    db = db or open_store(get_settings().durable)
    store = Store(redis, retention_seconds=600, db=db)
    req = AssessmentRequest(
        source=SourceIn(text="Evaṃ me sutaṃ. Ekaṃ samayaṃ bhagavā sāvatthiyaṃ viharati.", lang="pli", ref=ref),
        candidates=[
            CandidateIn(id=c["id"], text=c.get("text", f"text of {c['id']}"), model=c.get("model")) for c in cands
        ],
    )
    meta = AssessmentMeta(
        id=uuid.uuid4().hex,
        tenant=tenant,
        created_at=time.time(),
        request=req,
        checks=["embedding_distance"],
        novelty=NoveltySkipped(reason="test"),
        parts=["cheap"],
        batch_id=batch_id,
    )
    await store.create(meta)
    cheap = CheapPart(
        finished_at=time.time(),
        candidates={
            c["id"]: CandidateOutcome(
                signals={k: SignalValue(value=v) for k, v in c["signals"].items()}, flags=c.get("flags", [])
            )
            for c in cands
        },
        signature=CheapSignature(embedding={}),
        routing={},
    )
    await store.put_cheap(tenant, meta.id, cheap)
    llm = None
    if gemba:
        llm = LLMPart(
            finished_at=time.time(),
            candidates={
                cid: CandidateOutcome(
                    signals={
                        "gemba_mean_risk": SignalValue(value=100 - sum(sc.values()) / len(sc), detail={"scores": sc})
                    },
                    flags=[],
                )
                for cid, sc in gemba.items()
            },
            signature=LLMSignature(
                panel="test",
                panel_version="t",
                judges=[],
                gemba_prompt=PromptVersion("t", "t"),
                backtranslation_prompt=PromptVersion("t", "t"),
                temperature=0.0,
            ),
            cost=Cost(),
            plan=CascadePlan(budget_fraction=1.0, budget_candidates=0, max_calls=0, planned_calls=0, candidates=[]),
            details={},
        )
        await store.put_llm(tenant, meta.id, llm)
    final = FinalPart(
        finished_at=time.time(),
        candidates={
            c["id"]: candidate_row(
                c["pct"],
                forced=c.get("forced", False),
                score=c.get("score", c["pct"]),
                flags=c.get("flags"),
                severity=c.get("severity", "major"),
            )
            for c in cands
        },
        risk_models=["test-risk@1.0.0"],
    )
    await store.put_final(tenant, meta.id, final)
    state = await store.get(tenant, meta.id)
    await enqueue_for_review(db, tenant, state, retention_seconds=600)
    return state


async def cleanup(redis: Redis, tenant: str) -> None:
    """Delete this test tenant's keys only (never FLUSHDB)."""
    keys = [k async for k in redis.scan_iter(match=f"trisk:t:{tenant}:*", count=500)]
    if keys:
        await redis.delete(*keys)


def iid(state: AssessmentState, cid: str) -> str:
    return item_id_of(state.meta.id, cid)


def labelled(
    label: str,
    signals: dict[str, float],
    *,
    passage: str = "p",
    judges: dict[str, float] | None = None,
    forced: bool = False,
    n: int = 0,
    model: str | None = None,
) -> LabelledItem:
    snap = {
        "signals": {k: {"status": "value", "value": v, "detail": {}} for k, v in signals.items()},
        "flags": [],
        "judge_scores": judges or {},
        "risk": {"score": signals.get("s", 0.0), "rule": "test-risk@1.0.0"},
        "budget": {"forced": forced},
        "passage": passage,
        "model": model,
    }
    return LabelledItem(f"item{n}", passage, label, 1, snap, model)  # type: ignore[arg-type]
