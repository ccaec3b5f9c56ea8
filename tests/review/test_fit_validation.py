"""A fit never silently makes the ranking worse: the comparison with the active model against a hand-computed table,
held-apart suttas, and a fit that starts from the active model's terms and forcing choices."""

from __future__ import annotations

import random

import pytest

from service.core.risk import HardFlagRule, RiskModel, SignalWeight
from service.core.types import Flag
from service.review.calibration import LabelledItem
from service.review.calibration.compare import activation_comparison, compare_models, hold_apart, sutta_of
from service.review.calibration.fit import validated_fit
from tests.review.support import labelled


def model(signal: str, *, rules: list[str] | None = None, weight: float = 1.0) -> RiskModel:
    return RiskModel(
        name=f"m-{signal}",
        version="1.0.0",
        description="test",
        requires_peers=False,
        signals=[SignalWeight(signal, weight, 0.0, 1.0)],
        hard_flags=HardFlagRule(rules=rules),
    )


def items10() -> list[LabelledItem]:
    # items 0 and 1 MAJOR (number errors); s ranks them first, t last
    out = []
    for i in range(10):
        it = labelled("MAJOR" if i < 2 else "VALID", {"s": float(10 - i), "t": float(i)}, passage=f"sn{i}:1", n=i)
        it.error_category = "accuracy/number" if i < 2 else None
        out.append(it)
    return out


def test_comparison_against_hand_table() -> None:
    cmp = compare_models(items10(), model("t"), model("s"), min_positives=2)
    overall = cmp["rows"][0]
    assert overall["category"] == "all" and overall["positives"] == 2
    # 10 items: 1 reviewed at 1/5/10%, 2 at 20%; the active (s) finds 1 then 2 MAJORs, the candidate (t) none
    assert [r["recall"] for r in overall["active"]] == [0.5, 0.5, 0.5, 1.0]
    assert [r["recall"] for r in overall["candidate"]] == [0.0, 0.0, 0.0, 0.0]
    assert overall["active"][0]["ci"] == pytest.approx([0.094531, 0.905469], abs=1e-5)  # Wilson 1/2
    assert cmp["loses"] and {(x["category"], x["budget"]) for x in cmp["losses"]} == {
        (c, b) for c in ("all", "accuracy/number") for b in (0.01, 0.05, 0.1, 0.2)
    }
    same = compare_models(items10(), model("s"), model("s"), min_positives=2)
    assert not same["loses"] and same["losses"] == []


def test_small_categories_are_shown_but_cannot_make_a_model_lose() -> None:
    cmp = compare_models(items10(), model("t"), model("s"), min_positives=3)
    number = next(r for r in cmp["rows"] if r["category"] == "accuracy/number")
    assert number["counts"] is False and {x["category"] for x in cmp["losses"]} == {"all"}


def test_forcing_choices_of_each_model_rank_its_items() -> None:
    items = items10()
    # a number flag on the two lowest VALID items of s: a model forcing it loses its MAJORs at 10%
    for it in items[-2:]:
        it.flags = [Flag(rule="critical.number", severity="major", detail="x")]
    forcing, plain = model("s", rules=["critical.number"]), model("s", rules=[])
    cmp = compare_models(items, forcing, plain, min_positives=2)
    assert [r["recall"] for r in cmp["rows"][0]["candidate"]] == [0.0, 0.0, 0.0, 0.0]
    assert cmp["loses"]


def test_hold_apart_keeps_suttas_whole_and_both_sides_filled() -> None:
    items = [labelled("VALID", {"s": 0.0}, passage=f"mn{k}:{j}", n=10 * k + j) for k in range(20) for j in range(3)]
    held = hold_apart(items)
    assert held == hold_apart(list(reversed(items)))  # the same whatever the order
    assert 0 < len(held) < 20 and held <= {f"mn{k}" for k in range(20)}
    assert sutta_of("mn82:24") == "mn82"
    two = hold_apart(items[:6])  # two suttas: one each side
    assert len(two) == 1


def _dataset(n_suttas: int, seed: int = 3) -> list[LabelledItem]:
    rng = random.Random(seed)
    items = []
    for p in range(n_suttas):
        for k in range(4):
            lab = rng.choice(["MAJOR", "VALID", "VALID", "MINOR"])
            good = {"MAJOR": 2.0, "MINOR": 0.4, "VALID": 0.0}[lab] + rng.gauss(0, 0.5)
            it = labelled(lab, {"good": good, "noise": rng.gauss(0, 1)}, passage=f"an{p}:{k}", n=len(items))
            it.error_category = "accuracy/omission" if lab == "MAJOR" else None
            items.append(it)
    return items


def test_validated_fit_starts_from_the_active_model_and_is_compared_on_held_apart_suttas() -> None:
    items = _dataset(40)
    active = model("good", rules=["critical.number", "critical.list_size"])
    fitted, fit = validated_fit(
        items, active=active, registry=None, demote=["critical.list_size"], tenant="t", source="human", name="x"
    )
    assert fitted.hard_flags.rules == ["critical.number"]  # the active model's forcing, less the demoted check
    assert fit["started_from"] == {"model": "m-good@1.0.0", "terms": ["good"]}
    assert fitted.signals[0].name == "good"
    val = fit["validation"]
    held = set(val["held_apart_suttas"])
    assert held and val["n_items"] == sum(sutta_of(it.passage) in held for it in items) < len(items)
    assert fit["n_items"] == len(items) - val["n_items"]  # fitted on the rest only
    assert val["candidate"] == fitted.rule and val["active"] == active.rule and "loses" in val
    # activation compares on the same held-apart suttas
    again = activation_comparison(items, fitted, active, None)
    assert again["n_items"] == val["n_items"] and again["rows"] == val["rows"]
    # a model with no fit validation (shipped, a demotion) is compared on every labelled item
    assert activation_comparison(items, model("noise"), active, None)["n_items"] == len(items)


def test_a_demoted_check_stops_forcing_and_its_signal_becomes_an_optional_term() -> None:
    from service.core.typology import RULE_CATEGORY
    from service.platform.errors import InputError
    from service.review.calibration.demotion import demoted_model

    items = [labelled("VALID", {"s": 0.0, "list_size_mismatch": float(i % 4)}, n=i) for i in range(12)]
    active = model("s", weight=2.0)  # forces every check at major and critical (rules None)
    out = demoted_model(active, "critical.list_size", items, name="calibrated-t-v2", proposal=None)
    assert out.hard_flags.rules == [r for r in RULE_CATEGORY if r != "critical.list_size"]
    assert not out.hard_flags.forces("critical.list_size", "major") and out.hard_flags.forces(
        "critical.number", "major"
    )
    term = out.signals[-1]
    # robust z on the items' values 0,1,2,3,...: median 1.5, MAD 1 -> scale 1.4826; the model's smallest weight
    assert (term.name, term.weight, term.optional, term.mean) == ("list_size_mismatch", 2.0, True, 1.5)
    assert term.sd == pytest.approx(1.4826)
    assert out.fit["kind"] == "demotion" and out.fit["from"] == "m-s@1.0.0"
    bare = demoted_model(active, "critical.list_size", items[:1], name="x", proposal=None)
    assert [t.name for t in bare.signals] == ["s"] and "only stops forcing" in bare.fit["note"]
    with pytest.raises(InputError):
        demoted_model(model("s", rules=["critical.number"]), "critical.list_size", items, name="x", proposal=None)
