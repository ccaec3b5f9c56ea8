"""One assessment's computation, free of I/O: the cheap tier (embeddings, signals, critical content, hard flags) and
the final risk, flags and budget rank. Workers, the CLI and the benchmarks all call these."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np

from service.core.budget import SeenScores, budget_of
from service.core.detector.model import Detector
from service.core.novelty_report import NoveltySkipped, NoveltyValue, SourceNovelty
from service.core.records import (
    LLM_SIGNALS,
    CandidateFinal,
    CandidateIn,
    CandidateOutcome,
    CheapPart,
    CheapSignature,
    FinalPart,
    LLMPart,
    Routing,
    merged_outcome,
)
from service.core.risk import RiskModel, RiskRegistry, RiskResult, score
from service.core.signals import LengthModel, compute_signals
from service.core.types import Flag, SignalResult, SignalSkipped, SignalValue
from service.platform.errors import NotFound

__all__ = [
    "Embedder",
    "Scored",
    "cheap_tier",
    "check_embedding_models",
    "final_part",
    "final_risks",
]

GEMBA_SIGNAL = LLM_SIGNALS["gemba"]
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


def _novelty_signal(novelty: SourceNovelty) -> SignalResult:
    if isinstance(novelty, NoveltyValue):
        return SignalValue(value=float(novelty.index), detail={"band": novelty.band})
    if isinstance(novelty, NoveltySkipped):
        return SignalSkipped(reason=novelty.reason)
    return SignalSkipped(reason="novelty not computed")


def cheap_tier(
    *,
    source_text: str,
    source_lang: str,
    target_lang: str,
    candidates: Sequence[CandidateIn],
    checks: Sequence[str],
    novelty: SourceNovelty,
    peer_embedder: Embedder | None,
    source_embedder: Embedder | None,
    embedder_signature: dict[str, Any],
    length_model: LengthModel | None,
    critical: CriticalLike | None,
    registry: RiskRegistry,
    routing_model: str = ROUTING_MODEL,
    detector: Detector | None = None,
) -> CheapPart:
    """Every cheap signal and hard flag for the candidates of one passage, plus their routing score.

    Peer agreement uses ``peer_embedder`` (a target-language encoder); the source-candidate distance, only when
    asked for, uses ``source_embedder`` (a multilingual encoder) on the source and every candidate. A ``detector``
    (off unless given) adds the word-level error detector's signals and findings.
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
    detected = None if detector is None else detector.assess(source_text, texts)
    outcomes: dict[str, CandidateOutcome] = {}
    routing: dict[str, float] = {}
    router = _maybe(registry, routing_model)
    for i, c in enumerate(candidates):
        signals: dict[str, SignalResult] = dict(computed[i].signals)
        flags: list[Flag] = list(computed[i].flags) if "hard_flags" in checks else []
        if reports is not None:
            signals.update(reports[i].signals)
            flags.extend(reports[i].flags)
        if detected is not None and detector is not None:
            signals.update(detector.signals(detected[i]))
            flags.extend(detected[i].flags)
        if "peer_distance" in checks and peer_embedder is None:
            signals["peer_centroid_distance"] = SignalSkipped(reason="no peer embedding backend available")
        if "source_distance" in checks and source_embedder is None:
            signals["source_distance"] = SignalSkipped(reason="no multilingual embedding backend available")
        outcomes[c.id] = CandidateOutcome(signals=signals, flags=flags)
        if router is not None:
            routing[c.id] = score(router, signals, flags, registry=registry).score
    signature = CheapSignature(
        embedding=dict(embedder_signature),
        critical=None if critical is None else dict(critical.signature),
        length_model=None
        if length_model is None
        else f"{length_model.source_lang}-{length_model.target_lang}@{length_model.version}",
        routing_model=None if router is None else router.rule,
    )
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


@dataclass(frozen=True)
class Scored:
    """One candidate scored for its final result: the model that scored it (after any fallback), the result and
    every flag of both tiers."""

    model: RiskModel
    result: RiskResult
    flags: list[Flag]


def final_risks(
    candidates: Sequence[CandidateIn],
    cheap: CheapPart,
    llm: LLMPart | None,
    registry: RiskRegistry,
    model_name: str,
) -> dict[str, Scored]:
    """Every candidate scored, by candidate id.

    With GEMBA available for a candidate the final risk is the panel's mean risk (the research found adding novelty
    on top made the ranking worse); otherwise the default model's model for this number of candidates (its
    ``bands``), falling back to the single-candidate model when peer signals are missing. The routing score is kept
    as its own field either way.
    """
    # the model fitted for this many candidates (one candidate has no peers, two have one)
    default = _maybe(registry, model_name)
    if default is not None:
        default = registry.for_candidates(model_name, len(candidates))
    gemba_model = _maybe(registry, "gemba-mean-risk")
    out: dict[str, Scored] = {}
    for c in candidates:
        merged = merged_outcome(c.id, cheap, llm)
        model = default
        if gemba_model is not None and isinstance(merged.signals.get(GEMBA_SIGNAL), SignalValue):
            model = gemba_model
        if model is None:
            raise LookupError(f"risk model {model_name!r} is not in models/risk")
        result = score(model, merged.signals, merged.flags, registry=registry)
        # the LLM tier refined this risk only if a judge's signal is one of the terms that scored it
        if any(name in result.components for name in LLM_SIGNALS.values()):
            result = msgspec.structs.replace(result, basis="cheap+llm")
        used = _maybe(registry, result.rule.split("@", 1)[0]) or model
        out[c.id] = Scored(used, result, merged.flags)
    return out


def final_part(
    candidates: Sequence[CandidateIn],
    cheap: CheapPart,
    scored: dict[str, Scored],
    seen: dict[str, SeenScores],
) -> FinalPart:
    """Risk, routing, flags and budget rank per candidate; ``scored`` from ``final_risks``, ``seen`` the tenant's
    pool of each model version (``SeenScores.at_or_below`` aligned with ``candidates``)."""
    rows: dict[str, CandidateFinal] = {}
    for i, c in enumerate(candidates):
        sc = scored[c.id]
        ref = sc.model.reference
        s = seen.get(sc.result.rule) or SeenScores(0, [0] * len(candidates))
        rows[c.id] = CandidateFinal(
            risk=sc.result,
            routing=Routing(rule=cheap.signature.routing_model, score=round(cheap.routing[c.id], 6))
            if c.id in cheap.routing
            else None,
            flags=sc.flags,
            budget=budget_of(
                ref.quantiles if ref is not None else [],
                ref.n if ref is not None else 0,
                sc.result.score,
                sc.result.forced_severity is not None,
                s.total,
                s.at_or_below[i],
            ),
        )
    return FinalPart(
        finished_at=time.time(), candidates=rows, risk_models=sorted({sc.result.rule for sc in scored.values()})
    )
