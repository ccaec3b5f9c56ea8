"""Fixtures for the LLM judge tests: the fake OpenAI server, fast retry policies and a client factory."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # so `tests.fakes` and `service` import however pytest is started
    sys.path.insert(0, str(_ROOT))

from tests.fakes.openai_server import FakeOpenAIServer, openai_server  # noqa: E402, F401


@pytest.fixture
def fake(openai_server: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:  # noqa: F811
    openai_server.reset()
    yield openai_server
    openai_server.reset()
