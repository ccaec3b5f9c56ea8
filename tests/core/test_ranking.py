"""The one ranking: forcing flags by severity, then the score; ``priority`` sorts exactly like that on its own."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from service.core.ranking import forcing_flag, level_of, priorities, priority, rank_key, rank_order, squash
from service.core.risk import HardFlagRule
from service.core.types import Flag, Severity

SEVERITIES: list[Severity | None] = [None, "info", "minor", "major", "critical"]


@pytest.mark.parametrize(
    ("score", "severity", "expected"),
    [
        (0.0, None, 0.5),
        (1.0, None, 0.75),
        (-1.0, None, 0.25),
        (0.0, "major", 3.5),
        (0.0, "critical", 4.5),
        (-1.0, "critical", 4.25),
        (1e6, None, 1.0 - 1 / (np.pi * 1e6)),  # still below the next level
        (-1e6, "major", 3.0 + 1 / (np.pi * 1e6)),
    ],
)
def test_priority_table(score: float, severity: Severity | None, expected: float) -> None:
    assert priority(score, severity) == pytest.approx(expected, abs=1e-9)
    assert int(priority(score, severity)) == level_of(severity)


def test_priority_sorts_exactly_like_the_rank_key() -> None:
    rng = random.Random(7)
    rows = [
        (rng.choice(SEVERITIES), rng.uniform(-50, 50) if rng.random() < 0.9 else rng.choice([0.0, 1.0]))
        for _ in range(3000)
    ]
    by_key = rank_order([rank_key(s, sev) for sev, s in rows])
    by_priority = sorted(range(len(rows)), key=lambda i: -priority(rows[i][1], rows[i][0]))
    assert by_key == by_priority
    arr = priorities(np.array([s for _, s in rows]), [sev for sev, _ in rows])
    assert np.allclose(arr, [priority(s, sev) for sev, s in rows], atol=0, rtol=0)


def test_forced_above_any_score_and_by_severity() -> None:
    keys = [rank_key(100.0, None), rank_key(-100.0, "major"), rank_key(-100.0, "critical"), rank_key(5.0, "major")]
    assert rank_order(keys) == [2, 3, 1, 0]


def test_equal_keys_keep_input_order() -> None:
    assert rank_order([rank_key(1.0, None)] * 3 + [rank_key(2.0, None)]) == [3, 0, 1, 2]


def test_squash_is_strictly_increasing_and_refuses_non_finite() -> None:
    xs = np.linspace(-1e5, 1e5, 20001)
    ys = [squash(float(x)) for x in xs]
    assert all(b > a for a, b in itertools.pairwise(ys))
    with pytest.raises(ValueError, match="finite"):
        squash(float("nan"))


@pytest.mark.parametrize(
    ("rule", "flags", "expected"),
    [
        (HardFlagRule(), [("a", "major"), ("b", "critical")], "b"),  # the most severe wins
        (HardFlagRule(), [("a", "minor")], None),  # minor does not force by default
        (HardFlagRule(rules=["a"]), [("b", "critical"), ("a", "major")], "a"),
        (HardFlagRule(force_to_top=False), [("a", "critical")], None),
        (HardFlagRule(severities=["minor"]), [("a", "minor"), ("b", "minor")], "a"),  # ties: the first
    ],
)
def test_forcing_flag(rule: HardFlagRule, flags: list[tuple[str, Severity]], expected: str | None) -> None:
    hit = forcing_flag(rule, [Flag(rule=r, severity=s, detail="") for r, s in flags])
    assert (hit.rule if hit else None) == expected
