"""The calibration report: how well each score (the risk model re-applied to stored signals, the risk stored at
assessment time, every signal alone) finds the labelled errors.

Targets: major vs non-major (MAJOR vs VALID+MINOR), major vs valid (MINOR left out), error vs valid (MINOR+MAJOR vs
VALID). The two risk scores rank in the one ranking (``risk.priority``: forced candidates first, by severity). A
figure that needs both classes is refused (``value`` null with a ``refused`` reason) when one class is absent; each
figure states the item counts it rests on.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from service.core.budget import DEFAULT_BUDGET
from service.core.metrics import DEFAULT_BUDGETS, auc, auc_interval, budget_stats, cohen_kappa, spearman, top_k_mask
from service.core.risk import RiskModel, RiskRegistry, score
from service.core.types import SignalValue
from service.review.calibration.labels import LabelledItem
from service.state.durable import LABELS, Label

__all__ = ["calibration_report", "num", "score_columns"]


def num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def _targets(labels: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """target -> (row mask of the items that take part, positive labels among them)."""
    lab = np.asarray(labels)
    return {
        "major_vs_nonmajor": (np.ones(lab.shape[0], dtype=bool), lab == "MAJOR"),
        "major_vs_valid": (lab != "MINOR", lab == "MAJOR"),
        "error_vs_valid": (np.ones(lab.shape[0], dtype=bool), lab != "VALID"),
    }


def _auc_figure(scores: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    out: dict[str, Any] = {"n": int(y.shape[0]), "n_pos": n_pos, "n_neg": n_neg}
    if n_pos == 0 or n_neg == 0:
        out["value"] = None
        out["refused"] = f"AUC needs both classes; these {y.shape[0]} items have {n_pos} positive and {n_neg} negative"
    else:
        out["value"] = num(auc(scores, y))
        low, high = auc_interval(scores, y)
        # DeLong, 95%; nulls with fewer than two items of a class or at complete separation (AUC 0 or 1)
        out["ci"] = [num(low), num(high)]
    return out


def _budget_figures(scores: np.ndarray, y: np.ndarray, budgets: Sequence[float]) -> list[dict[str, Any]]:
    out = []
    for st in budget_stats(scores, y, budgets):
        row: dict[str, Any] = {
            "budget": st.budget,
            "reviewed": st.reviewed,
            "hits": st.hits,
            "positives": st.positives,
            "n": int(y.shape[0]),
            "recall": num(st.recall),
            "recall_ci": [num(st.recall_ci[0]), num(st.recall_ci[1])],
            "precision": num(st.precision),
            "precision_ci": [num(st.precision_ci[0]), num(st.precision_ci[1])],
        }
        if st.positives == 0:
            row["refused"] = f"recall needs at least one positive; none among these {y.shape[0]} items"
        out.append(row)
    return out


def score_columns(
    items: Sequence[LabelledItem], model: RiskModel | None, registry: RiskRegistry | None
) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (kind, values with NaN where the score is not available)."""
    cols: dict[str, tuple[str, np.ndarray]] = {}
    if model is not None:
        vals = [score(model, it.signals, it.flags, registry=registry).priority for it in items]
        cols[f"model:{model.rule}"] = ("model", np.asarray(vals, dtype=np.float64))
    cols["stored_risk"] = ("stored", np.asarray([it.stored_priority for it in items], dtype=np.float64))
    names = sorted({n for it in items for n, s in it.signals.items() if isinstance(s, SignalValue)})
    for n in names:
        cols[f"signal:{n}"] = ("signal", np.asarray([it.value(n) for it in items], dtype=np.float64))
    return cols


def calibration_report(
    items: Sequence[LabelledItem],
    *,
    tenant: str,
    source: str,
    n_labels: int,
    model: RiskModel | None,
    registry: RiskRegistry | None = None,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    overlap_budget: float = DEFAULT_BUDGET,
    judge_error_max_score: float = 70.0,
    other_labels: dict[str, Label] | None = None,
) -> dict[str, Any]:
    """The report as a JSON-ready dict (see the module docstring)."""
    labels = [it.label for it in items]
    counts = {lab: labels.count(lab) for lab in LABELS}
    notes = [f"{len(items)} labelled items from {n_labels} {source} labels"]
    if len(items) < 100:
        notes.append(f"small sample ({len(items)} items): intervals are wide; read the counts beside each figure")
    cols = score_columns(items, model, registry)
    scores_out = [_score_entry(name, kind, vals, labels, budgets) for name, (kind, vals) in cols.items()]
    # per model that scored at assessment time (risk.rule): a candidate-count band has a model of its own, and one
    # band's ranking can hold while another's does not
    rules = np.asarray([str((it.snapshot.get("risk") or {}).get("rule") or "") for it in items])
    stored = cols["stored_risk"][1]
    by_model = [
        _score_entry(f"stored_risk:{r}", "stored", stored[rules == r], list(np.asarray(labels)[rules == r]), budgets)
        for r in sorted(set(rules) - {""})
    ]
    return {
        "tenant": tenant,
        "source": source,
        "generated_at": time.time(),
        "model": None if model is None else {"name": model.name, "rule": model.rule},
        "labels": {
            "items": len(items),
            "labels": n_labels,
            **counts,
            "items_with_several_labels": sum(1 for it in items if it.n_labels > 1),
        },
        "notes": notes,
        "budgets": list(budgets),
        "scores": scores_out,
        "by_model": by_model,
        "overlap": _overlap(cols, labels, overlap_budget),
        "judges": _judges(items, judge_error_max_score),
        "other_source_agreement": _other_agreement(items, other_labels),
    }


