"""A worker that cannot load its judge panel refuses to start, saying why (never judging silently without it)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import models_with_panel

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(30)

REPO = Path(__file__).resolve().parents[2]


def _worker(models: Path, panel: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "REDIS_URL": TEST_REDIS_URL,
        "TRISK_QUEUE_NAME": f"trisk:test:{uuid.uuid4().hex}:q",
        "TRISK_MODELS_DIR": str(models),
        "TRISK_LLM_PANEL": panel,
        "TRISK_LLM_BASE_URL": "http://127.0.0.1:9/v1",
        "TRISK_LOG_FORMAT": "text",
    }
    return subprocess.run(
        [sys.executable, "-m", "arq", "workers.settings.WorkerSettings", "--burst"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_worker_whose_panel_does_not_load_refuses_to_start(tmp_path: Path) -> None:
    bad = {"name": "broken", "version": "1", "judges": [{"id": "j", "model": "my-model", "family": "opneai"}]}
    models = models_with_panel(tmp_path, bad)
    res = _worker(models, "broken")
    assert res.returncode != 0, res.stderr[-2000:]
    assert "worker refuses to start: judge panel 'broken'" in res.stderr, res.stderr[-2000:]
    assert "unknown families ['opneai']" in res.stderr
    missing = _worker(models, "nosuchpanel")
    assert missing.returncode != 0 and "no judge panel 'nosuchpanel'" in missing.stderr, missing.stderr[-2000:]


def test_a_worker_with_a_local_family_panel_starts(tmp_path: Path) -> None:
    smol = {"name": "smol", "version": "1", "judges": [{"id": "j", "model": "smollm2", "family": "huggingface"}]}
    res = _worker(models_with_panel(tmp_path, smol), "smol")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "refuses" not in res.stderr
