"""The Redis the manifests deploy, run for real: k8s/redis.yaml's redis.conf on a private redis-server.

Checks what the StatefulSet promises: acknowledged writes survive a kill (AOF), a full Redis refuses writes instead of
evicting, and the queue length the autoscaler reads counts the ARQ queue's jobs.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.deploy.support import manifest_docs
from tests.support.evaluation import free_port

PASSWORD = "test-password"

# KEDA's redis scaler reads the length of `listName` with this script (pkg/scalers/redis_scaler.go,
# getRedisListLength, as of KEDA 2.x): it dispatches on the key's TYPE, so a sorted set is counted with ZCARD
KEDA_LENGTH_SCRIPT = """
local listName = KEYS[1]
local listType = redis.call('type', listName).ok
local cmd = {zset = 'zcard', set = 'scard', list = 'llen', hash = 'hlen', none = 'llen'}
return redis.call(cmd[listType], listName)
"""


@dataclass
class Server:
    conf: Path
    data: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self, *overrides: str) -> redis.Redis:
        # the manifest's file and command; only where it listens (here) and writes (the fixture) differ from the pod's
        cmd = ["redis-server", str(self.conf), "--port", str(self.port), "--bind", "127.0.0.1", *overrides]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, password=PASSWORD)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return client
            except (redis.ConnectionError, redis.BusyLoadingError):
                assert time.monotonic() < deadline, "redis-server did not start with the manifest's config"
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL: no shutdown fsync, as when a node dies
        self.proc.wait(timeout=10)


def _statefulset() -> Any:
    return next(d for d in manifest_docs() if d.kind == "StatefulSet" and d.name == "trisk-redis")


def _mapped(text: str, paths: dict[str, Path]) -> str:
    for pod_path, here in paths.items():
        text = text.replace(pod_path, str(here))
    return text


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    assert shutil.which("redis-server"), "redis-server is needed (apt-get install redis-server)"
    (doc,) = [d for d in manifest_docs() if d.kind == "ConfigMap" and d.name == "trisk-redis"]
    conf = tmp_path / "redis.conf"
    (tmp_path / "data").mkdir()
    # the pod's mounts: the Secret's file, the memory-backed folder the init container writes the password file into
    paths = {"/etc/redis-secret": tmp_path / "secret", "/run/redis-auth": tmp_path / "auth"}
    for folder in paths.values():
        folder.mkdir()
    (paths["/etc/redis-secret"] / "REDIS_PASSWORD").write_text(PASSWORD, encoding="utf-8")
    (init,) = _statefulset().body["spec"]["template"]["spec"]["initContainers"]
    res = subprocess.run(_mapped_command(init["command"], paths), capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    # redis-server changes to `dir` while reading the file, before any command-line option: point it here
    text, n = re.subn(r"(?m)^dir .*$", f"dir {tmp_path / 'data'}", doc.body["data"]["redis.conf"])
    assert n == 1, "redis.conf must set dir (the PVC's mount path)"
    conf.write_text(_mapped(text, paths), encoding="utf-8")
    srv = Server(conf=conf, data=tmp_path / "data", port=free_port())
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.proc.terminate()
        srv.proc.wait(timeout=10)


def _mapped_command(command: list[str], paths: dict[str, Path]) -> list[str]:
    return [_mapped(part, paths) for part in command]


def test_the_password_is_in_a_file_not_on_the_command_line(server: Server, tmp_path: Path) -> None:
    server.start()
    assert server.proc is not None
    cmdline = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes()
    assert PASSWORD.encode() not in cmdline
    environ = Path(f"/proc/{server.proc.pid}/environ").read_bytes()
    assert PASSWORD.encode() not in environ
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=server.port).ping()
    # the readiness probe's own command, from the mounted Secret, answers PONG
    (container,) = _statefulset().body["spec"]["template"]["spec"]["containers"]
    probe = _mapped_command(container["readinessProbe"]["exec"]["command"], {"/etc/redis-secret": tmp_path / "secret"})
    probe[-1] = probe[-1].replace("redis-cli ping", f"redis-cli -p {server.port} ping")
    assert subprocess.run(probe, capture_output=True, check=False, timeout=10).returncode == 0


def test_acknowledged_writes_survive_a_kill(server: Server) -> None:
    client = server.start()
    assert client.config_get("appendonly")["appendonly"] == "yes"
    client.set("verdict-queue-probe", "kept")
    client.zadd("trisk:queue", {"job-1": 1.0})
    server.kill()  # at once, no wait for a later fsync: appendfsync always wrote them before answering
    client = server.start()
    assert client.get("verdict-queue-probe") == b"kept"
    assert client.zcard("trisk:queue") == 1


def test_a_full_redis_refuses_writes_instead_of_evicting(server: Server) -> None:
    client = server.start("--maxmemory", "2mb")  # the manifest's policy, a limit small enough to reach
    assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    client.set("first", "x")
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for i in range(10_000):
            client.set(f"fill-{i}", "y" * 1024)
    assert client.get("first") == b"x", "an old key was evicted"


def test_the_autoscaler_counts_the_arq_queue(server: Server) -> None:
    from arq import create_pool
    from arq.connections import RedisSettings

    client = server.start()
    queue = "trisk:queue"

    async def enqueue() -> None:
        pool = await create_pool(RedisSettings(port=server.port, password=PASSWORD), default_queue_name=queue)
        for i in range(3):
            await pool.enqueue_job("assess_cheap", f"a{i}", _job_id=f"a{i}:cheap")
        await pool.enqueue_job("deliver_callback", "a0", _job_id="a0:callback", _defer_by=60)
        await pool.aclose()

    asyncio.run(enqueue())
    assert client.type(queue) == b"zset"
    # deferred jobs (callback retries) count too: the scaler sees work that is due later as well
    assert client.eval(KEDA_LENGTH_SCRIPT, 1, queue) == 4


def test_make_up_starts_a_redis_that_refuses_writes_at_its_limit(tmp_path: Path) -> None:
    """scripts/redis.sh, run for real on a free port: TRISK_REDIS_MAXMEMORY becomes Redis's maxmemory, so a full one
    answers OOM (noeviction) instead of growing until the kernel kills it."""
    root = Path(__file__).resolve().parents[2]
    port = free_port()
    env = {"PATH": os.environ["PATH"], "REDIS_URL": f"redis://127.0.0.1:{port}/0", "TRISK_REDIS_MAXMEMORY": "3mb"}
    res = subprocess.run(
        ["bash", str(root / "scripts" / "redis.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    client = redis.Redis(port=port)
    try:
        assert client.config_get("maxmemory")["maxmemory"] == str(3 << 20)
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for i in range(10_000):
                client.set(f"fill-{i}", "y" * 1024)
    finally:
        client.shutdown(nosave=True)
