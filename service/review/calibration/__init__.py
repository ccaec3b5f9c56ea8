"""The calibration loop: labelled items from verdicts or panel labels, the detection report and its SVG, and fits of
new risk models by the one fitting method (``search``; stored and activated through ``service.state.risk_catalog``)."""

from __future__ import annotations

from service.review.calibration.fit import fit_risk_model
from service.review.calibration.labels import LabelledItem, human_items, panel_items
from service.review.calibration.plot import report_svg
from service.review.calibration.report import calibration_report
from service.review.calibration.search import grouped_folds

__all__ = [
    "LabelledItem",
    "calibration_report",
    "fit_risk_model",
    "grouped_folds",
    "human_items",
    "panel_items",
    "report_svg",
]
