"""Signatures of built artifacts (novelty index, translation lexicon): the id is a hash of what changes the numbers."""

from __future__ import annotations

import hashlib
import json

__all__ = ["UNSTABLE_FIELDS", "signature_id"]

# when and how fast it was built changes nothing an artifact computes
UNSTABLE_FIELDS = ("built_at", "build_seconds", "id")


def signature_id(signature: dict[str, object]) -> str:
    """16 hex digits of the sha256 of the signature's stable fields (sorted JSON)."""
    stable = {k: v for k, v in signature.items() if k not in UNSTABLE_FIELDS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]
