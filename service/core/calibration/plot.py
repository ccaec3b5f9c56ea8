"""Budget-recall curves for MAJOR as a small SVG (x: share reviewed, y: share of majors caught)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np

from service.core.calibration.labels import LabelledItem
from service.core.calibration.report import score_columns
from service.core.metrics import DEFAULT_BUDGETS, auc, top_k_mask
from service.core.risk import RiskModel, RiskRegistry

__all__ = ["report_svg"]

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
