"""What every NDJSON export of ``/v1/exports`` shares: its time window ``[since, until)``."""

from __future__ import annotations

import time

from service.platform.errors import InputError

__all__ = ["window"]


def window(since: float, until: float | None) -> tuple[float, float]:
    """``[since, until)`` in epoch seconds, ``until`` defaulting to now; 422 for negative or reversed bounds."""
    end = time.time() + 1.0 if until is None else until
    if since < 0 or end < 0:
        raise InputError("since and until are epoch seconds: not negative")
    if end < since:
        raise InputError(f"until ({end}) is before since ({since})")
    return since, end
