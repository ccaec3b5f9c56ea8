"""Fixtures of the durable store's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.platform.settings import DurableSettings
from tests.durable_support import PostgresServer, pg_settings, sqlite_settings, uses_engine


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableSettings]:
    """An empty database on each engine (a new SQLite file; a new PostgreSQL database, dropped afterwards)."""
    uses_engine(request, request.param)
    if request.param == "sqlite":
        yield sqlite_settings(tmp_path)
        return
    server: PostgresServer = request.getfixturevalue("postgres")
    with server.fresh_database() as url:
        yield pg_settings(url)
