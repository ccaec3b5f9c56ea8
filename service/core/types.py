"""Small value types shared by the scoring core, the workers and the API (msgspec Structs)."""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Flag", "Severity", "SignalResult", "SignalSkipped", "SignalValue", "Span"]

Severity = Literal["critical", "major", "minor", "info"]


class Span(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where a finding sits in the candidate: character offsets ``[start, end)`` into its text in NFC (Python string
    indices, i.e. code points; the same as submitted for composed text). ``start == end`` marks a place where
    something is missing."""

    start: int
    end: int


class Flag(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A rule that fired on a candidate, worded for a reviewer; ``spans`` locate it in the candidate (empty when the
    finding has no place there, e.g. a passage-level count)."""

    rule: str
    severity: Severity
    detail: str
    spans: tuple[Span, ...] = ()


class SignalValue(msgspec.Struct, tag="value", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """A computed signal; ``value`` is raw (not z-scored), higher = riskier unless ``higher_is_riskier`` is false."""

    value: float
    detail: dict[str, object] = {}


class SignalSkipped(msgspec.Struct, tag="skipped", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """A signal that was not computed, and why (never a made-up number)."""

    reason: str


SignalResult = SignalValue | SignalSkipped
