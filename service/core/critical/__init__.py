"""Critical-content checks (numbers, names, negation, list sizes, doctrinal terms) for Pali -> English candidates."""

from __future__ import annotations

from service.core.critical.check import (
    CHECKS,
    DEFAULT_THRESHOLDS,
    SIGNALS,
    VERSION,
    CriticalChecker,
    CriticalReport,
    check_critical,
    default_checker,
)

__all__ = [
    "CHECKS",
    "DEFAULT_THRESHOLDS",
    "SIGNALS",
    "VERSION",
    "CriticalChecker",
    "CriticalReport",
    "check_critical",
    "default_checker",
]
