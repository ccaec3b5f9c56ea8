"""Health endpoints: live always; ready only with the index loaded and Redis reachable and not evicting."""

from __future__ import annotations

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
