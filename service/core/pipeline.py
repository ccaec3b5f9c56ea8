"""One assessment's computation, free of I/O: the cheap tier (embeddings, signals, critical content, hard flags) and
the final risk, flags and budget rank. Workers, the CLI and the benchmarks all call these."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from service.core.errors import NotFound
from service.core.records import CandidateIn, CandidateOutcome, CheapPart, FinalPart, LLMPart
from service.core.risk import RiskModel, RiskRegistry, RiskResult, score
from service.core.signals import LengthModel, compute_signals
from service.core.types import Flag, SignalResult, SignalSkipped, SignalValue

__all__ = [
    "Embedder",
    "SeenScores",
    "budget_of",
    "cheap_tier",
    "check_embedding_models",
    "final_part",
    "final_risks",
    "tier_of",
]

GEMBA_SIGNAL = "gemba_mean_risk"
ROUTING_MODEL = "routing"  # alias of the research's routing rule fitted for the running peer encoder


class Embedder(Protocol):
    model_id: str

    def embed(self, texts: list[str], kind: str = "passage") -> np.ndarray: ...


class CriticalLike(Protocol):
    signature: dict[str, Any]

    def check_passage(
        self, source: str, candidates: Sequence[str], src_lang: str = ..., tgt_lang: str = ...
    ) -> Any: ...


def _maybe(registry: RiskRegistry, name: str) -> RiskModel | None:
    try:
        return registry.get(name)
    except NotFound:
        return None


def _novelty_signal(novelty: dict[str, Any]) -> SignalResult:
    if novelty.get("status") == "value":
        return SignalValue(value=float(novelty["index"]), detail={"band": novelty.get("band")})
    return SignalSkipped(reason=str(novelty.get("reason", "novelty not computed")))


def cheap_tier(
    *,
    source_text: str,
    source_lang: str,
    target_lang: str,
    candidates: Sequence[CandidateIn],
    checks: Sequence[str],
    novelty: dict[str, Any],
    peer_embedder: Embedder | None,
    source_embedder: Embedder | None,
    embedder_signature: dict[str, Any],
    length_model: LengthModel | None,
    critical: CriticalLike | None,
    registry: RiskRegistry,
    routing_model: str = ROUTING_MODEL,
) -> CheapPart:
    """Every cheap signal and hard flag for the candidates of one passage, plus their routing score.

    Peer agreement uses ``peer_embedder`` (a target-language encoder); the source-candidate distance, only when
    asked for, uses ``source_embedder`` (a multilingual encoder) on the source and every candidate.
    """
    texts = [c.text for c in candidates]
    peer_emb = src_emb = src_space = None
    if peer_embedder is not None and "peer_distance" in checks and len(texts) > 1:
        peer_emb = peer_embedder.embed(texts, kind="passage")
    if source_embedder is not None and "source_distance" in checks:
        vecs = source_embedder.embed([source_text, *texts], kind="passage")
        src_emb, src_space = vecs[0], vecs[1:]
    computed = compute_signals(
        source_text,
        texts,
        source_lang=source_lang,
        target_lang=target_lang,
        source_embedding=src_emb,
        candidate_embeddings=peer_emb,
        source_space_embeddings=src_space,
        candidate_models=[c.model or "" for c in candidates],
        length_model=length_model if "length_ratio" in checks else None,
        novelty=_novelty_signal(novelty),
    )
    reports = None
    if critical is not None and "critical" in checks:
        reports = critical.check_passage(source_text, texts, src_lang=source_lang, tgt_lang=target_lang)
    outcomes: dict[str, CandidateOutcome] = {}
    routing: dict[str, float] = {}
    router = _maybe(registry, routing_model)
    for i, c in enumerate(candidates):
        signals: dict[str, SignalResult] = dict(computed[i].signals)
        flags: list[Flag] = list(computed[i].flags) if "hard_flags" in checks else []
        if reports is not None:
            signals.update(reports[i].signals)
            flags.extend(reports[i].flags)
        if "peer_distance" in checks and peer_embedder is None:
            signals["peer_centroid_distance"] = SignalSkipped(reason="no peer embedding backend available")
        if "source_distance" in checks and source_embedder is None:
            signals["source_distance"] = SignalSkipped(reason="no multilingual embedding backend available")
        outcomes[c.id] = CandidateOutcome(signals=signals, flags=flags)
        if router is not None:
            routing[c.id] = score(router, signals, flags, registry=registry).score
    signature: dict[str, object] = {
        "embedding": embedder_signature,
        "critical": None if critical is None else critical.signature,
        "length_model": None
        if length_model is None
        else f"{length_model.source_lang}-{length_model.target_lang}@{length_model.version}",
    }
    if router is not None:
        signature["routing_model"] = router.rule
    return CheapPart(finished_at=time.time(), candidates=outcomes, signature=signature, routing=routing)


def check_embedding_models(registry: RiskRegistry, names: Sequence[str], peer_model_id: str | None) -> None:
    """Refuse to start with a risk model whose z-statistics come from another peer encoder than the running one:
    distances of two encoders live on different scales, and every score and budget tier would be wrong."""
    for name in names:
        model = _maybe(registry, name)
        if model is None or model.embedding_model is None:
            continue
        if model.embedding_model != peer_model_id:
            raise RuntimeError(
                f"risk model {model.rule} (from {name!r}) was fitted on {model.embedding_model} embeddings but the "
                f"peer encoder is {peer_model_id}; pick a model fitted for this encoder (TRISK_RISK_MODEL, "
                "TRISK_ROUTING_MODEL) or the encoder the model needs (TRISK_PEER_EMBEDDING_BACKEND)"
            )


def tier_of(percentile: float) -> str:
    """Budget tier of a percentile on a 0-100 scale (top 1% = 99 and above)."""
    for tier, lower in (("top_1", 99.0), ("top_5", 95.0), ("top_10", 90.0), ("top_20", 80.0)):
        if percentile >= lower:
            return tier
    return "rest"


@dataclass(frozen=True)
class SeenScores:
    """How many scores of one model version the service has produced, and how many lie at or below each value."""

    total: int
    at_or_below: list[int]


def budget_of(model: RiskModel, value: float, forced: bool, seen_total: int, seen_below: int) -> dict[str, Any]:
    """Percentile against the model's reference distribution plus the scores seen in service, pooled by count.

    The reference (the dev half, ~7,600 scores as 1,001 quantiles) anchors the scale on day one; every score the
    service produces joins it, so after a while the rank reflects the team's own traffic. A hard-flagged candidate
    is forced to the 100th percentile.
    """
    if forced:
        return {"percentile": 100.0, "tier": "top_1", "reference_n": 0, "seen_n": seen_total, "forced": True}
    ref = model.reference
    ref_n = ref.n if ref is not None else 0
    ref_below = 0.0
    if ref is not None and ref.quantiles:
        q = np.asarray(ref.quantiles)
        ref_below = float(np.searchsorted(q, value, side="right")) / len(q) * ref_n
    total = ref_n + seen_total
    pct = 100.0 * (ref_below + seen_below) / total if total else 50.0
    pct = round(min(max(pct, 0.0), 100.0), 3)
    return {"percentile": pct, "tier": tier_of(pct), "reference_n": ref_n, "seen_n": seen_total, "forced": False}


def _risk_dict(r: RiskResult) -> dict[str, Any]:
    d = msgspec.to_builtins(r)
    d.pop("percentile", None)
    d.pop("tier", None)
    d["score"] = round(float(r.score), 6)
    d["components"] = {k: round(float(v), 6) for k, v in r.components.items()}
    return d


def final_risks(
    candidates: Sequence[CandidateIn],
    cheap: CheapPart,
    llm: LLMPart | None,
    registry: RiskRegistry,
    model_name: str,
) -> dict[str, tuple[RiskModel, RiskResult, list[Flag], dict[str, Any]]]:
    """Per candidate: the model that scored it, its result, its flags, its signals.

    With GEMBA available for a candidate the final risk is the panel's mean risk (the research found adding novelty
    on top made the ranking worse); otherwise the default model, falling back to the single-candidate model when
    peer signals are missing. The routing score is kept as its own field either way.
    """
    default = _maybe(registry, model_name)
    gemba_model = _maybe(registry, "gemba-mean-risk")
    out: dict[str, tuple[RiskModel, RiskResult, list[Flag], dict[str, Any]]] = {}
    for c in candidates:
        part = cheap.candidates[c.id]
        signals: dict[str, SignalResult] = dict(part.signals)
        flags = list(part.flags)
        if llm is not None and c.id in llm.candidates:
            signals.update(llm.candidates[c.id].signals)
            flags.extend(llm.candidates[c.id].flags)
        model = default
        if gemba_model is not None and isinstance(signals.get(GEMBA_SIGNAL), SignalValue):
            model = gemba_model
        if model is None:
            raise LookupError(f"risk model {model_name!r} is not in models/risk")
        result = score(model, signals, flags, registry=registry)
        used = _maybe(registry, result.rule.split("@", 1)[0]) or model
        out[c.id] = (used, result, flags, signals)
    return out


def final_part(
    candidates: Sequence[CandidateIn],
    cheap: CheapPart,
    risks: dict[str, tuple[RiskModel, RiskResult, list[Flag], dict[str, Any]]],
    seen: dict[str, SeenScores],
) -> FinalPart:
    """Risk, routing, flags and budget rank per candidate; ``risks`` from ``final_risks``, ``seen`` the service's
    counts per model rule (``SeenScores.at_or_below`` aligned with ``candidates``)."""
    rows: dict[str, dict[str, Any]] = {}
    for i, c in enumerate(candidates):
        model, result, flags, _ = risks[c.id]
        s = seen.get(result.rule)
        forced = result.forced_by_flag is not None
        rows[c.id] = {
            "risk": _risk_dict(result),
            "routing": {"rule": cheap.signature.get("routing_model"), "score": round(cheap.routing[c.id], 6)}
            if c.id in cheap.routing
            else None,
            "flags": msgspec.to_builtins(flags),
            "budget": budget_of(model, result.score, forced, s.total if s else 0, s.at_or_below[i] if s else 0),
        }
    rules = sorted({r[1].rule for r in risks.values()})
    return FinalPart(finished_at=time.time(), candidates=rows, signature={"risk_models": rules})