def _score_entry(
    name: str, kind: str, vals: np.ndarray, labels: Sequence[str], budgets: Sequence[float]
) -> dict[str, Any]:
    """One score's AUC per target and budget figures on the items that have it."""
    have = np.isfinite(vals)
    entry: dict[str, Any] = {"name": name, "kind": kind, "n": int(have.sum()), "auc": {}, "budgets": {}}
    if not have.any():
        entry["refused"] = "no item has this score"
        return entry
    for tname, (rows, y) in _targets(labels).items():
        m = rows & have
        entry["auc"][tname] = _auc_figure(vals[m], y[m])
    lab = np.asarray(labels)
    entry["budgets"]["major"] = _budget_figures(vals[have], lab[have] == "MAJOR", budgets)
    entry["budgets"]["error"] = _budget_figures(vals[have], lab[have] != "VALID", budgets)
    return entry


def _overlap(cols: dict[str, tuple[str, np.ndarray]], labels: Sequence[str], budget: float) -> dict[str, Any]:
    """Per pair of scores: MAJOR items caught at the budget by both, by one only, by neither (on common items)."""
    lab = np.asarray(labels)
    pairs = []
    for (a, (_, va)), (b, (_, vb)) in itertools.combinations(cols.items(), 2):
        m = np.isfinite(va) & np.isfinite(vb)
        if not m.any():
            continue
        y = lab[m] == "MAJOR"
        ta, tb = top_k_mask(va[m], budget), top_k_mask(vb[m], budget)
        row: dict[str, Any] = {
            "a": a,
            "b": b,
            "n": int(m.sum()),
            "positives": int(y.sum()),
            "both": int((ta & tb & y).sum()),
            "only_a": int((ta & ~tb & y).sum()),
            "only_b": int((~ta & tb & y).sum()),
            "neither": int((~ta & ~tb & y).sum()),
        }
        if not y.any():
            row["refused"] = "no MAJOR item among the common items"
        pairs.append(row)
    return {"budget": budget, "target": "MAJOR", "pairs": pairs}


def _judges(items: Sequence[LabelledItem], threshold: float) -> dict[str, Any]:
    """Per judge: Cohen's kappa with reviewers on error (judge score <= threshold) vs valid; judge pairs: Spearman."""
    scores: dict[str, dict[int, float]] = {}
    for i, it in enumerate(items):
        for jid, sc in (it.snapshot.get("judge_scores") or {}).items():
            if isinstance(sc, int | float) and math.isfinite(sc):
                scores.setdefault(str(jid), {})[i] = float(sc)
    agreement = []
    for jid, by in sorted(scores.items()):
        idx = sorted(by)
        judge = ["error" if by[i] <= threshold else "valid" for i in idx]
        human = ["error" if items[i].label != "VALID" else "valid" for i in idx]
        row: dict[str, Any] = {
            "judge": jid,
            "n": len(idx),
            "judge_errors": judge.count("error"),
            "label_errors": human.count("error"),
        }
        if len(set(human)) < 2:
            row["kappa"] = None
            row["refused"] = f"kappa needs both error and valid labels; these {len(idx)} items have only {human[0]}"
        else:
            row["kappa"] = num(cohen_kappa(judge, human))
            row["exact_agreement"] = num(sum(a == b for a, b in zip(judge, human, strict=True)) / len(idx))
        agreement.append(row)
    between = []
    for (ja, ba), (jb, bb) in itertools.combinations(sorted(scores.items()), 2):
        common = sorted(set(ba) & set(bb))
        row = {"a": ja, "b": jb, "n": len(common)}
        rho = spearman([ba[i] for i in common], [bb[i] for i in common]) if len(common) >= 3 else math.nan
        row["spearman"] = num(rho)
        if row["spearman"] is None:
            row["refused"] = "Spearman needs at least 3 common items with varying scores"
        between.append(row)
    return {
        "error_rule": f"judge score <= {threshold:g} is an error (GEMBA's minor red-flag line); a label other "
        "than VALID is an error",
        "agreement_with_labels": agreement,
        "between_judges": between,
    }


def _other_agreement(items: Sequence[LabelledItem], other: dict[str, Label] | None) -> dict[str, Any] | None:
    if not other:
        return None
    common = [(it.label, other[it.item_id]) for it in items if it.item_id in other]
    if not common:
        return {"n": 0, "kappa": None, "refused": "no item carries both kinds of label"}
    a, b = [c[0] for c in common], [c[1] for c in common]
    return {
        "n": len(common),
        "exact_agreement": num(sum(x == y for x, y in common) / len(common)),
        "kappa": num(cohen_kappa(a, b)),
    }
