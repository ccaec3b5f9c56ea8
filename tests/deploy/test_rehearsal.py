"""A rehearsal on one machine of what the cluster does: PostgreSQL (TLS, verify-full), Redis (the manifest's
redis.conf, its password from the init container's file), the API and a worker, each in a network namespace of its
own on one bridge, started with the manifests' commands, ConfigMap settings and secret files, the names of the
manifests (trisk-redis, the database's host) resolved by per-namespace hosts files (``ip netns exec`` mounts
``/etc/netns/<name>/hosts``).

Then what a cluster lives through: every process SIGKILLed and restarted (the verdict written before survives, the
assessments complete); a worker cut off from Redis mid-job (the partition outlasts the job's lease; the job ends
complete, once); the API cut off from PostgreSQL mid-verdict (a clear 503 within the connection's timeout and no
record; the verdict after the partition is recorded once); a rollback to the previous release's code from git
history (tests/durable/rollback_base.txt) on the same database, which still serves the verdict.

The processes run from this checkout's venv with the image's environment mapped (tests/deploy/test_image.py proves
the image's own install and entry commands); traffic goes only to the namespaces made here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.support import ROOT, containers, find, manifest_docs, parse_dockerfile, pod_spec
from tests.durable.test_rollback import _checkout, rollback_base
from tests.support.postgres_server import CertificateAuthority, PrivatePostgres

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(100)

DOCS = manifest_docs()
DB_HOST = "postgres.example.internal"  # the host of secrets.env.example's URL
EXAMPLE = json.loads((ROOT / "openapi" / "examples" / "assessment-an4.1.json").read_text(encoding="utf-8"))


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=60)


@dataclass
class Network:
    """Hosts in network namespaces joined by a bridge in a namespace of its own; this process reaches them through
    one veth of its own. ``cut``/``heal`` take a host's port on the bridge down and up: a partition, packets dropped
    without a reset, as a failed link drops them."""

    tag: str
    subnet: str
    hosts: dict[str, str] = field(default_factory=dict)  # name -> address
    names: dict[str, str] = field(default_factory=dict)  # host name -> address, for every host's hosts file

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def create(self) -> None:
        _run("ip", "netns", "add", self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        # this process's own port on the bridge
        _run("ip", "link", "add", f"{self.tag}c", "type", "veth", "peer", "name", "pc")
        _run("ip", "link", "set", "pc", "netns", self.switch)
        _run("ip", "-n", self.switch, "link", "set", "pc", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.subnet}.100/24", "dev", f"{self.tag}c")
        _run("ip", "link", "set", f"{self.tag}c", "up")

    def add(self, host: str, number: int, *aliases: str) -> str:
        ns, address = self.ns(host), f"{self.subnet}.{number}"
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", f"{self.tag}{number}", "type", "veth", "peer", "name", f"p{number}")
        _run("ip", "link", "set", f"{self.tag}{number}", "netns", ns)
        _run("ip", "link", "set", f"p{number}", "netns", self.switch)
        _run("ip", "-n", self.switch, "link", "set", f"p{number}", "master", "br0", "up")
        _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", f"{self.tag}{number}")
        _run("ip", "-n", ns, "link", "set", f"{self.tag}{number}", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        self.hosts[host] = address
        for name in (host, *aliases):
            self.names[name] = address
        return address

    def write_hosts_files(self) -> None:
        lines = ["127.0.0.1 localhost", *(f"{a} {n}" for n, a in self.names.items())]
        for host in self.hosts:
            folder = Path("/etc/netns") / self.ns(host)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text("\n".join(lines) + "\n", encoding="ascii")

    def port_of(self, host: str) -> str:
        number = self.hosts[host].rsplit(".", 1)[1]
        return f"p{number}"

    def cut(self, host: str) -> None:
        _run("ip", "-n", self.switch, "link", "set", self.port_of(host), "down")

    def heal(self, host: str) -> None:
        _run("ip", "-n", self.switch, "link", "set", self.port_of(host), "up")

    def destroy(self) -> None:
        for host in self.hosts:
            _run("ip", "netns", "delete", self.ns(host), check=False)
            shutil.rmtree(Path("/etc/netns") / self.ns(host), ignore_errors=True)
        _run("ip", "link", "delete", f"{self.tag}c", check=False)
        _run("ip", "netns", "delete", self.switch, check=False)


@dataclass
class Proc:
    """A long-running process of the rehearsal in a host's namespace, its output in a log file."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        fh = self.log.open("ab")
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdout=fh, stderr=subprocess.STDOUT)
        fh.close()
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]


