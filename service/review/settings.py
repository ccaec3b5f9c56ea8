"""Settings of the review queue, fits and judges: the ``review`` group of ``service.platform.settings``."""

from __future__ import annotations

from service.platform.settings import ReviewSettings, get_settings

__all__ = ["ReviewSettings", "get_review_settings"]


def get_review_settings() -> ReviewSettings:
    """The process-wide review settings (``get_settings().review``; ``get_settings.cache_clear()`` re-reads them)."""
    return get_settings().review
