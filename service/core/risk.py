"""Risk models as versioned data (models/risk/*.json): weighted z-scores of signals, hard flags forced to the top."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np

from service.core.errors import InputError, NotFound
from service.core.metrics import budget_count
from service.core.types import Flag, Severity, SignalResult, SignalSkipped, SignalValue

__all__ = [
    "TIERS",
    "HardFlagRule",
    "ReferenceDistribution",
    "RiskModel",
    "RiskRegistry",
    "RiskResult",
    "SignalWeight",
    "Tier",
    "forcing_flag",
    "load_model",
    "percentile",
    "rank_order",
    "score",
    "score_candidates",
    "tier_of_percentile",
    "tiers_within",
]

Tier = Literal["top_1", "top_5", "top_10", "top_20", "rest"]
# (tier, smallest percentile in it); a score at the 95th percentile or above is in the top 5%
TIERS: tuple[tuple[Tier, float], ...] = (("top_1", 0.99), ("top_5", 0.95), ("top_10", 0.90), ("top_20", 0.80))
_SEVERITY_ORDER: dict[str, int] = {"critical": 0, "major": 1, "minor": 2, "info": 3}


class SignalWeight(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One term of a model: weight * clip((value - mean) / sd)."""

    name: str
    weight: float
    # reference statistics the z-score is taken against (the data they come from is in RiskModel.reference_data)
    mean: float
    sd: float
    # |z| is capped here so one extreme signal cannot drown the rest (None = no cap)
    clip: float | None = None
    # an add-on term (e.g. a critical-content check the request turned off): when it is missing the model scores
    # without it (z = 0, listed in RiskResult.missing) rather than handing over to its fallback model
    optional: bool = False


