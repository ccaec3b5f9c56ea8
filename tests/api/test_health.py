"""Health endpoints: live always; ready only with the index loaded and Redis reachable and not evicting."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from tests.conftest import issue_test_key, keyed
from tests.support.local_redis import RedisServer


def test_live_and_ready(client: Any) -> None:
    assert client.get("/health/live").json()["status"] == "ok"
    r = client.get("/health/ready")
    assert r.status_code == 200, r.text
    assert r.json()["checks"]["redis"]["ok"] and r.json()["checks"]["index"]["ok"]


def test_not_ready_without_redis(sn12_index: NoveltyIndex, test_settings: Settings) -> None:
    settings = replace(test_settings, redis=replace(test_settings.redis, url="redis://127.0.0.1:1/0"))
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        keyed(tc, issue_test_key(settings))
        r = tc.get("/health/ready")
        assert r.status_code == 503
        assert r.json()["checks"]["redis"]["ok"] is False
        assert tc.get("/health/live").status_code == 200
        # novelty does not need Redis
        assert tc.get("/v1/novelty/sn22.76:7").status_code == 200


def test_not_ready_without_index(test_settings: Settings, tmp_path: Any) -> None:
    settings = replace(test_settings, index=replace(test_settings.index, path=str(tmp_path / "missing.trisk")))
    with TestClient(app=create_app(settings)) as tc:
        keyed(tc, issue_test_key(settings))
        r = tc.get("/health/ready")
        assert r.status_code == 503
        assert "missing.trisk" in r.json()["checks"]["index"]["detail"]
        nov = tc.post("/v1/novelty", json={"text": "dhammo desito"})
        assert nov.status_code == 503
        assert nov.headers["content-type"].startswith("application/problem+json")


def _ready_on(server: RedisServer, sn12_index: NoveltyIndex, test_settings: Settings) -> Any:
    settings = replace(test_settings, redis=replace(test_settings.redis, url=server.url))
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        return tc.get("/health/ready")


def test_not_ready_on_a_redis_that_evicts(sn12_index: NoveltyIndex, test_settings: Settings, tmp_path: Path) -> None:
    with RedisServer(tmp_path, extra=("--maxmemory-policy", "allkeys-lru")) as server:
        r = _ready_on(server, sn12_index, test_settings)
    assert r.status_code == 503, r.text
    check = r.json()["checks"]["redis_policy"]
    assert check["ok"] is False and "allkeys-lru" in check["detail"] and "noeviction" in check["detail"], check
    assert r.json()["checks"]["redis"]["ok"] is True


def test_ready_on_noeviction_and_when_config_is_disabled(
    sn12_index: NoveltyIndex, test_settings: Settings, tmp_path: Path
) -> None:
    with RedisServer(tmp_path / "a") as server:
        r = _ready_on(server, sn12_index, test_settings)
    assert r.status_code == 200 and r.json()["checks"]["redis_policy"]["detail"] == "maxmemory-policy noeviction"
    # a managed Redis that disables CONFIG: the policy is unknown, which does not fail readiness
    with RedisServer(tmp_path / "b", extra=("--rename-command", "CONFIG", "")) as server:
        r = _ready_on(server, sn12_index, test_settings)
    assert r.status_code == 200, r.text
    assert r.json()["checks"]["redis_policy"]["detail"].startswith("maxmemory-policy unknown"), r.json()


def test_not_ready_while_the_store_refuses_writes(
    sn12_index: NoveltyIndex, test_settings: Settings, tmp_path: Path
) -> None:
    """Issue 31: with the disk full every submission was a 503 (nothing lost) but /health/ready stayed 200 "store
    ok", so the pod stayed in the Service. A store that refused a write makes the pod not ready, saying why. The full
    disk is SQLite's own: ``max_page_count`` at the file's size, so the next page it needs is refused (SQLITE_FULL)."""
    import sqlalchemy as sa

    from tests.durable_support import sqlite_settings

    settings = replace(test_settings, durable=sqlite_settings(tmp_path))
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        client = keyed(tc, issue_test_key(settings, scopes=("submit",)))
        assert client.get("/health/ready").status_code == 200
        engine = tc.app.state.resources.db.engine
        with engine.connect() as con:
            pages = con.execute(sa.text("PRAGMA page_count")).scalar_one()

        @sa.event.listens_for(engine, "connect")
        def _full(dbapi_con: Any, _record: Any) -> None:
            dbapi_con.execute(f"PRAGMA max_page_count = {pages}")

        engine.dispose()  # every connection from now on is one of the full disk
        text = " ".join(uuid.uuid4().hex for _ in range(1200))  # pages more than the file has, even compressed
        body = {"source": {"text": text, "lang": "pli"}, "candidates": [{"id": "a", "text": "Thus I heard."}]}
        refused = client.post("/v1/assessments", json={**body, "checks": ["hard_flags"]})
        assert refused.status_code == 503, refused.text[:300]
        ready = client.get("/health/ready")
        assert ready.status_code == 503, ready.text[:500]
        store = ready.json()["checks"]["store"]
        assert store["ok"] is False and "refused a write" in store["detail"] and "full" in store["detail"], store
        assert ready.json()["checks"]["redis"]["ok"] and ready.json()["checks"]["index"]["ok"]  # only the store


def test_what_counts_as_a_store_refusing_writes() -> None:
    """A full disk, a read-only file or replica, failing I/O: yes; a lock timeout or a wrong statement: no (they are
    contention or one request's fault, not a pod that cannot take submissions)."""
    from types import SimpleNamespace

    from service.state.durable.engine import refuses_writes

    def sqlite(name: str) -> Any:
        return SimpleNamespace(sqlite_errorname=name)

    def postgres(state: str) -> Any:
        return SimpleNamespace(sqlstate=state)

    refusing = [sqlite("SQLITE_FULL"), sqlite("SQLITE_READONLY_DBMOVED"), sqlite("SQLITE_IOERR_WRITE")]
    refusing += [postgres("53100"), postgres("25006"), postgres("58030")]
    others = [sqlite("SQLITE_BUSY"), sqlite("SQLITE_ERROR"), postgres("40001"), postgres("23505"), None, ValueError()]
    assert [refuses_writes(e) for e in refusing] == [True] * len(refusing)
    assert [refuses_writes(e) for e in others] == [False] * len(others)
