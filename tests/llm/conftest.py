"""Fixtures for the LLM judge tests: the fake OpenAI server (reset per test as ``fake``)."""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # so `tests.fakes` and `service` import however pytest is started
    sys.path.insert(0, str(_ROOT))

from tests.fakes.openai_server import fake, openai_server  # noqa: E402, F401
