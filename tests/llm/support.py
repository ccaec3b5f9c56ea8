"""Helpers shared by the LLM tests: fast clients, settings pointing at the fake server, tiny panels."""

from __future__ import annotations

from service.core.judges.llm import Judge, LLMClient, Panel, RetryPolicy
from service.platform.settings import LLMSettings
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAIServer

REDIS_TEST_URL = TEST_REDIS_URL  # this process's test db (one per xdist worker)

# tiny backoffs keep the suite fast; the logic is the same as production
FAST_RETRY = RetryPolicy(max_retries=3, backoff_base=0.01, backoff_max=0.05, jitter=0.1, max_retry_after=5.0)


def make_client(**kwargs: object) -> LLMClient:
    options: dict[str, object] = {"retry": FAST_RETRY, "requests_per_second": 0.0, "max_concurrency": 8}
    options.update(kwargs)
    return LLMClient(**options)  # type: ignore[arg-type]


def settings_for(server: FakeOpenAIServer, **kwargs: object) -> LLMSettings:
    return LLMSettings(base_url=server.base_url, api_key="test-key", **kwargs)  # type: ignore[arg-type]


def judge(model: str, family: str, judge_id: str | None = None, **kwargs: object) -> Judge:
    return Judge(id=judge_id or model, model=model, family=family, **kwargs)  # type: ignore[arg-type]


def panel(*judges: Judge, per_candidate: int | None = None) -> Panel:
    return Panel(name="test", version="t1", judges=list(judges), judges_per_candidate=per_candidate)
