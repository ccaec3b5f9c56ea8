"""The evaluation run (``bench/evaluate.py``) stops the private stack it started even when terminated (SIGTERM)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support import evaluation


class _FakeStack:
    closed = 0

    def __init__(self, redis_url: str | None, workers: int) -> None:
        self.url = "http://127.0.0.1:9"
        self.key = "trisk_000000000000_" + "A" * 43

    def close(self) -> None:
        _FakeStack.closed += 1


def test_sigterm_during_a_run_closes_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    def terminated(bench: object, url: str, checks: object, key: str) -> list[object]:
        os.kill(os.getpid(), signal.SIGTERM)  # what a CI timeout or `kill` does mid-run
        raise AssertionError("SIGTERM did not interrupt the run")

    def unhandled(signum: int, frame: object) -> None:
        raise RuntimeError("SIGTERM reached the default handler: the stack would be left running")

    previous = signal.signal(signal.SIGTERM, unhandled)  # fails the test cleanly instead of killing pytest
    monkeypatch.setattr(evaluation, "load_benchmark", lambda *a: object())
    monkeypatch.setattr(evaluation, "Stack", _FakeStack)
    monkeypatch.setattr(evaluation, "evaluate", terminated)
    try:
        with pytest.raises(SystemExit) as exc:
            evaluation.run("bench", "root", None, None, 1, None, None, None)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exc.value.code == 128 + signal.SIGTERM and _FakeStack.closed == 1
