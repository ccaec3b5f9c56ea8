"""No credential in any answer or log line: passwords planted in the Redis and PostgreSQL URLs and in the LLM and
embedding keys, then every health route and every error the outage gives, the log lines and ``trisk settings
--current`` searched for them."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform import redact
from service.platform.settings import Settings
from service.platform.telemetry import JsonFormatter, TextFormatter
from service.state.durable import DurableStore, make_engine
from tests.conftest import issue_test_key, keyed

REDIS_PW = "Rp-planted-4c1e9b"
PG_PW = "Pg-planted-77d2aa"
LLM_KEY = "sk-planted-0b5e3f"
EMBED_KEY = "ek-planted-9a8b7c"
PLANTED = (REDIS_PW, PG_PW, LLM_KEY, EMBED_KEY)
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = (ROOT / "openapi" / "examples" / "assessment-an4.1.json").read_text(encoding="utf-8")


def _clean(text: str) -> None:
    for secret in PLANTED:
        assert secret not in text, f"{secret} printed: {text[:400]}"


@pytest.fixture()
def log_text() -> Iterator[io.StringIO]:
    """Every log line of the test, through the service's JSON formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        redact.forget_all()


def _planted(test_settings: Settings) -> Settings:
    return replace(
        test_settings,
        # nothing listens on port 1: Redis is unreachable at once
        redis=replace(test_settings.redis, url=f"redis://:{REDIS_PW}@127.0.0.1:1/0"),
        llm=replace(test_settings.llm, api_key=LLM_KEY),
        embedding=replace(test_settings.embedding, remote_api_key=EMBED_KEY),
    )


def test_nothing_prints_a_planted_credential_when_redis_is_away(
    sn12_index: NoveltyIndex, test_settings: Settings, log_text: io.StringIO
) -> None:
    settings = _planted(test_settings)
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        keyed(tc, issue_test_key(settings))
        bodies = []
        for path in ("/health/live", "/health/ready", "/health/workers", "/v1/workers"):
            r = tc.get(path)
            bodies.append(r.text)
        ready = tc.get("/health/ready").json()
        check = ready["checks"]["redis"]
        assert check["ok"] is False and "redis://:***@127.0.0.1:1/0" in check["detail"], check
        for method, path, body in (
            ("POST", "/v1/assessments", EXAMPLE),
            ("POST", "/v1/batches", '{"items": [' + EXAMPLE + "]}"),
            # reading records and the review queue needs no Redis (they are rows of the store): they answer
        ):
            r = tc.request(method, path, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 503, (path, r.status_code, r.text)
            bodies.append(r.text)
        bodies.append(tc.get("/metrics").text)
        # a library quoting a secret in its own message: masked by value in the problem and the log
        logging.getLogger("some.library").error("connect failed for %s with key %s", settings.redis.url, LLM_KEY)
    for text in bodies:
        _clean(text)
    _clean(log_text.getvalue())
    assert "***" in log_text.getvalue()


def test_nothing_prints_a_planted_credential_when_postgres_is_away(
    sn12_index: NoveltyIndex, test_settings: Settings, log_text: io.StringIO
) -> None:
    settings = _planted(test_settings)
    token = issue_test_key(settings)
    url = sa.make_url(f"postgresql+psycopg://trisk:{PG_PW}@127.0.0.1:1/trisk?connect_timeout=2")
    store = DurableStore(make_engine(url))
    settings = replace(settings, redis=test_settings.redis)
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}, db=store))
    redact.remember_value(PG_PW)  # as remember(settings) registers TRISK_DATABASE_URL's password at start
    try:
        with TestClient(app=app) as tc:
            keyed(tc, token)
            ready = tc.get("/health/ready")
            assert ready.status_code == 503 and ready.json()["checks"]["store"]["ok"] is False, ready.text
            texts = [ready.text]
            for path in ("/v1/keys", "/v1/review/queue", "/v1/calibration/report"):
                r = tc.get(path)
                assert r.status_code == 503, (path, r.text)
                texts.append(r.text)
        for text in texts:
            _clean(text)
        _clean(log_text.getvalue())
    finally:
        store.engine.dispose()


def test_redact_masks_passwords_by_shape_and_secrets_by_value() -> None:
    try:
        assert redact.redact_url("redis://:pw-123456@h:6379/0") == "redis://:***@h:6379/0"
        pg = "postgresql://u:p%40ss@db/x?sslmode=verify-full"
        assert redact.redact_url(pg) == "postgresql://u:***@db/x?sslmode=verify-full"
        assert "secret-val" not in redact.redact_url("https://h/v1?api_key=secret-val&x=1")
        assert redact.redact_url("https://api.example.com/v1") == "https://api.example.com/v1"
        text = "failed: postgresql://trisk:hunter2222@db:5432/x and redis://:abc123xyz@r:6379"
        assert redact.scrub(text) == "failed: postgresql://trisk:***@db:5432/x and redis://:***@r:6379"
        redact.remember_value("sk-live-abcdef")
        assert redact.scrub("Bearer sk-live-abcdef refused") == "Bearer *** refused"
        formatter = TextFormatter()
        record = logging.LogRecord("x", logging.INFO, "f", 1, "key %s", ("sk-live-abcdef",), None)
        assert "sk-live-abcdef" not in formatter.format(record)
    finally:
        redact.forget_all()


def test_settings_current_shows_no_credential(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRISK_") and k != "REDIS_URL"},
        "REDIS_URL": f"redis://:{REDIS_PW}@redis.internal:6379/0",
        "TRISK_DATABASE_URL": f"postgresql://trisk:{PG_PW}@db.internal:5432/trisk",
        "TRISK_LLM_API_KEY": LLM_KEY,
        "TRISK_EMBEDDING_API_KEY": EMBED_KEY,
        "TRISK_SHARED_DIR": str(Path(os.environ.get("TRISK_SHARED_DIR", ROOT.parent / "shared"))),
    }
    res = subprocess.run(
        [sys.executable, "-m", "service.cli", "settings", "--current"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    _clean(res.stdout + res.stderr)
    assert "| `REDIS_URL` | redis://:***@redis.internal:6379/0 |" in res.stdout
    assert "| `TRISK_LLM_API_KEY` | (set) |" in res.stdout
    assert "postgresql://trisk:***@db.internal:5432/trisk" in res.stdout


def test_a_password_file_sets_the_setting_and_a_bad_one_names_only_the_variable(tmp_path: Path) -> None:
    from service.platform.settings import RedisSettings, SettingError

    (tmp_path / "pw").write_text(REDIS_PW + "\n", encoding="utf-8")
    got = RedisSettings.from_env({"REDIS_URL": "redis://r:6379/0", "TRISK_REDIS_PASSWORD_FILE": str(tmp_path / "pw")})
    assert got.url == f"redis://:{REDIS_PW}@r:6379/0"
    # a URL that names its own password keeps it
    own = RedisSettings.from_env({"REDIS_URL": "redis://:mine@r:6379/0", "TRISK_REDIS_PASSWORD": REDIS_PW})
    assert own.url == "redis://:mine@r:6379/0"
    with pytest.raises(SettingError) as info:
        RedisSettings.from_env({"TRISK_REDIS_PASSWORD_FILE": str(tmp_path / "missing")})
    assert "TRISK_REDIS_PASSWORD_FILE" in str(info.value)
