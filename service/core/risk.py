"""Risk models as versioned data (models/risk/*.json): weighted z-scores of signals, hard flags forced to the top."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import msgspec

from service.core.ranking import HardFlagRule, forcing_flag, priority, rank_key
from service.core.types import Flag, Severity, SignalResult, SignalSkipped, SignalValue
from service.platform.errors import InputError, NotFound

__all__ = [
    "CandidateBand",
    "HardFlagRule",
    "ReferenceDistribution",
    "RiskModel",
    "RiskRegistry",
    "RiskResult",
    "SignalWeight",
    "load_model",
    "score",
    "score_candidates",
]


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


class ReferenceDistribution(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The model's scores on reference data as 1,001 quantiles (0.1% steps), for percentiles and budget tiers."""

    data: str
    n: int
    quantiles: list[float]


class CandidateBand(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Assessments of ``low`` to ``high`` candidates (``high`` None: no upper bound) are scored by ``model``, a model
    fitted on assessments of that size (the signals a candidate has depend on how many peers it has)."""

    low: int
    high: int | None
    model: str

    def holds(self, n: int) -> bool:
        return self.low <= n and (self.high is None or n <= self.high)


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
    # the model per candidate-count band (RiskRegistry.for_candidates); a count no band holds is scored by this one
    bands: list[CandidateBand] = msgspec.field(default_factory=list)

    @property
    def rule(self) -> str:
        return f"{self.name}@{self.version}"

    def __post_init__(self) -> None:
        if not self.signals:
            raise InputError(f"risk model {self.name!r} has no signals")
        for s in self.signals:
            if not (s.sd > 0.0 and math.isfinite(s.sd) and math.isfinite(s.mean) and math.isfinite(s.weight)):
                raise InputError(f"risk model {self.name!r}: signal {s.name!r} needs finite weight/mean and sd > 0")


class RiskResult(msgspec.Struct, frozen=True):
    """One candidate's risk: the weighted-z score, its place in the one ranking, which model produced it, and why.

    Sort by ``priority`` (descending): it puts forced candidates first, by severity, then everything by ``score``
    (``service.core.ranking``); ``score`` alone ignores forcing flags."""

    score: float
    priority: float
    rule: str  # name@version of the model that actually scored (after any fallback)
    components: dict[str, float]  # signal -> weight * z
    forced_by_flag: str | None = None  # the flag rule that put this candidate above all unflagged ones
    forced_severity: Severity | None = None
    fallback_from: str | None = None  # the requested model, when its fallback scored instead
    fallback_reason: str | None = None
    missing: list[str] = msgspec.field(default_factory=list)  # terms counted at their reference mean
    # which tiers this risk reflects: the cheap tier alone, or with an LLM judge's signal of this candidate
    basis: Literal["cheap", "cheap+llm"] = "cheap"

    @property
    def rank_key(self) -> tuple[int, float]:
        return rank_key(self.score, self.forced_severity)


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

    def for_candidates(self, name: str, n: int) -> RiskModel:
        """The model that scores an assessment of ``n`` candidates when ``name`` is asked for: the model of the
        band of ``name`` that holds ``n``, else ``name`` itself (the result's ``rule`` names the one that scored)."""
        model = self.get(name)
        band = next((b for b in model.bands if b.holds(n)), None)
        return model if band is None else self.get(band.model)


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
    forced = forcing_flag(model.hard_flags, all_flags)
    severity = None if forced is None else forced.severity
    return RiskResult(
        score=total,
        priority=priority(total, severity),
        rule=model.rule,
        components=components,
        forced_by_flag=None if forced is None else forced.rule,
        forced_severity=severity,
        missing=sorted(missing),
    )


def score_candidates(
    model: RiskModel, candidates: Sequence[object], *, registry: RiskRegistry | None = None
) -> list[RiskResult]:
    """Score every candidate of a passage (``CandidateSignals`` from ``service.core.signals.compute_signals``)."""
    return [score(model, c, registry=registry) for c in candidates]
