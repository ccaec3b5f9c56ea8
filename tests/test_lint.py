"""The codebase keeps its own rules: ruff (line length 120) everywhere, mypy clean on service/ and workers/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(45)

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff() -> None:
    res = _run("ruff", "check", "service", "workers", "bench", "tests")
    assert res.returncode == 0, res.stdout + res.stderr


def test_ruff_format() -> None:
    res = _run("ruff", "format", "--check", "service", "workers", "bench", "tests")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy() -> None:
    res = _run("mypy", "--cache-dir", str(ROOT / ".mypy_cache"))
    assert res.returncode == 0, res.stdout + res.stderr
