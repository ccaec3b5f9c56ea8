"""A private redis-server on a port of its own, persisted as the service's Redis is: for tests and benches that stop,
kill and restart Redis under the service (never the shared one).

The persistence the service expects of its Redis is written here once for Python; ``scripts/redis.sh`` (``make up``)
and ``k8s/redis.yaml`` say the same, and tests/deploy/test_redis_conf.py checks that all three agree.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from tests.support.evaluation import free_port

__all__ = ["APPENDFSYNC", "RedisServer", "persistence_args"]

# every acknowledged write is on disk before Redis answers; chosen from bench/bench_redis_durability.py (see README,
# "Durability"): a SIGKILL loses nothing either way, a node crash loses up to ~1 s of writes with everysec, and the
# service writes far below what `always` sustains here
APPENDFSYNC = "always"


def persistence_args(appendfsync: str = APPENDFSYNC) -> list[str]:
    """redis-server options: everything in the AOF, no RDB snapshots, a full Redis refuses writes (never evicts)."""
    return ["--appendonly", "yes", "--appendfsync", appendfsync, "--save", "", "--maxmemory-policy", "noeviction"]


class RedisServer:
    """``redis-server`` on a free port with its AOF in ``data_dir``; ``start`` again after ``stop``/``kill`` reuses
    the same port and directory, as a restarted pod does."""

    def __init__(self, data_dir: Path, *, appendfsync: str = APPENDFSYNC, extra: tuple[str, ...] = ()) -> None:
        assert shutil.which("redis-server"), "redis-server is needed (apt-get install redis-server)"
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)  # the AOF holds every tenant's assessments
        self.port = free_port()
        self.args = [*persistence_args(appendfsync), *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def start(self, timeout: float = 20.0, *, wait: bool = True) -> redis.Redis:
        """Start and wait until it answers (a large AOF is replayed first: Redis says LOADING until then)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)]
        cmd += ["--logfile", str(self.data_dir / "redis.log"), *self.args]
        # umask 077: the AOF directory and files it writes are its owner's only
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, umask=0o077)
        return self.wait_ready(timeout) if wait else self.client()

    def wait_ready(self, timeout: float = 20.0) -> redis.Redis:
        """Until it answers PING (not LOADING)."""
        assert self.proc is not None
        client = self.client()
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return client
            except (redis.ConnectionError, redis.BusyLoadingError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server on {self.port} did not start:\n{log}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """SIGTERM: Redis flushes and fsyncs the AOF before it exits (a pod's graceful stop)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: no shutdown work at all (the process dies as on an OOM kill)."""
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
