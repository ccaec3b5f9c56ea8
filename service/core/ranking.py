"""The one order of candidates: forcing flags by severity first, then the risk score; ``priority`` sorts on its own.

Every place that asks "which candidate first?" uses this module: the API's ``risk.priority``, the budget tier, the
review queue, calibration reports, the fitting code and the benchmarks. A candidate whose flags the risk model's
``hard_flags`` rule forces to the top gets a forcing level (critical above major above minor above info); all
other candidates have level 0. Within one level the risk score decides.

``priority = level + squash(score)``, where ``squash`` maps every real score strictly monotonically into (0, 1),
so the integer part of a priority is its level and sorting by priority (descending) is exactly this order:

| priority   | meaning                                   |
|------------|-------------------------------------------|
| 4.xx       | forced by a critical flag (copy, empty...) |
| 3.xx       | forced by a major flag (number, name...)  |
| 2.xx, 1.xx | forced by a minor / info flag (if a model forces those) |
| 0.xx       | not forced: 0.5 at score 0, higher = riskier |
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from service.core.types import Flag, Severity

__all__ = [
    "FORCING_LEVEL",
    "HardFlagRule",
    "forcing_flag",
    "level_of",
    "priorities",
    "priority",
    "rank_key",
    "rank_order",
    "squash",
]

# a more severe forcing flag ranks higher; 0 is reserved for candidates no flag forces
FORCING_LEVEL: dict[Severity, int] = {"info": 1, "minor": 2, "major": 3, "critical": 4}


class HardFlagRule(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Which flags force a candidate above every unflagged one."""

    force_to_top: bool = True
    severities: list[Severity] = msgspec.field(default_factory=lambda: ["critical", "major"])
    # only these rule names force (None = any rule at the listed severities)
    rules: list[str] | None = None

    def forces(self, rule: str, severity: str) -> bool:
        """Whether a flag of ``rule`` at ``severity`` is forced to the top."""
        return self.force_to_top and severity in self.severities and (self.rules is None or rule in self.rules)


def level_of(forced_severity: Severity | None) -> int:
    """The forcing level of a candidate (0 when no flag forces it)."""
    return 0 if forced_severity is None else FORCING_LEVEL[forced_severity]


def forcing_flag(rule: HardFlagRule, flags: Sequence[Flag]) -> Flag | None:
    """The most severe of ``flags`` that ``rule`` forces to the top (None when the rule forces none of them)."""
    hits = [f for f in flags if rule.forces(f.rule, f.severity)]
    return max(hits, key=lambda f: FORCING_LEVEL[f.severity], default=None)


def squash(score: float) -> float:
    """A strictly increasing map of the reals into (0, 1) that keeps distinct scores distinct in float64 for
    |score| < 1e7 (arctan saturates far more slowly than the logistic), so ``level + squash`` never reaches the
    next level."""
    if not math.isfinite(score):
        raise ValueError(f"a risk score must be finite, got {score}")
    return 0.5 + math.atan(score) / math.pi


def priority(score: float, forced_severity: Severity | None) -> float:
    """The single number to sort candidates by (higher = review first); see the module docstring."""
    return level_of(forced_severity) + squash(score)


def rank_key(score: float, forced_severity: Severity | None) -> tuple[int, float]:
    """The order as a tuple (level, score): equal to sorting by ``priority`` and free of rounding."""
    return (level_of(forced_severity), score)


def priorities(scores: np.ndarray, forced_severities: Sequence[Severity | None]) -> np.ndarray:
    """``priority`` of many candidates at once (fitting and benchmarks rank arrays of held-out scores); computed by
    ``priority`` itself, so an array ranks bit for bit like the API's field."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    if s.shape[0] != len(forced_severities):
        raise ValueError(f"{s.shape[0]} scores but {len(forced_severities)} forcing severities")
    return np.fromiter(
        (priority(float(v), sev) for v, sev in zip(s, forced_severities, strict=True)), np.float64, s.shape[0]
    )


def rank_order(keys: Sequence[tuple[int, float]]) -> list[int]:
    """Indices from review-first to review-last by ``rank_key``; equal keys keep input order (stable)."""
    return sorted(range(len(keys)), key=lambda i: (-keys[i][0], -keys[i][1]))
