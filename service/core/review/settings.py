"""Settings of the review queue and the durable label store, read from the environment once."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from service.core.settings import REPO_ROOT, _env, _env_float, _env_int

__all__ = ["ReviewSettings", "get_review_settings"]


@dataclass(frozen=True)
class ReviewSettings:
    # verdicts, adjudication labels, fits and active models live here (Redis on this machine keeps nothing on disk)
    db_path: str = str(REPO_ROOT / "var" / "trisk.db")
    # a claim holds its items this long unless renewed; an expired lease puts them back in the queue
    lease_seconds: int = 900
    max_lease_seconds: int = 4 * 3600
    max_claim_items: int = 100
    # fits refuse fewer labelled items / majors / passages than this (the figures would be noise)
    min_fit_items: int = 40
    min_fit_majors: int = 8
    # judge scores at or below this count as "error" when judges are compared with reviewers (GEMBA's minor rule)
    judge_error_max_score: float = 70.0

    @classmethod
    def from_env(cls) -> ReviewSettings:
        return cls(
            db_path=_env("TRISK_DB_PATH", cls.db_path),
            lease_seconds=_env_int("TRISK_REVIEW_LEASE_SECONDS", cls.lease_seconds),
            max_lease_seconds=_env_int("TRISK_REVIEW_MAX_LEASE_SECONDS", cls.max_lease_seconds),
            max_claim_items=_env_int("TRISK_REVIEW_MAX_CLAIM", cls.max_claim_items),
            min_fit_items=_env_int("TRISK_FIT_MIN_ITEMS", cls.min_fit_items),
            min_fit_majors=_env_int("TRISK_FIT_MIN_MAJORS", cls.min_fit_majors),
            judge_error_max_score=_env_float("TRISK_JUDGE_ERROR_MAX_SCORE", cls.judge_error_max_score),
        )


@functools.lru_cache(maxsize=1)
def get_review_settings() -> ReviewSettings:
    """The process-wide review settings (tests call ``get_review_settings.cache_clear()`` after changing env)."""
    return ReviewSettings.from_env()
