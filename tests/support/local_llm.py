"""A real local OpenAI-protocol server (llama.cpp serving the `local` profile's model, ``scripts/local-llm.sh``) for
opt-in tests.

It proves the protocol path against a real server; its judge scores are worth nothing, so tests using it assert on
behaviour (an answer arrives, statuses are recorded, deadlines hold), never on what the model judged.

``local_llm()`` reuses the server that ``scripts/local-llm.sh start`` runs, if one answers, and never stops it;
otherwise it starts one of its own on a free port, waits for ``/v1/models`` and stops it on exit. Without the
cached build it raises ``LocalLLMUnavailable`` unless building is allowed (``TRISK_LOCAL_LLM_BUILD=1`` or
``build=True``): the build compiles llama.cpp, minutes of both cores, so it never happens by accident. The
``local_llm_server`` fixture turns that into a pytest skip with the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service.core.judges.llm import Endpoint
from tests.fakes.openai_server import closed_port_url

__all__ = [
    "BUILD_ENV",
    "SCRIPT",
    "LocalLLM",
    "LocalLLMUnavailable",
    "is_built",
    "local_llm",
    "local_llm_server",
    "profile_env",
    "wait_until_ready",
]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "local-llm.sh"
BUILD_ENV = "TRISK_LOCAL_LLM_BUILD"
# loading a 98 MB model takes about a second; the margin is for a machine whose two cores are busy
START_TIMEOUT = 120.0
LOG_TAIL_LINES = 30


class LocalLLMUnavailable(RuntimeError):
    """The local server cannot be had without a build that was not allowed; the message says how to allow it."""


@dataclass(frozen=True)
class LocalLLM:
    """A running local server: ``base_url`` ends in ``/v1``; ``log`` is None for a server someone else runs."""

    base_url: str
    model: str
    log: Path | None

    def endpoint(self) -> Endpoint:
        return Endpoint(self.base_url, "", self.model)


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)


def _output(*args: str) -> str:
    res = _script(*args)
    if res.returncode != 0:
        raise RuntimeError(f"{SCRIPT.name} {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout.strip()


def is_built() -> bool:
    """True when the cached build is complete (pinned versions, server importable, model file present)."""
    return _script("check").returncode == 0


def _answers(base_url: str, model: str | None = None) -> bool:
    """The server answers (and, given ``model``, serves that model: a server started for another one is not it)."""
    try:
        response = httpx.get(base_url.rstrip("/") + "/models", timeout=2.0)
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    return model is None or model in {m.get("id") for m in response.json().get("data", [])}


def profile_env(base_url: str) -> dict[str, str]:
    """The settings ``scripts/local-llm.sh env`` prints for a stack judging with the server at ``base_url`` (what
    README tells a user to run), as variables."""
    port = base_url.rsplit(":", 1)[1].split("/", 1)[0]
    env: dict[str, str] = {}
    for line in _output("env", "--port", port).splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
    return env


def _log_tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return "(no log)"
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:]) or "(log is empty)"


def wait_until_ready(
    base_url: str, *, process: subprocess.Popen[bytes] | None, log: Path | None, timeout: float = START_TIMEOUT
) -> float:
    """Poll ``/v1/models`` until it answers 200; returns the seconds waited. Raises with the log tail when the
    process exits first (RuntimeError) or nothing answers in time (TimeoutError)."""
    started = time.monotonic()
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"the local model server exited with code {process.returncode} before answering at {base_url}; "
                f"log {log}:\n{_log_tail(log)}"
            )
        if _answers(base_url):
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"no answer from {base_url}/models after {timeout:g}s; log {log}:\n{_log_tail(log)}")
        time.sleep(0.25)


def _ensure_built(build: bool | None) -> None:
    if is_built():
        return
    if build is None:
        build = os.environ.get(BUILD_ENV) == "1"
    if not build:
        raise LocalLLMUnavailable(
            f"the local llama.cpp server is not built in {_output('dir')}: run `scripts/local-llm.sh install` "
            f"(compiles llama.cpp once per machine) or set {BUILD_ENV}=1 (as `make test-llm` does)"
        )
    # the script prints its progress and the build time; stdout/stderr pass through to the caller
    res = subprocess.run([str(SCRIPT), "install"], check=False)
    if res.returncode != 0:
        raise RuntimeError(f"scripts/local-llm.sh install failed ({res.returncode}); log: {_output('dir')}/build.log")


def _die_with_parent() -> None:
    # a test run killed hard must not leave a model server behind on a random port (Linux only; best effort)
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextlib.contextmanager
def local_llm(*, build: bool | None = None, timeout: float = START_TIMEOUT) -> Iterator[LocalLLM]:
    """The local server for the duration of the block (see the module docstring)."""
    model = _output("model")
    if _script("status").returncode == 0:
        url = _output("url")
        if _answers(url, model):
            yield LocalLLM(url, model, None)
            return
    _ensure_built(build)
    port = int(closed_port_url().rsplit(":", 1)[1].split("/", 1)[0])
    url = f"http://127.0.0.1:{port}/v1"
    log = Path(_output("dir")) / "logs" / f"serve-{port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as fh:
        process = subprocess.Popen(
            [str(SCRIPT), "serve", "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    try:
        wait_until_ready(url, process=process, log=log, timeout=timeout)
        yield LocalLLM(url, model, log)
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def local_llm_server() -> Iterator[LocalLLM]:
    """The local server for a whole test session; skips (with the reason) when it is not built and may not be."""
    try:
        with local_llm() as server:
            yield server
    except LocalLLMUnavailable as exc:
        pytest.skip(str(exc))
