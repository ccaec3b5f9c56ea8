"""Fixtures: the fake OpenAI-protocol server (``fake`` resets it per test)."""

from __future__ import annotations

from tests.fakes.openai_server import fake, openai_server  # noqa: F401
