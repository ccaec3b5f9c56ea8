"""The calibration loop: labelled items from verdicts (or panel labels), the detection report, its SVG, and fits.

Labels: an item's human label is the most common label among its verdicts (ties go to the more severe label); a
panel label is the label of the item's latest conclusive adjudication. Human and panel labels are never mixed.
Targets: major vs non-major (MAJOR vs VALID+MINOR), major vs valid (MINOR left out), error vs valid (MINOR+MAJOR vs
VALID). Scores: the named (or tenant's active) risk model re-applied to each item's stored signals, the risk stored
when the item was assessed, and every signal on its own. A forced candidate (hard flag) ranks above all others in
the two risk scores, as in ``risk.rank_order``. A figure that needs both classes is refused (``value`` null with a
``refused`` reason) when one class is absent; each figure states the item counts it rests on.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from sklearn.model_selection import GroupKFold

from service.core.errors import InputError
from service.core.metrics import DEFAULT_BUDGETS, auc, budget_stats, cohen_kappa, spearman, top_k_mask
from service.core.review.db import LABELS, Label, ReviewDB, open_db
from service.core.risk import HardFlagRule, ReferenceDistribution, RiskModel, RiskRegistry, SignalWeight, score
from service.core.signals import PEER_SIGNALS
from service.core.types import Flag, SignalResult, SignalValue

__all__ = [
    "FORCED_BONUS",
    "LabelledItem",
    "active_model_name",
    "calibration_report",
    "fit_risk_model",
    "grouped_folds",
    "human_items",
    "panel_items",
    "report_svg",
    "write_model",
]

FORCED_BONUS = 1e6  # added to a forced candidate's risk so it ranks above every unflagged one
CLIP = 5.0
_SEVERITY = {"VALID": 0, "MINOR": 1, "MAJOR": 2}
_signals_type = dict[str, SignalResult]


@dataclass
class LabelledItem:
    item_id: str
    passage: str
    label: Label
    n_labels: int
    snapshot: dict[str, Any]
    candidate_model: str | None = None
    signals: dict[str, SignalResult] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)

    def __post_init__(self) -> None:
        raw = self.snapshot.get("signals") or {}
        self.signals = {}
        for name, sig in raw.items():
            try:
                self.signals[name] = msgspec.convert(sig, SignalResult)
            except msgspec.ValidationError:
                continue
        self.flags = []
        for f in self.snapshot.get("flags") or []:
            try:
                self.flags.append(msgspec.convert(f, Flag))
            except msgspec.ValidationError:
                continue

    @property
    def forced(self) -> bool:
        return bool((self.snapshot.get("budget") or {}).get("forced"))

    def value(self, name: str) -> float:
        s = self.signals.get(name)
        return float(s.value) if isinstance(s, SignalValue) and math.isfinite(s.value) else math.nan

    @property
    def stored_risk(self) -> float:
        risk = self.snapshot.get("risk") or {}
        v = risk.get("score") if isinstance(risk, dict) else None
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else math.nan


def _majority(labels: Sequence[Label]) -> Label:
    counts = Counter(labels)
    return max(counts, key=lambda lab: (counts[lab], _SEVERITY[lab]))


def human_items(db: ReviewDB, tenant: str, candidate_model: str | None = None) -> tuple[list[LabelledItem], int]:
    """Items with human verdicts (majority label per item) and the number of verdicts they rest on."""
    by_item: dict[str, list[Any]] = {}
    for v in db.verdicts(tenant):
        by_item.setdefault(v.item_id, []).append(v)
    items = []
    n_verdicts = 0
    for iid, vs in by_item.items():
        snap = vs[0].snapshot
        if candidate_model is not None and snap.get("model") != candidate_model:
            continue
        n_verdicts += len(vs)
        items.append(
            LabelledItem(
                iid, str(snap.get("passage", iid)), _majority([v.label for v in vs]), len(vs), snap, snap.get("model")
            )
        )
    return items, n_verdicts


def panel_items(db: ReviewDB, tenant: str, candidate_model: str | None = None) -> tuple[list[LabelledItem], int, int]:
    """Items with a conclusive panel label (latest wins), the number of such labels, and unlinked ones skipped."""
    latest: dict[str, Any] = {}
    unlinked = 0
    n = 0
    for a in db.adjudications(tenant):
        if a.status != "done" or a.label is None:
            continue
        if a.item_id is None or not a.snapshot:
            unlinked += 1
            continue
        if candidate_model is not None and a.snapshot.get("model") != candidate_model:
            continue
        n += 1
        latest[a.item_id] = a
    items = [
        LabelledItem(iid, str(a.snapshot.get("passage", iid)), a.label, 1, a.snapshot, a.snapshot.get("model"))
        for iid, a in latest.items()
    ]
    return items, n, unlinked


# ------------------------------------------------------------------------------------------------- figures
def _num(x: float | None) -> float | None:
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
        out["value"] = _num(auc(scores, y))
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
            "recall": _num(st.recall),
            "recall_ci": [_num(st.recall_ci[0]), _num(st.recall_ci[1])],
            "precision": _num(st.precision),
            "precision_ci": [_num(st.precision_ci[0]), _num(st.precision_ci[1])],
        }
        if st.positives == 0:
            row["refused"] = f"recall needs at least one positive; none among these {y.shape[0]} items"
        out.append(row)
    return out


def _score_columns(
    items: Sequence[LabelledItem], model: RiskModel | None, registry: RiskRegistry | None
) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (kind, values with NaN where the score is not available)."""
    cols: dict[str, tuple[str, np.ndarray]] = {}
    if model is not None:
        vals = []
        for it in items:
            r = score(model, it.signals, it.flags, registry=registry)
            vals.append(r.score + (FORCED_BONUS if r.forced_by_flag is not None else 0.0))
        cols[f"model:{model.rule}"] = ("model", np.asarray(vals, dtype=np.float64))
    stored = np.asarray([it.stored_risk + (FORCED_BONUS if it.forced else 0.0) for it in items], dtype=np.float64)
    cols["stored_risk"] = ("stored", stored)
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
    overlap_budget: float = 0.20,
    judge_error_max_score: float = 70.0,
    other_labels: dict[str, Label] | None = None,
) -> dict[str, Any]:
    """The report as a JSON-ready dict (see the module docstring)."""
    labels = [it.label for it in items]
    counts = {lab: labels.count(lab) for lab in LABELS}
    notes = [f"{len(items)} labelled items from {n_labels} {source} labels"]
    if len(items) < 100:
        notes.append(f"small sample ({len(items)} items): intervals are wide; read the counts beside each figure")
    targets = _targets(labels)
    cols = _score_columns(items, model, registry)
    scores_out = []
    for name, (kind, vals) in cols.items():
        have = np.isfinite(vals)
        entry: dict[str, Any] = {"name": name, "kind": kind, "n": int(have.sum()), "auc": {}, "budgets": {}}
        if not have.any():
            entry["refused"] = "no item has this score"
            scores_out.append(entry)
            continue
        for tname, (rows, y) in targets.items():
            m = rows & have
            entry["auc"][tname] = _auc_figure(vals[m], y[m])
        lab = np.asarray(labels)
        entry["budgets"]["major"] = _budget_figures(vals[have], lab[have] == "MAJOR", budgets)
        entry["budgets"]["error"] = _budget_figures(vals[have], lab[have] != "VALID", budgets)
        scores_out.append(entry)
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
        "overlap": _overlap(cols, labels, overlap_budget),
        "judges": _judges(items, judge_error_max_score),
        "other_source_agreement": _other_agreement(items, other_labels),
    }


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
            row["kappa"] = _num(cohen_kappa(judge, human))
            row["exact_agreement"] = _num(sum(a == b for a, b in zip(judge, human, strict=True)) / len(idx))
        agreement.append(row)
    between = []
    for (ja, ba), (jb, bb) in itertools.combinations(sorted(scores.items()), 2):
        common = sorted(set(ba) & set(bb))
        row = {"a": ja, "b": jb, "n": len(common)}
        rho = spearman([ba[i] for i in common], [bb[i] for i in common]) if len(common) >= 3 else math.nan
        row["spearman"] = _num(rho)
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
        "exact_agreement": _num(sum(x == y for x, y in common) / len(common)),
        "kappa": _num(cohen_kappa(a, b)),
    }


