"""The records of the durable store as the service reads them: verdicts, adjudications, fits, activations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from service.core.typology import ErrorSpan, FindingJudgement

__all__ = ["LABELS", "Activation", "Adjudication", "FitRecord", "Label", "Verdict", "in_force"]

Label = Literal["VALID", "MINOR", "MAJOR"]
LABELS: tuple[Label, ...] = ("VALID", "MINOR", "MAJOR")


class Verdict(msgspec.Struct):
    """One reviewer's verdict on one item; ``opinion`` is 1 for the first verdict on the item, 2 for the next..."""

    id: int
    tenant: str
    item_id: str
    assessment_id: str
    candidate_id: str
    reviewer: str
    label: Label
    error_category: str | None
    note: str | None
    lease_id: str | None
    created_at: float
    snapshot: dict[str, Any]
    opinion: int = 1
    # the reviewer's word on each finding the item showed, and the errors she marked that no finding named
    findings: tuple[FindingJudgement, ...] = ()
    spans: tuple[ErrorSpan, ...] = ()
    # the id of her own earlier verdict on the item this one replaces (both are kept; the later one counts)
    supersedes: int | None = None
    # seconds from the claim to the verdict (None: given without a lease), and with the item's page in front of her
    lease_seconds: float | None = None
    active_seconds: float | None = None


class _Superseding(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def supersedes(self) -> int | None: ...


V = TypeVar("V", bound=_Superseding)


def in_force(verdicts: Iterable[V]) -> list[V]:
    """The verdicts that count (stored ones, or as the API shows them): every one but those a later verdict
    supersedes (a reviewer's replaced slip)."""
    given = list(verdicts)
    replaced = {v.supersedes for v in given if v.supersedes is not None}
    return [v for v in given if v.id not in replaced]


class Adjudication(msgspec.Struct):
    """A reference-aided panel label (calibration only, never mixed with human verdicts)."""

    id: str
    tenant: str
    created_at: float
    status: Literal["pending", "done", "skipped", "inconclusive", "failed"]
    label: Label | None
    reason: str | None
    source: str
    candidate: str
    reference: str
    source_lang: str
    candidate_model: str | None
    item_id: str | None
    panel: str | None
    panel_version: str | None
    prompt_version: str
    prompt_hash: str
    judges: list[dict[str, Any]]
    votes: dict[str, int]
    snapshot: dict[str, Any] | None = None


class FitRecord(msgspec.Struct):
    id: str
    tenant: str
    model_name: str
    created_at: float
    body: dict[str, Any]


class Activation(msgspec.Struct):
    """A model made a tenant's active one: by whom, whether over a comparison it lost (``forced``, with the admin's
    ``reason``), and ``body``: the comparison with the model it replaced and what the model is (JSON)."""

    tenant: str
    model_name: str
    rule: str
    activated_at: float
    activated_by: str | None = None
    forced: bool = False
    reason: str | None = None
    body: dict[str, Any] = msgspec.field(default_factory=dict)