def _can_make_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    # a name of this probe's own: a fixed one made by a parallel run (another xdist worker) would fail "File exists"
    name = f"trisk-probe-{secrets.token_hex(4)}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"no network namespace can be made here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
    return None


@pytest.fixture()
def network() -> Iterator[Network]:
    reason = _can_make_namespaces()
    if reason:
        pytest.skip(reason)
    tag = f"tr{secrets.token_hex(2)}"
    # a /24 of the 10.x range inside namespaces made here, picked per run so parallel runs never share one
    net = Network(tag=tag, subnet=f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(250)}")
    try:
        net.create()
        yield net
    finally:
        net.destroy()


def _config() -> dict[str, str]:
    return dict(find(DOCS, "ConfigMap", "trisk-config").body["data"])


def _redis_conf() -> str:
    return str(find(DOCS, "ConfigMap", "trisk-redis").body["data"]["redis.conf"])


def _mapped(text: str, paths: dict[str, Path]) -> str:
    for pod_path, here in paths.items():
        text = text.replace(pod_path, str(here))
    return text


class Cluster:
    """The rehearsal's hosts and processes, the way the manifests run them."""

    def __init__(self, root: Path, net: Network, index: Path) -> None:
        self.root, self.net = root, net
        self.secrets = root / "secrets"
        self.secrets.mkdir()
        self.ca = CertificateAuthority(root / "ca", names=[DB_HOST], addresses=[]).make()
        (root / "pg-ca").mkdir()
        shutil.copy(self.ca.folder / "ca.crt", root / "pg-ca" / "ca.crt")
        self.redis_password = secrets.token_hex(16)
        (self.secrets / "REDIS_PASSWORD").write_text(self.redis_password, encoding="ascii")
        # connect_timeout: a partitioned database fails a request's connection quickly (the example URL has none)
        url = f"postgresql://trisk:{secrets.token_hex(8)}@{DB_HOST}:5432/trisk?sslmode=verify-full&connect_timeout=5"
        (self.secrets / "TRISK_DATABASE_URL").write_text(url, encoding="ascii")
        (self.secrets / "TRISK_LLM_API_KEY").write_text("", encoding="ascii")
        self.index = index
        self.home = root / "home"
        self.home.mkdir()
        self.procs: dict[str, Proc] = {}
        self.pg: PrivatePostgres | None = None

    # -- the hosts
    def start_postgres(self) -> None:
        self.pg = PrivatePostgres(
            self.root / "pg", port=5432, listen=self.net.hosts["db"], netns=self.net.ns("db"), ca=self.ca
        )
        self.pg.init().start()
        self.pg.create_database("trisk")

    def start_redis(self) -> Proc:
        sts = find(DOCS, "StatefulSet", "trisk-redis")
        (init,) = pod_spec(sts)["initContainers"]
        (redis_c,) = pod_spec(sts)["containers"]
        paths = {
            "/etc/redis-secret": self.secrets,
            "/run/redis-auth": self.root / "redis-auth",
            "/etc/redis": self.root,
        }
        (self.root / "redis-auth").mkdir(exist_ok=True)
        (self.root / "redis-data").mkdir(exist_ok=True)
        _run(*_mapped_all(init["command"], paths))
        conf = _mapped(_redis_conf(), paths).replace("dir /data", f"dir {self.root / 'redis-data'}")
        (self.root / "redis.conf").write_text(conf, encoding="utf-8")
        cmd = [*_in(self.net.ns("redis")), *_mapped_all(redis_c["command"], paths), "--bind", self.net.hosts["redis"]]
        return self._proc("redis", cmd, dict(os.environ), self.root)

    def env(self, container: dict[str, Any], *, code: Path | None = None) -> dict[str, str]:
        """The container's environment: the image's ENV (paths mapped), the ConfigMap, then its own env, with the
        pod's mounts mapped to folders here."""
        paths = {"/etc/trisk/secrets": self.secrets, "/etc/trisk/postgres-ca": self.root / "pg-ca"}
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        image_env = parse_dockerfile().final.env()
        for key, value in image_env.items():
            if key.startswith(("TRISK_", "HF_", "TRANSFORMERS_", "OMP_", "PYTHON")):
                env[key] = value
        env.update(HOME=str(self.home), TRISK_MODELS_DIR=str((code or ROOT) / "models"))
        env["TRISK_INDEX_PATH"] = str(self.index)
        env["TRISK_DB_PATH"] = str(self.root / "unused.db")
        env.update(_config())
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = _mapped(var["value"], paths)
            elif "resourceFieldRef" in var.get("valueFrom", {}):
                env[var["name"]] = "1"
        if code is not None:
            env["PYTHONPATH"] = str(code)
        return env

    def _proc(self, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> Proc:
        proc = Proc(name, cmd, env, cwd, self.root / f"{name}.log").start()
        self.procs[name] = proc
        return proc

    def migrate(self, code: Path | None = None) -> subprocess.CompletedProcess[str]:
        init = _container("trisk-api", "db-upgrade")
        cmd = [*_in(self.net.ns("api")), *_entry(init["command"], code)]
        return subprocess.run(
            cmd, env=self.env(init, code=code), cwd=code or ROOT, capture_output=True, text=True, timeout=120
        )

    def start_api(self, code: Path | None = None, name: str = "api") -> Proc:
        api = _container("trisk-api", "api")
        cmd = parse_dockerfile().final.all("CMD")[-1]
        return self._proc(
            name, [*_in(self.net.ns("api")), *_entry(json.loads(cmd), code)], self.env(api, code=code), code or ROOT
        )

    def start_worker(self) -> Proc:
        worker = _container("trisk-worker", "worker")
        return self._proc("worker", [*_in(self.net.ns("worker")), *worker["command"]], self.env(worker), ROOT)

    def admin_key(self) -> str:
        api = _container("trisk-api", "api")
        cmd = [*_in(self.net.ns("api")), "trisk", "keys", "create", "--tenant", "ops", "--name", "admin"]
        res = subprocess.run(
            [*cmd, "--scopes", "admin"], env=self.env(api), cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout.strip().splitlines()[-1]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        if self.pg is not None:
            self.pg.stop()


def _in(ns: str) -> list[str]:
    return ["ip", "netns", "exec", ns]


def _mapped_all(cmd: list[str], paths: dict[str, Path]) -> list[str]:
    return [_mapped(part, paths) for part in cmd]


def _entry(cmd: list[str], code: Path | None) -> list[str]:
    """An entry command (``trisk ...``) of this checkout, or of the release in ``code`` (its own ``service``)."""
    if code is None or cmd[0] != "trisk":
        return cmd
    return [sys.executable, "-m", "service.cli", *cmd[1:]]


def _container(workload: str, name: str) -> dict[str, Any]:
    doc = find(DOCS, "Deployment", workload)
    return next(c for c in containers(doc) if c["name"] == name)


class Client:
    def __init__(self, base: str, token: str) -> None:
        self.base, self.headers = base, {"Authorization": f"Bearer {token}"}

    def get(self, path: str, timeout: float = 10) -> httpx.Response:
        return httpx.get(self.base + path, headers=self.headers, timeout=timeout)

    def post(self, path: str, body: Any, timeout: float = 30) -> httpx.Response:
        return httpx.post(self.base + path, headers=self.headers, json=body, timeout=timeout)

    def wait_ready(self, proc: Proc, budget: float = 120) -> None:
        deadline = time.monotonic() + budget
        while True:
            assert proc.alive(), f"{proc.name} exited:\n{proc.tail()}"
            try:
                if httpx.get(self.base + "/health/ready", timeout=3).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{proc.name} not ready:\n{proc.tail()}"
            time.sleep(0.3)

    def wait_done(self, aids: list[str], budget: float = 240) -> list[dict[str, Any]]:
        deadline = time.monotonic() + budget
        while True:
            try:
                got = [self.get(f"/v1/assessments/{a}").json() for a in aids]
            except (httpx.TransportError, json.JSONDecodeError):
                got = []
            if got and all(g.get("status") in ("done", "failed") for g in got):
                return got
            assert time.monotonic() < deadline, f"not done: {[g.get('status') for g in got]}"
            time.sleep(0.5)

    def queue_items(self) -> list[dict[str, Any]]:
        r = self.get("/v1/review/queue?scope=all&status=any&limit=500")
        assert r.status_code == 200, r.text
        return list(r.json()["items"])


def _submit(client: Client, n: int = 1) -> list[str]:
    if n == 1:
        r = client.post("/v1/assessments", EXAMPLE)
        assert r.status_code == 202, r.text
        return [r.json()["id"]]
    r = client.post("/v1/batches", {"items": [EXAMPLE] * n})
    assert r.status_code == 202, r.text
    return list(r.json()["assessment_ids"])


def _complete_once(client: Client, aids: list[str]) -> None:
    """Every assessment done, one result per candidate, each candidate exactly once in the review queue."""
    for got in client.wait_done(aids):
        assert got["status"] == "done", got
        assert sorted(c["id"] for c in got["candidates"]) == sorted(c["id"] for c in EXAMPLE["candidates"])
    want = len(aids) * len(EXAMPLE["candidates"])
    deadline = time.monotonic() + 30  # the review items follow the final result (the tail), a moment later
    while True:
        keys = [(it["assessment_id"], it["candidate_id"]) for it in client.queue_items() if it["assessment_id"] in aids]
        if len(keys) >= want or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(keys) == len(set(keys)) == want, keys


def _verdict(client: Client, item_id: str, timeout: float = 60) -> httpx.Response:
    """A verdict as the client's key (the key names the reviewer)."""
    return client.post(f"/v1/review/items/{item_id}/verdict", {"label": "MAJOR"}, timeout=timeout)


def _verdicts(client: Client, item_id: str) -> list[dict[str, Any]]:
    r = client.get(f"/v1/review/items/{item_id}/verdicts")
    assert r.status_code == 200, r.text
    return list(r.json())


def test_a_cluster_rehearsed_in_network_namespaces(network: Network, sn12_index: Any) -> None:
    root = Path(tempfile.mkdtemp(prefix="trisk-rehearsal-"))
    root.chmod(0o755)
    index = sn12_index.save(root / "index" / "pli-sutta.trisk")
    network.add("db", 2, DB_HOST)
    network.add("redis", 3, "trisk-redis")
    api_address = network.add("api", 4)
    network.add("worker", 5)
    network.write_hosts_files()
    cluster = Cluster(root, network, index)
    try:
        cluster.start_postgres()
        cluster.start_redis()
        # the init container, then the API and a worker as their Deployments run them
        migrated = cluster.migrate()
        assert migrated.returncode == 0 and "upgraded" in migrated.stdout, migrated.stdout + migrated.stderr
        token = cluster.admin_key()
        client = Client(f"http://{api_address}:8000", token)
        api = cluster.start_api()
        client.wait_ready(api)
        worker = cluster.start_worker()
        first = _submit(client)
        _complete_once(client, first)
        item_id = next(it["id"] for it in client.queue_items() if it["assessment_id"] == first[0])
        recorded = _verdict(client, item_id)
        assert recorded.status_code == 201, recorded.text
        ana = recorded.json()["reviewer"]

        # -- every process killed and restarted
        worker.kill()
        worker = cluster.start_worker()
        api.kill()
        api = cluster.start_api()
        client.wait_ready(api)
        cluster.procs["redis"].kill()
        cluster.start_redis()
        assert cluster.pg is not None
        cluster.pg.kill()
        cluster.pg.start()
        client.wait_ready(api)
        assert [v["reviewer"] for v in _verdicts(client, item_id)] == [ana]
        second = _submit(client)
        _complete_once(client, first + second)

        # -- a worker cut off from Redis mid-job, longer than a job's lease
        batch = _submit(client, 4)
        deadline = time.monotonic() + 120
        while not any(client.get(f"/v1/assessments/{a}").json()["status"] != "pending" for a in batch):
            assert time.monotonic() < deadline, "no batch item started"
            time.sleep(0.2)
        network.cut("worker")
        time.sleep(20)  # past TRISK_JOB_LEASE_SECONDS (15 s): the job's lease lapses while its worker is away
        network.heal("worker")
        _complete_once(client, batch)
        statuses = [client.get(f"/v1/assessments/{a}").json()["status"] for a in batch]
        print(f"batch complete after the worker's partition: {statuses}")
        assert worker.alive(), f"the worker gave up instead of waiting for Redis:\n{worker.tail()}"

        # -- the API cut off from PostgreSQL mid-verdict: a clear error, nothing written; then recorded once
        other = next(it["id"] for it in client.queue_items() if it["assessment_id"] == second[0])
        network.cut("db")
        t0 = time.monotonic()
        refused = _verdict(client, other)
        seconds = time.monotonic() - t0
        network.heal("db")
        assert refused.status_code == 503 and refused.headers["content-type"].startswith("application/problem+json")
        assert seconds < 40, f"the verdict waited {seconds:.0f}s for a database that was cut off"
        print(f"verdict refused {seconds:.1f}s after the API lost the database: {refused.json()['detail']}")
        deadline = time.monotonic() + 60
        while _verdict_count(client, other) is None:
            assert time.monotonic() < deadline, "the API did not reach the database again"
            time.sleep(1)
        assert _verdict_count(client, other) == 0, "a refused verdict was recorded"
        assert _verdict(client, other).status_code == 201
        assert [v["reviewer"] for v in _verdicts(client, other)] == [ana]

        # -- rollback: the previous release's code on the same database serves the verdicts written before
        base = rollback_base()
        old = _checkout(base, root / f"release-{base[:10]}")
        api.stop()
        rolled = cluster.migrate(code=old)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        old_api = cluster.start_api(code=old, name="api-previous")
        client.wait_ready(old_api)
        assert [v["reviewer"] for v in _verdicts(client, item_id)] == [ana]
        assert [v["reviewer"] for v in _verdicts(client, other)] == [ana]
        assert old_api.alive()
    except BaseException:
        # what each process said last: the only account of a failure once the folder is gone
        for name, proc in cluster.procs.items():
            print(f"----- {name} (last 3,000 characters of its log)\n{proc.tail()}")
        raise
    finally:
        cluster.stop_all()
        subprocess.Popen(["rm", "-rf", str(root)], start_new_session=True)


def _verdict_count(client: Client, item_id: str) -> int | None:
    try:
        r = client.get(f"/v1/review/items/{item_id}/verdicts")
    except httpx.TransportError:
        return None
    return len(r.json()) if r.status_code == 200 else None
