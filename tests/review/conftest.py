"""Fixtures for review tests: a unique tenant, the Redis test db, a temporary label store and models folder, the app."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from service.platform.settings import LLMSettings, Settings, get_settings  # noqa: E402
from service.state.durable import close_stores  # noqa: E402
from tests.conftest import issue_test_key, keyed  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, openai_server  # noqa: E402, F401
from tests.review.support import REDIS_URL, cleanup  # noqa: E402

TEST_MODEL = {
    "name": "test-risk",
    "version": "1.0.0",
    "description": "test model: z(s)",
    "requires_peers": False,
    "signals": [{"name": "s", "weight": 1.0, "mean": 0.0, "sd": 1.0, "clip": None}],
}
TEST_PANEL = {
    "name": "adj",
    "version": "t1",
    "judges_per_candidate": 3,
    "judges": [
        {"id": "ja", "model": "adj-a", "family": "anthropic"},
        {"id": "jb", "model": "adj-b", "family": "openai"},
        {"id": "jc", "model": "adj-c", "family": "google"},
    ],
}


@pytest.fixture
def tenant() -> str:
    return f"test-review-{uuid.uuid4().hex[:10]}"


@pytest_asyncio.fixture(loop_scope="function")
async def redis(tenant: str) -> AsyncIterator[Redis]:
    r = Redis.from_url(REDIS_URL)
    yield r
    await cleanup(r, tenant)
    await r.aclose()


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    (d / "risk").mkdir(parents=True)
    (d / "panels").mkdir()
    (d / "risk" / "test-risk.json").write_text(json.dumps(TEST_MODEL))
    (d / "risk" / "aliases.json").write_text(json.dumps({"default": "test-risk"}))
    (d / "panels" / "adj.json").write_text(json.dumps(TEST_PANEL))
    return d


@pytest.fixture
def db_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "var" / "trisk.db"
    monkeypatch.setenv("TRISK_DB_PATH", str(path))
    monkeypatch.setenv("TRISK_FIT_MIN_ITEMS", "20")
    monkeypatch.setenv("TRISK_FIT_MIN_MAJORS", "4")
    get_settings.cache_clear()
    yield path
    get_settings.cache_clear()
    close_stores()


def make_settings(models_dir: Path, llm: LLMSettings | None = None) -> Settings:
    base = get_settings()
    return replace(
        base,
        redis=replace(
            base.redis, url=REDIS_URL, retention_seconds=600, queue_name=f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
        ),
        index=replace(base.index, path=str(models_dir / "no-index.trisk")),
        risk=replace(base.risk, models_dir=str(models_dir), model="default"),
        llm=llm or LLMSettings(),
        api=replace(base.api, rate_per_key=0, rate_per_tenant=0),
    )


def make_client(settings: Settings, tenant: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Any:
    from litestar.testing import TestClient

    from service.app.factory import create_app
    from service.app.resources import Resources

    # API tests run as their own tenant (their key's), so nothing they write can touch another test's data
    tc = TestClient(app=create_app(settings, resources=Resources(settings=settings)))
    return keyed(tc, issue_test_key(settings, tenant))


@pytest.fixture
def api(models_dir: Path, db_path: Path, tenant: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with make_client(make_settings(models_dir), tenant, monkeypatch) as client:
        yield client
    asyncio.run(_cleanup(tenant))


async def _cleanup(tenant: str) -> None:
    r = Redis.from_url(REDIS_URL)
    await cleanup(r, tenant)
    await r.aclose()


@pytest.fixture
def fake(openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:  # noqa: F811
    openai_server.reset()
    yield openai_server
    openai_server.reset()
