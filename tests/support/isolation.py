"""What keeps parallel test processes (pytest-xdist workers) apart, each worker's own Redis test database, and what
they share: artifacts built once per run."""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["DEFAULT_REDIS_URL", "built_once", "redis_test_url", "worker_index"]

# the suite's Redis database when the shell names none (scripts/test.sh passes TRISK_TEST_REDIS_URL on)
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
# db 0 is the service's own default: a test never writes there
_LOWEST_DB = 1


def worker_index(worker: str | None = None) -> int:
    """0 in a serial run; N in pytest-xdist's worker ``gwN`` (xdist names it in PYTEST_XDIST_WORKER)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    found = re.fullmatch(r"gw(\d+)", name)
    return int(found.group(1)) if found else 0


def redis_test_url(base: str, index: int) -> str:
    """The Redis URL of worker ``index``: the base database counted down by the index (a serial run and worker 0 use
    the base itself), so ``-n 4`` on the default db 15 uses 15 to 12. Counting down keeps within Redis's 16
    databases; a base too low for the workers is refused rather than reaching db 0."""
    found = re.fullmatch(r"(redis://[^/]*)(?:/(\d*))?", base)
    if found is None:
        raise ValueError(f"TRISK_TEST_REDIS_URL must be redis://host:port/db, not {base!r}")
    db = int(found.group(2) or 0) - index
    if db < _LOWEST_DB:
        raise ValueError(
            f"TRISK_TEST_REDIS_URL {base!r} leaves no database >= {_LOWEST_DB} for xdist worker gw{index}: "
            "name a higher db (worker N uses the db minus N)"
        )
    return f"{found.group(1)}/{db}"


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``<run folder>/<name>``, made by ``build(path)`` in the first process that asks (under a lock) and read as it
    is by the others: the folder of the whole run (under xdist, the parent of the workers' own folders), so the
    workers of one run share it and another run never sees it. ``build`` must write atomically or fully before it
    returns; the lock makes a second worker wait for it."""
    base = tmp_path_factory.getbasetemp()
    run = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
    path = run / name
    with open(run / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.exists():
            build(path)
    return path
