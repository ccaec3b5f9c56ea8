"""Budget-recall curves for MAJOR as an SVG chart (x: share of items reviewed in the score's order, y: share of the
MAJOR items found by then), for the ``.svg`` route and the workbench's calibration page alike.

Drawn with attributes only (no ``style``), so the chart can sit inline in a page whose Content-Security-Policy
allows no inline styles. The lead curve (the model, else the stored risk) carries its Wilson intervals at the report's
budgets; a dashed diagonal is what reviewing in random order finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

from service.core.metrics import DEFAULT_BUDGETS, auc, budget_stats, top_k_mask
from service.core.risk import RiskModel, RiskRegistry
from service.review.calibration.labels import LabelledItem
from service.review.calibration.report import score_columns

__all__ = ["recall_curve", "report_svg"]

# colour-blind-safe (Okabe-Ito), the lead curve first
_COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#999999")
_FONT = "DejaVu Sans, Verdana, sans-serif"


def recall_curve(scores: np.ndarray, positives: np.ndarray, steps: int = 100) -> list[tuple[float, float]]:
    """(budget, recall) at every 1/steps of the items, top-k in score order with the report's tie rule."""
    total = float(positives.sum())
    points = [(0.0, 0.0)]
    for k in range(1, steps + 1):
        b = k / steps
        points.append((b, float((top_k_mask(scores, b) & positives).sum()) / total))
    return points


def _label(name: str) -> str:
    kind, _, rest = name.partition(":")
    if kind == "model":
        return f"model {rest}"
    if kind == "signal":
        return rest
    return "risk stored at assessment" if name == "stored_risk" else name


def report_svg(
    items: Sequence[LabelledItem], model: RiskModel | None, registry: RiskRegistry | None, *, title: str
) -> str:
    """The chart: up to eight curves (the model and the stored risk first, then signals by AUC) and a legend."""
    w, h, left, top, pw, ph = 900, 470, 64, 52, 480, 340
    x0, y0 = left, top + ph
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-labelledby="recall-title" font-family="{_FONT}" font-size="12" fill="#222">',
        f'<title id="recall-title">Budget-recall curves for MAJOR: {escape(title)}</title>',
        f'<rect width="{w}" height="{h}" fill="#ffffff"/>',
        f'<text x="{left}" y="22" font-size="15" font-weight="bold">MAJOR errors found against the share reviewed'
        "</text>",
        f'<text x="{left}" y="40" fill="#555">{escape(title)}</text>',
    ]
    labels = np.asarray([it.label for it in items])
    n_major = int((labels == "MAJOR").sum())
    if n_major == 0:
        out.append(
            f'<text x="{left}" y="{top + 40}">No MAJOR label among {len(items)} labelled items: '
            "recall is undefined, nothing to draw.</text></svg>"
        )
        return "\n".join(out)

    def px(b: float) -> float:
        return x0 + b * pw

    def py(r: float) -> float:
        return y0 - r * ph

    for t in range(0, 11):
        f = t / 10
        grid = "#e4e4e4" if t % 5 else "#c8c8c8"
        out.append(f'<line x1="{px(f):.1f}" y1="{top}" x2="{px(f):.1f}" y2="{y0}" stroke="{grid}"/>')
        out.append(f'<line x1="{x0}" y1="{py(f):.1f}" x2="{x0 + pw}" y2="{py(f):.1f}" stroke="{grid}"/>')
        if t % 2 == 0:
            out.append(f'<text x="{px(f):.1f}" y="{y0 + 17}" text-anchor="middle">{f:.0%}</text>')
            out.append(f'<text x="{x0 - 8}" y="{py(f) + 4:.1f}" text-anchor="end">{f:.0%}</text>')
    for b in DEFAULT_BUDGETS:
        out.append(
            f'<line x1="{px(b):.1f}" y1="{top}" x2="{px(b):.1f}" y2="{y0}" stroke="#888" stroke-dasharray="2,3"/>'
        )
    named = ", ".join(f"{100 * b:g}" for b in DEFAULT_BUDGETS)
    at = px(DEFAULT_BUDGETS[-1]) + 4
    out.append(f'<text x="{at:.1f}" y="{top + 12}" fill="#555" font-size="11">budgets {named}%</text>')
    out.append(
        f'<line x1="{x0}" y1="{y0}" x2="{x0 + pw}" y2="{top}" stroke="#777" stroke-dasharray="6,4" stroke-width="1.2"/>'
    )
    out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(
        f'<text x="{x0 + pw / 2}" y="{y0 + 38}" text-anchor="middle">share of items reviewed, riskiest first</text>'
    )
    out.append(
        f'<text x="18" y="{top + ph / 2}" transform="rotate(-90 18 {top + ph / 2})" text-anchor="middle">'
        "share of MAJOR items found (recall)</text>"
    )

    cols = score_columns(items, model, registry)
    ranked = []
    for name, (kind, vals) in cols.items():
        have = np.isfinite(vals)
        y = labels[have] == "MAJOR"
        if not y.any() or y.all():
            continue
        a = auc(vals[have], y)
        ranked.append((0 if kind != "signal" else 1, -a, name, vals[have], y, a))
    ranked.sort(key=lambda r: (r[0], r[1]))
    lx = x0 + pw + 24
    shown = list(enumerate(ranked[: len(_COLOURS)]))
    # drawn last to first, so the lead curve lies on top of the others (the stored risk often equals it)
    for k, (_, _, name, vals, y, a) in reversed(shown):
        colour = _COLOURS[k]
        pts = " ".join(f"{px(b):.1f},{py(r):.1f}" for b, r in recall_curve(vals, y))
        width = "2.6" if k == 0 else "1.6"
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="{width}" points="{pts}"/>')
        if k == 0:  # the lead curve's intervals at the budgets
            for st in budget_stats(vals, y):
                lo, hi = st.recall_ci
                xb = px(st.budget)
                out.append(
                    f'<line x1="{xb:.1f}" y1="{py(lo):.1f}" x2="{xb:.1f}" y2="{py(hi):.1f}" stroke="{colour}" '
                    'stroke-width="1.4"/>'
                )
                for yy in (lo, hi):
                    out.append(
                        f'<line x1="{xb - 4:.1f}" y1="{py(yy):.1f}" x2="{xb + 4:.1f}" y2="{py(yy):.1f}" '
                        f'stroke="{colour}" stroke-width="1.4"/>'
                    )
                out.append(
                    f'<circle cx="{xb:.1f}" cy="{py(st.recall):.1f}" r="3.2" fill="{colour}">'
                    f"<title>{escape(_label(name))}: {st.hits}/{st.positives} MAJOR in the top {st.budget:.0%} "
                    f"({st.reviewed} items)</title></circle>"
                )
        ly = top + 8 + 36 * k
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="{colour}" stroke-width="{width}"/>')
        out.append(f'<text x="{lx + 32}" y="{ly + 4}">{escape(_label(name)[:44])}</text>')
        out.append(
            f'<text x="{lx + 32}" y="{ly + 19}" fill="#555" font-size="11">AUC {a:.2f}, {int(y.sum())} MAJOR of '
            f"{y.shape[0]}</text>"
        )
    ly = top + 8 + 36 * min(len(ranked), len(_COLOURS))
    out.append(
        f'<line x1="{lx}" y1="{ly}" x2="{lx + 24}" y2="{ly}" stroke="#777" stroke-dasharray="6,4" stroke-width="1.2"/>'
    )
    out.append(f'<text x="{lx + 32}" y="{ly + 4}">random order</text>')
    out.append("</svg>")
    return "\n".join(out)
