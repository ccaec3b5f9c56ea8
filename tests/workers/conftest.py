"""Fixtures of the worker tests: a queue of each test's own and the API on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis

from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from tests.conftest import TEST_REDIS_URL, issue_test_key, keyed


@pytest.fixture()
def settings(test_settings: Settings) -> Settings:
    """A queue of this test's own: jobs other tests left queued must not run (and be counted) here, and its lanes'
    fair-share state starts empty."""
    return replace(test_settings, redis=replace(test_settings.redis, queue_name=f"trisk:test:{uuid.uuid4().hex}:q"))


@pytest.fixture()
def client(sn12_index: NoveltyIndex, settings: Settings) -> Iterator[Any]:
    """The API on that queue as the test tenant; the jobs still queued at the end go with the queue."""
    from litestar.testing import TestClient

    from service.app import create_app
    from service.app.resources import Resources

    resources = Resources(settings=settings, indexes={"pli": sn12_index})
    with TestClient(app=create_app(settings, resources=resources)) as tc:
        yield keyed(tc, issue_test_key(settings))
    r = redis.Redis.from_url(TEST_REDIS_URL)
    queue = settings.redis.queue_name
    for job_id in r.zrange(queue, 0, -1):
        r.delete(b"arq:job:" + job_id)
    for key in r.scan_iter(match=f"{queue}*", count=1000):
        r.delete(key)
