"""The local model server: the helper's refusals and errors (default run), and one real round trip (`make test-llm`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.core.judges.llm import ChatMessage, LLMClient, build_gemba_messages, parse_score
from service.platform.settings import LLMSettings
from tests.fakes.openai_server import closed_port_url
from tests.support.local_llm import SCRIPT, LocalLLM, LocalLLMUnavailable, local_llm, profile_env, wait_until_ready

SOURCE = "Evaṁ me sutaṁ—ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane anāthapiṇḍikassa ārāme."
CANDIDATE = (
    "So I have heard. At one time the Buddha was staying near Sāvatthī in Jeta's Grove, Anāthapiṇḍika's monastery."
)


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture()
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory with no build in it, building not allowed: what a fresh machine's default run sees."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRISK_LOCAL_LLM_DIR", str(cache))
    monkeypatch.delenv("TRISK_LOCAL_LLM_BUILD", raising=False)
    return cache


def test_without_a_build_the_helper_refuses_and_says_how(empty_cache: Path) -> None:
    with pytest.raises(LocalLLMUnavailable, match=r"not built.*TRISK_LOCAL_LLM_BUILD=1"), local_llm():
        pytest.fail("the block must not run without a server")
    assert not empty_cache.exists(), "nothing may be built or written when building is not allowed"


def test_script_without_a_build(empty_cache: Path) -> None:
    assert _script("check").returncode == 1
    assert _script("status").returncode == 3
    for command in ("serve", "start"):
        res = _script(command, "--port", "1")
        assert res.returncode == 1 and "not built" in res.stderr, (command, res.stderr)
    assert _script("url", "--port", "4321").stdout.strip() == "http://127.0.0.1:4321/v1"
    assert _script("dir").stdout.strip() == str(empty_cache)


def test_wait_reports_a_server_that_exits_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as fh:
        process = subprocess.Popen(
            [sys.executable, "-c", "print('invalid opcode marker'); raise SystemExit(7)"], stdout=fh, stderr=fh
        )
    with pytest.raises(RuntimeError, match=r"(?s)exited with code 7.*invalid opcode marker"):
        wait_until_ready(closed_port_url(), process=process, log=log, timeout=30)


def test_wait_gives_up_on_a_server_that_never_answers(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text("loading model marker\n")
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(TimeoutError, match=r"(?s)after 0\.5s.*loading model marker"):
            wait_until_ready(closed_port_url(), process=process, log=log, timeout=0.5)
    finally:
        process.kill()
        process.wait()


# -- against the real server (opt-in: `make test-llm`) ---------------------------------------------------------


def _profile_client(server: LocalLLM) -> LLMClient:
    """The client as a worker of the local profile builds it (README's settings: timeouts, retries, concurrency)."""
    return LLMClient.from_settings(LLMSettings.from_env(profile_env(server.base_url)))


def test_env_prints_the_profile_for_the_port_asked() -> None:
    env = profile_env("http://127.0.0.1:4321/v1")
    assert env["TRISK_LLM_BASE_URL"] == "http://127.0.0.1:4321/v1"
    llm = LLMSettings.from_env(env)
    assert (llm.panel, llm.max_concurrency, llm.requests_per_second) == ("local", 1, 0.0)
    assert llm.read_timeout >= 300 and llm.text_max_tokens == 512  # a Telugu grade of 2,000 prompt tokens finishes


@pytest.mark.local_llm
async def test_a_gemba_prompt_gets_an_answer_through_the_client(local_llm_server: LocalLLM) -> None:
    async with _profile_client(local_llm_server) as client:
        result = await client.chat(
            local_llm_server.endpoint(),
            build_gemba_messages(SOURCE, CANDIDATE),
            temperature=0.0,
            prompt_version="local-llm-smoke",
            max_tokens=8,
        )
    assert result.text is not None
    assert parse_score(result.text, result.finish_reason)[1] is None, result  # the local profile's answer parses
    assert result.model == local_llm_server.model
    assert result.attempts == 1
    # the whole prompt reached the model, and max_tokens bounded the answer
    assert result.usage.prompt_tokens > 150
    assert 1 <= result.usage.completion_tokens <= 8


@pytest.mark.local_llm
async def test_a_tiny_max_tokens_is_a_truncated_answer(local_llm_server: LocalLLM) -> None:
    prompt = [ChatMessage("user", "Write a long story about a monk who walks from village to village.")]
    async with _profile_client(local_llm_server) as client:
        result = await client.chat(
            local_llm_server.endpoint(), prompt, temperature=0.0, prompt_version="local-llm-smoke", max_tokens=2
        )
    assert result.finish_reason == "length"
    assert result.usage.completion_tokens == 2
    # the judge parser records the cut-off answer as truncated, whatever the two tokens were
    assert parse_score(result.text, result.finish_reason) == (None, "truncated")