# ------------------------------------------------------------------------------------------------- SVG
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def report_svg(
    items: Sequence[LabelledItem], model: RiskModel | None, registry: RiskRegistry | None, *, title: str
) -> str:
    """Budget-recall curves for MAJOR (x: share reviewed, y: share of majors caught), as a small SVG."""
    w, h, left, top, pw, ph = 720, 440, 60, 40, 440, 340
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>',
    ]
    labels = np.asarray([it.label for it in items])
    n_major = int((labels == "MAJOR").sum())
    if n_major == 0:
        out.append(
            f'<text x="{left}" y="{top + 40}">No MAJOR label among {len(items)} labelled items: '
            "recall is undefined, nothing to draw.</text></svg>"
        )
        return "\n".join(out)
    x0, y0 = left, top + ph
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        yy = y0 - t * ph
        xx = x0 + t * pw
        out.append(f'<line x1="{x0}" y1="{yy:.1f}" x2="{x0 + pw}" y2="{yy:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 8}" y="{yy + 4:.1f}" text-anchor="end">{t:.0%}</text>')
        out.append(f'<text x="{xx:.1f}" y="{y0 + 16}" text-anchor="middle">{t:.0%}</text>')
    for b in DEFAULT_BUDGETS:
        xx = x0 + b * pw
        out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{y0}" stroke="#bbb" stroke-dasharray="3,3"/>')
    out.append(f'<text x="{x0 + pw / 2}" y="{y0 + 34}" text-anchor="middle">review budget (share of items)</text>')
    out.append(
        f'<text x="16" y="{top + ph / 2}" transform="rotate(-90 16 {top + ph / 2})" text-anchor="middle">'
        "MAJOR recall</text>"
    )
    cols = _score_columns(items, model, registry)
    ranked = []
    for name, (kind, vals) in cols.items():
        have = np.isfinite(vals)
        y = labels[have] == "MAJOR"
        if not y.any() or y.all():
            continue
        a = auc(vals[have], y)
        ranked.append((0 if kind != "signal" else 1, -a, name, vals[have], y, a))
    ranked.sort(key=lambda r: (r[0], r[1]))
    for k, (_, _, name, vals, y, a) in enumerate(ranked[: len(_COLOURS)]):
        pts = [f"{x0:.1f},{y0:.1f}"]
        for pct in range(1, 101):
            rec = float((top_k_mask(vals, pct / 100.0) & y).sum()) / float(y.sum())
            pts.append(f"{x0 + pct / 100.0 * pw:.1f},{y0 - rec * ph:.1f}")
        colour = _COLOURS[k]
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{" ".join(pts)}"/>')
        ly = top + 14 + 18 * k
        out.append(
            f'<line x1="{x0 + pw + 14}" y1="{ly - 4}" x2="{x0 + pw + 34}" y2="{ly - 4}" stroke="{colour}" '
            'stroke-width="2"/>'
        )
        out.append(f'<text x="{x0 + pw + 40}" y="{ly}">{escape(name[:28])} (AUC {a:.2f}, n={y.shape[0]})</text>')
    out.append("</svg>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------- fits
def grouped_folds(groups: Sequence[str], n_splits: int) -> np.ndarray:
    """Fold index per item with sklearn's GroupKFold: every translation of a passage lands in the same fold."""
    codes = np.unique(np.asarray(groups), return_inverse=True)[1]
    folds = np.full(codes.shape[0], -1, dtype=np.int64)
    for k, (_, test) in enumerate(GroupKFold(n_splits=n_splits).split(np.zeros(codes.shape[0]), groups=codes)):
        folds[test] = k
    return folds


def _z(col: np.ndarray, train: np.ndarray) -> tuple[float, float]:
    vals = col[train & np.isfinite(col)]
    if vals.shape[0] < 2:
        return 0.0, 1.0
    mean, sd = float(vals.mean()), float(vals.std(ddof=1))
    return mean, sd if sd > 1e-12 else 1.0


def _zcol(col: np.ndarray, mean: float, sd: float) -> np.ndarray:
    z = np.clip((col - mean) / sd, -CLIP, CLIP)
    return np.nan_to_num(z, nan=0.0)  # a missing signal counts as its reference mean, as in risk.score


def fit_risk_model(
    items: Sequence[LabelledItem],
    *,
    tenant: str,
    source: str,
    name: str,
    budget: float = 0.20,
    n_folds: int = 5,
    signals: Sequence[str] | None = None,
    min_items: int = 40,
    min_majors: int = 8,
    fallback: str | None = None,
) -> tuple[RiskModel, dict[str, Any]]:
    """Search z-scored linear weightings of the signals with grouped CV; select by held-out MAJOR recall at
    ``budget`` (then AUC, then fewer terms). Raises InputError with the numbers needed when labels are too few."""
    if not 0.0 < budget <= 1.0:
        raise InputError(f"budget must be in (0, 1], got {budget}")
    if n_folds < 2:
        raise InputError(f"folds must be at least 2, got {n_folds}")
    y = np.asarray([it.label == "MAJOR" for it in items])
    passages = [it.passage for it in items]
    n_groups = len(set(passages))
    n_major, n_other = int(y.sum()), int((~y).sum())
    need = {"items": min_items, "majors": min_majors, "non_majors": min_majors, "passages": n_folds}
    have = {"items": len(items), "majors": n_major, "non_majors": n_other, "passages": n_groups}
    short = [k for k in need if have[k] < need[k]]
    if short:
        parts = ", ".join(f"{have[k]} {k.replace('_', '-')} (need {need[k]})" for k in short)
        raise InputError(f"too few {source} labels to fit a risk model: {parts}", extra={"needed": need, "have": have})
    available = sorted({n for it in items for n, s in it.signals.items() if isinstance(s, SignalValue)})
    if signals is not None:
        unknown = sorted(set(signals) - set(available))
        if unknown:
            raise InputError(
                f"signals {unknown} have no values among the labelled items", extra={"available": available}
            )
        available = sorted(set(signals))
    x = np.asarray([[it.value(n) for n in available] for it in items], dtype=np.float64).reshape(len(items), -1)
    coverage = np.isfinite(x).mean(axis=0) if x.size else np.zeros(0)
    keep = [j for j, n in enumerate(available) if coverage[j] >= 0.5 and np.nanstd(x[:, j]) > 1e-12]
    dropped = sorted(set(available) - {available[j] for j in keep})
    if not keep:
        raise InputError("no signal has values on at least half of the labelled items", extra={"dropped": dropped})
    names = [available[j] for j in keep]
    x = x[:, keep]
    forced = np.asarray([it.forced for it in items])
    folds = grouped_folds(passages, n_folds)
    # held-out z columns: each fold z-scored with the other folds' statistics
    zcv = np.zeros_like(x)
    for k in np.unique(folds):
        test = folds == k
        for j in range(x.shape[1]):
            mean, sd = _z(x[:, j], ~test)
            zcv[test, j] = _zcol(x[test, j], mean, sd)

    def evaluate(terms: tuple[tuple[int, float], ...]) -> tuple[float, float]:
        s = sum(w * zcv[:, j] for j, w in terms) + np.where(forced, FORCED_BONUS, 0.0)
        st = budget_stats(s, y, (budget,))[0]
        return (round(st.recall, 6), round(auc(s, y), 6))

    specs: list[tuple[tuple[int, float], ...]] = [((j, 1.0),) for j in range(len(names))]
    singles = sorted(range(len(names)), key=lambda j: evaluate(((j, 1.0),)), reverse=True)[:6]
    for a, b in itertools.combinations(singles, 2):
        specs += [((a, wa), (b, round(1.0 - wa, 2))) for wa in (0.3, 0.5, 0.7)]
    for trio in itertools.combinations(singles, 3):
        specs.append(tuple((j, round(1 / 3, 4)) for j in trio))
        for lead in trio:
            specs.append(tuple((j, 0.5 if j == lead else 0.25) for j in trio))
    scored = [(evaluate(sp), -len(sp), sp) for sp in specs]
    best_key, _, best = max(scored, key=lambda t: (t[0], t[1]))
    cv_scores = sum(w * zcv[:, j] for j, w in best) + np.where(forced, FORCED_BONUS, 0.0)
    everything = np.ones(len(items), dtype=bool)
    terms = []
    full = np.zeros(len(items))
    for j, w in best:
        mean, sd = _z(x[:, j], everything)
        terms.append(SignalWeight(name=names[j], weight=round(w, 4), mean=round(mean, 6), sd=round(sd, 6), clip=CLIP))
        full += w * _zcol(x[:, j], mean, sd)
    cv_figures: dict[str, Any] = {"auc_major_vs_nonmajor": _num(auc(cv_scores, y))}
    for st in budget_stats(cv_scores, y, tuple(sorted({*DEFAULT_BUDGETS, budget}))):
        key = f"{st.budget:.0%}"
        cv_figures[f"recall@{key}"] = _num(st.recall)
        cv_figures[f"recall@{key}_wilson95"] = [_num(v) for v in st.recall_ci]
        cv_figures[f"precision@{key}"] = _num(st.precision)
        cv_figures[f"precision@{key}_wilson95"] = [_num(v) for v in st.precision_ci]
    fit = {
        "tenant": tenant,
        "label": f"MAJOR vs VALID+MINOR ({source} labels; human: majority of an item's verdicts)",
        "source": source,
        "n_items": len(items),
        "n_major": n_major,
        "n_passages": n_groups,
        "folds": f"{n_folds}-fold sklearn GroupKFold grouped by source passage",
        "selection": f"held-out MAJOR recall at {budget:.0%}, then AUC, then fewer terms; {len(specs)} weightings of "
        f"z-scored signals (clip {CLIP:g}) tried; the CV figures are those of the selected weighting (optimistic "
        "by the selection itself)",
        "budget": budget,
        "signals_considered": names,
        "signals_dropped": dropped,
        "cv": cv_figures,
        "selection_key": {"recall": best_key[0], "auc": best_key[1]},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    quantiles = [round(float(q), 6) for q in np.quantile(full + 0.0, np.linspace(0.0, 1.0, 1001))]
    model = RiskModel(
        name=name,
        version="1.0.0",
        description=f"Calibrated on {len(items)} {source}-labelled items of tenant {tenant} "
        f"({' + '.join(f'{t.weight:g}*z({t.name})' for t in terms)}).",
        requires_peers=any(t.name in PEER_SIGNALS for t in terms),
        signals=terms,
        hard_flags=HardFlagRule(force_to_top=True, severities=["critical", "major"]),
        fallback=fallback if any(t.name in PEER_SIGNALS for t in terms) else None,
        reference_data=f"{len(items)} {source}-labelled items of tenant {tenant}",
        reference=ReferenceDistribution(data="labelled items, in-sample scores", n=len(items), quantiles=quantiles),
        fit=fit,
    )
    return model, fit


_SLUG = re.compile(r"[^a-z0-9]+")


def write_model(model_for: Any, models_dir: str | Path, tenant: str) -> tuple[RiskModel, Path]:
    """Write ``models_dir/risk/calibrated-<tenant>-v<N>.json`` (next free N, created exclusively, so two fits never
    share a name). ``model_for(name)`` builds the model once the name is known."""
    risk_dir = Path(models_dir) / "risk"
    risk_dir.mkdir(parents=True, exist_ok=True)
    slug = _SLUG.sub("-", tenant.lower()).strip("-") or "tenant"
    n = 1 + sum(1 for _ in risk_dir.glob(f"calibrated-{slug}-v*.json"))
    while True:
        name = f"calibrated-{slug}-v{n}"
        path = risk_dir / f"{name}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            n += 1
            continue
        model: RiskModel = model_for(name)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(msgspec.to_builtins(model), indent=1, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return model, path


def active_model_name(db: ReviewDB | str | Path, tenant: str, default: str) -> str:
    """The risk model a tenant's assessments are scored with: the last activated one, else ``default``.

    The worker calls this before ``final_part`` (``db`` = a ReviewDB or the TRISK_DB_PATH file)."""
    store = db if isinstance(db, ReviewDB) else open_db(db)
    act = store.active(tenant)
    return act.model_name if act is not None else default
