"""A private ``redis-server`` on a free port, for tests that kill processes or Redis itself and meet nobody's data."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.support.evaluation import free_port

__all__ = ["private_redis_server"]


@contextmanager
def private_redis_server(folder: Path) -> Iterator[str]:
    """Start ``redis-server`` (nothing kept on disk) writing only into ``folder``; yield its URL; stop it."""
    assert shutil.which("redis-server"), "redis-server is needed (apt-get install redis-server)"
    port = free_port()
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    out = subprocess.DEVNULL
    proc = subprocess.Popen([*cmd, "--dir", str(folder)], stdout=out, stderr=out, umask=0o077)  # files: owner only
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None and time.monotonic() < deadline, "the private redis-server did not start"
            time.sleep(0.05)
    try:
        yield url
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=10)