class HardFlagRule(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Which flags force a candidate above every unflagged one."""

    force_to_top: bool = True
    severities: list[Severity] = msgspec.field(default_factory=lambda: ["critical", "major"])
    # only these rule names force (None = any rule at the listed severities)
    rules: list[str] | None = None


class ReferenceDistribution(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The model's scores on reference data as 1,001 quantiles (0.1% steps), for percentiles and budget tiers."""

    data: str
    n: int
    quantiles: list[float]


class RiskModel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A risk rule as data: adding a signal to a model is adding an entry to ``signals``."""

    name: str
    version: str
    description: str
    requires_peers: bool
    signals: list[SignalWeight]
    hard_flags: HardFlagRule = msgspec.field(default_factory=HardFlagRule)
    # the model that scores a candidate when one of these signals is skipped or absent (None = score with the
    # missing terms at their reference mean, listed in RiskResult.missing)
    fallback: str | None = None
    reference_data: str = ""
    reference: ReferenceDistribution | None = None
    # model_id of the embedder the embedding-based signal statistics (mean/sd) were computed with, e.g.
    # "multilingual-e5-small-q4"; vectors from another embedder put those signals on another scale. None = the
    # model uses no embedding-based signal (or predates this field)
    embedding_model: str | None = None
    # provenance and measured figures (CV and in-sample); informative only, never read when scoring
    fit: dict[str, object] = msgspec.field(default_factory=dict)

    @property
    def rule(self) -> str:
        return f"{self.name}@{self.version}"

    def __post_init__(self) -> None:
        if not self.signals:
            raise InputError(f"risk model {self.name!r} has no signals")
        for s in self.signals:
            if not (s.sd > 0.0 and math.isfinite(s.sd) and math.isfinite(s.mean) and math.isfinite(s.weight)):
                raise InputError(f"risk model {self.name!r}: signal {s.name!r} needs finite weight/mean and sd > 0")


class RiskResult(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One candidate's risk: the weighted-z score, which model produced it, and why."""

    score: float
    rule: str  # name@version of the model that actually scored (after any fallback)
    components: dict[str, float]  # signal -> weight * z
    forced_by_flag: str | None = None  # the flag rule that put this candidate above all unflagged ones
    forced_severity: Severity | None = None
    fallback_from: str | None = None  # the requested model, when its fallback scored instead
    fallback_reason: str | None = None
    missing: list[str] = msgspec.field(default_factory=list)  # terms counted at their reference mean
    percentile: float | None = None  # against the scoring model's reference distribution
    tier: Tier | None = None


def load_model(path: str | Path) -> RiskModel:
    """Decode one model file (strict: unknown fields are an error)."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=RiskModel)
    except msgspec.ValidationError as exc:
        raise InputError(f"{path}: not a valid risk model: {exc}") from exc


class RiskRegistry:
    """The risk models of a directory (``<models_dir>/risk/*.json``) plus aliases (``aliases.json``: name -> name)."""

    def __init__(self, models: Mapping[str, RiskModel], aliases: Mapping[str, str] | None = None) -> None:
        self.models = dict(models)
        self.aliases = dict(aliases or {})

    @classmethod
    def load(cls, models_dir: str | Path) -> RiskRegistry:
        risk_dir = Path(models_dir) / "risk"
        models: dict[str, RiskModel] = {}
        aliases: dict[str, str] = {}
        for path in sorted(risk_dir.glob("*.json")):
            if path.name == "aliases.json":
                aliases = msgspec.json.decode(path.read_bytes(), type=dict[str, str])
                continue
            model = load_model(path)
            models[model.name] = model
        return cls(models, aliases)

    def get(self, name: str) -> RiskModel:
        resolved = self.aliases.get(name, name)
        model = self.models.get(resolved)
        if model is None:
            raise NotFound(f"no risk model {name!r}", extra={"available": sorted(self.models)})
        return model


def percentile(model: RiskModel, value: float) -> float | None:
    """Share of the model's reference scores below ``value`` (0-1, interpolated between stored quantiles)."""
    ref = model.reference
    if ref is None or len(ref.quantiles) < 2:
        return None
    q = np.asarray(ref.quantiles, dtype=np.float64)
    probs = np.linspace(0.0, 1.0, q.shape[0])
    if value <= q[0]:
        return 0.0
    if value >= q[-1]:
        return 1.0
    # equal quantiles (ties in the reference) would make interp ambiguous; take the middle of the tied run
    lo = float(np.interp(value, q, probs, left=0.0, right=1.0))
    hi = float(1.0 - np.interp(-value, -q[::-1], probs, left=0.0, right=1.0))
    return (lo + hi) / 2.0


def tier_of_percentile(p: float | None) -> Tier | None:
    """top_1 for the riskiest 1% (percentile >= 0.99), then top_5, top_10, top_20, else rest."""
    if p is None:
        return None
    for tier, lower in TIERS:
        if p >= lower:
            return tier
    return "rest"


def forcing_flag(model: RiskModel, flags: Sequence[Flag]) -> Flag | None:
    """The most severe flag that the model's hard-flag rule forces to the top, if any."""
    rule = model.hard_flags
    if not rule.force_to_top:
        return None
    hits = [f for f in flags if f.severity in rule.severities and (rule.rules is None or f.rule in rule.rules)]
    if not hits:
        return None
    return min(hits, key=lambda f: _SEVERITY_ORDER.get(f.severity, 9))


def _signals_of(candidate: object) -> tuple[Mapping[str, SignalResult], Sequence[Flag]]:
    signals = getattr(candidate, "signals", None)
    if signals is not None:
        return signals, getattr(candidate, "flags", ())
    if isinstance(candidate, Mapping):
        return candidate, ()
    raise InputError("score() takes a CandidateSignals or a mapping of signal name -> SignalValue | SignalSkipped")


def _missing(model: RiskModel, signals: Mapping[str, SignalResult]) -> dict[str, str]:
    out: dict[str, str] = {}
    for term in model.signals:
        s = signals.get(term.name)
        if s is None:
            out[term.name] = "not computed"
        elif isinstance(s, SignalSkipped):
            out[term.name] = s.reason
        elif not math.isfinite(s.value):
            out[term.name] = "not a finite number"
    return out


def score(
    model: RiskModel,
    candidate: object,
    flags: Sequence[Flag] | None = None,
    *,
    registry: RiskRegistry | None = None,
) -> RiskResult:
    """Score one candidate (a ``CandidateSignals`` or a mapping of signals, plus flags) with ``model``.

    When a required term (not ``optional``) is missing and the model's ``fallback`` chain (resolved in
    ``registry``) holds a model with every signal it needs, that model scores instead and the result says so
    (``rule`` = the fallback, ``fallback_from`` = the requested model, ``fallback_reason``). Otherwise the requested
    model scores with the missing terms at their reference mean (z = 0), listed in ``missing``.
    """
    signals, own_flags = _signals_of(candidate)
    all_flags = list(own_flags if flags is None else flags)
    missing = _missing(model, signals)
    optional = {t.name for t in model.signals if t.optional}
    if set(missing) - optional and model.fallback and registry is not None:
        # walk the fallback chain to the first model that has every signal it needs; when none has, the requested
        # model scores with its missing terms at z = 0 (a fallback that also misses terms would lose more)
        seen = {model.name}
        current = model
        while current.fallback and current.fallback not in seen:
            current = registry.get(current.fallback)
            seen.add(current.name)
            if not _missing(current, signals):
                inner = score(current, signals, all_flags, registry=None)
                reason = "; ".join(f"{k}: {v}" for k, v in sorted(missing.items()))
                return msgspec.structs.replace(inner, fallback_from=model.rule, fallback_reason=reason)

    components: dict[str, float] = {}
    total = 0.0
    for term in model.signals:
        s = signals.get(term.name)
        if term.name in missing or not isinstance(s, SignalValue):
            continue
        z = (s.value - term.mean) / term.sd
        if term.clip is not None:
            z = max(-term.clip, min(term.clip, z))
        components[term.name] = term.weight * z
        total += components[term.name]
    forced = forcing_flag(model, all_flags)
    pct = 1.0 if forced is not None else percentile(model, total)
    return RiskResult(
        score=total,
        rule=model.rule,
        components=components,
        forced_by_flag=None if forced is None else forced.rule,
        forced_severity=None if forced is None else forced.severity,
        missing=sorted(missing),
        percentile=pct,
        tier=tier_of_percentile(pct),
    )


def score_candidates(
    model: RiskModel, candidates: Sequence[object], *, registry: RiskRegistry | None = None
) -> list[RiskResult]:
    """Score every candidate of a passage (``CandidateSignals`` from ``service.core.signals.compute_signals``)."""
    return [score(model, c, registry=registry) for c in candidates]


def rank_order(results: Sequence[RiskResult]) -> list[int]:
    """Indices from riskiest to safest: forced candidates first (critical before major), then by score; equal keys
    keep input order (stable), so a ranking is reproducible."""

    def key(i: int) -> tuple[int, int, float]:
        r = results[i]
        if r.forced_by_flag is not None:
            return (0, _SEVERITY_ORDER.get(r.forced_severity or "info", 9), -r.score)
        return (1, 0, -r.score)

    return sorted(range(len(results)), key=key)


def tiers_within(results: Sequence[RiskResult]) -> list[Tier]:
    """Budget tiers relative to this batch itself (its top 1%, 5%, 10%, 20% by ``rank_order``; ceil counts), for
    batches scored without a reference distribution or ranked only against each other."""
    n = len(results)
    order = rank_order(results)
    out: list[Tier] = ["rest"] * n
    for tier, lower in reversed(TIERS):
        k = budget_count(n, round(1.0 - lower, 6))
        for i in order[:k]:
            out[i] = tier
    return out
