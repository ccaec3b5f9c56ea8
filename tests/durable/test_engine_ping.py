"""PostgreSQL connections idle for a while are checked before use, so a restarted server or a failover does not
fail the next request; connections in steady use are not pinged (a round trip per request)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from service.state.durable import engine as durable_engine
from service.state.durable import make_engine
from tests.durable_support import PostgresServer


def _kill_backends(admin: sa.Engine, database: str) -> None:
    """What a server restart does to every pooled connection."""
    with admin.connect() as con:
        con.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"
            ),
            {"d": database},
        )


def _pid(engine: sa.Engine) -> int:
    with engine.connect() as con:
        return int(con.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def test_an_idle_connection_is_pinged_and_replaced_when_the_server_dropped_it(
    pg: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg.fresh_database() as url:
        engine = make_engine(url)
        try:
            first = _pid(engine)
            _kill_backends(pg.admin, str(url.database))
            monkeypatch.setattr(durable_engine, "PING_IDLE_SECONDS", 0.0)  # idle long enough: pinged
            assert _pid(engine) != first  # the dead connection was replaced before the query, which succeeded
        finally:
            engine.dispose()


def test_a_connection_in_steady_use_is_not_pinged(pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with pg.fresh_database() as url:
        engine = make_engine(url)
        try:
            _pid(engine)
            monkeypatch.setattr(durable_engine, "PING_IDLE_SECONDS", 3600.0)  # just used: no ping
            pings: list[object] = []
            monkeypatch.setattr(engine.dialect, "do_ping", lambda con: pings.append(con) or True)
            _pid(engine)
            assert pings == []
            _kill_backends(pg.admin, str(url.database))
            with pytest.raises(sa.exc.OperationalError):  # the price: a restart within the second fails once
                _pid(engine)
            _pid(engine)  # and the pool replaced its connections
        finally:
            engine.dispose()
