"""Settings: one declaration per setting, typed parsing of the environment, and the README table generated from it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import pytest

from service.cli import main
from service.platform.settings import (
    FILE_SUFFIX,
    REPO_ROOT,
    SettingError,
    Settings,
    SettingsGroup,
    declared_settings,
    get_settings,
    setting,
    settings_table,
)
from service.review import get_review_settings

DEFAULT_SHARED = REPO_ROOT.parent / "shared"


def _attr(settings: Settings, path: str) -> Any:
    value: Any = settings
    for name in path.split("."):
        value = getattr(value, name)
    return value


@pytest.mark.parametrize(
    ("env", "path", "expected"),
    [
        # unset and empty both mean the default
        ({}, "redis.url", "redis://127.0.0.1:6379/0"),
        ({"REDIS_URL": ""}, "redis.url", "redis://127.0.0.1:6379/0"),
        ({"REDIS_URL": "redis://cache:6380/2"}, "redis.url", "redis://cache:6380/2"),
        ({}, "limits.max_candidates", 32),
        ({"TRISK_MAX_CANDIDATES": ""}, "limits.max_candidates", 32),
        ({"TRISK_MAX_CANDIDATES": "7"}, "limits.max_candidates", 7),
        ({"TRISK_MAX_TEXT_CHARS": " 100 "}, "limits.max_text_chars", 100),
        ({"TRISK_RETENTION_SECONDS": "0"}, "redis.retention_seconds", 0),  # 0 is a value, not "unset"
        ({}, "redis.retention_seconds", 2_592_000),
        ({"TRISK_WORKER_NICE": "-5"}, "jobs.worker_nice", -5),
        # floats: an integer text is a float, the type follows the declaration
        ({}, "llm.requests_per_second", 10.0),
        ({"TRISK_LLM_RPS": "2.5"}, "llm.requests_per_second", 2.5),
        ({"TRISK_LLM_TEMPERATURE": "1"}, "llm.temperature", 1.0),
        ({"TRISK_CALLBACK_BACKOFF_SECONDS": "1e-2"}, "jobs.callback_backoff_seconds", 0.01),
        ({"TRISK_LLM_BASE_URL": "http://llm:8080/v1"}, "llm.base_url", "http://llm:8080/v1"),
        ({}, "llm.base_url", ""),
        ({"TRISK_PEER_EMBEDDING_BACKEND": "same"}, "embedding.peer_backend", "same"),
        # the review group is read by the same mechanism
        ({}, "review.lease_seconds", 900),
        ({"TRISK_REVIEW_MAX_CLAIM": "5"}, "review.max_claim_items", 5),
        ({"TRISK_JUDGE_ERROR_MAX_SCORE": "50"}, "review.judge_error_max_score", 50.0),
        ({"TRISK_DB_PATH": "/srv/trisk.db"}, "durable.db_path", "/srv/trisk.db"),
        ({}, "durable.database_url", ""),
        ({"TRISK_DATABASE_URL": "postgresql://db/trisk"}, "durable.database_url", "postgresql://db/trisk"),
        # path defaults: under the checkout, or under the shared folder (itself a setting)
        ({}, "durable.db_path", str(REPO_ROOT / "var" / "trisk.db")),
        ({}, "index.path", str(REPO_ROOT / "var" / "index" / "pli-sutta.trisk")),
        ({}, "risk.models_dir", str(REPO_ROOT / "models")),
        ({}, "index.corpus_dir", str(DEFAULT_SHARED / "corpus" / "bilara")),
        ({"TRISK_SHARED_DIR": ""}, "index.corpus_dir", str(DEFAULT_SHARED / "corpus" / "bilara")),
        ({"TRISK_SHARED_DIR": "/data"}, "index.corpus_dir", "/data/corpus/bilara"),
        ({"TRISK_SHARED_DIR": "/data"}, "index.translation_dir", "/data/corpus/bilara/translation/en/sujato"),
        ({"TRISK_SHARED_DIR": "/data", "TRISK_CORPUS_DIR": "/c"}, "index.corpus_dir", "/c"),
    ],
)
def test_env_parses_to_settings(env: dict[str, str], path: str, expected: object) -> None:
    value = _attr(Settings.from_env(env), path)
    assert value == expected
    assert type(value) is type(expected)


def test_the_model_folders_follow_the_models_dir(tmp_path: Any) -> None:
    risk = Settings.from_env({"TRISK_MODELS_DIR": str(tmp_path)}).risk
    assert (risk.panels_dir, risk.lexicon_dir, risk.critical_dir, risk.embeddings_dir) == tuple(
        tmp_path / name for name in ("panels", "lexicon", "critical", "embeddings")
    )
    # and the shipped panels are where the default points
    assert (Settings.from_env({}).risk.panels_dir / "strong.json").is_file()
    assert Settings.from_env({}).llm.review_budget == 0.20


@pytest.mark.parametrize(
    ("name", "raw", "reason"),
    [
        ("TRISK_MAX_CANDIDATES", "abc", "an integer"),
        ("TRISK_MAX_CANDIDATES", "3.5", "an integer"),
        ("TRISK_RETENTION_SECONDS", "30d", "an integer"),
        ("TRISK_REVIEW_LEASE_SECONDS", "15m", "an integer"),
        ("TRISK_LLM_RPS", "fast", "a number"),
        ("TRISK_LLM_READ_TIMEOUT", "nan", "a finite number"),
        ("TRISK_LLM_READ_TIMEOUT", "inf", "a finite number"),
        ("TRISK_JUDGE_ERROR_MAX_SCORE", "70%", "a number"),
    ],
)
def test_bad_value_names_the_variable(name: str, raw: str, reason: str) -> None:
    with pytest.raises(SettingError) as info:
        Settings.from_env({name: raw})
    assert str(info.value) == f"{name}={raw!r}: expected {reason}"


@dataclass(frozen=True)
class _Flags(SettingsGroup):
    strict: bool = setting("TRISK_TEST_STRICT", False, "a test flag")
    loud: bool = setting("TRISK_TEST_LOUD", True, "another test flag")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("true", True), ("Yes", True), (" on ", True), ("0", False), ("FALSE", False), ("no", False)],
)
def test_bool_settings(raw: str, expected: bool) -> None:
    assert _Flags.from_env({"TRISK_TEST_STRICT": raw}).strict is expected
    assert _Flags.from_env({"TRISK_TEST_LOUD": raw}).loud is expected


def test_bool_defaults_and_bad_bool() -> None:
    assert _Flags.from_env({"TRISK_TEST_STRICT": ""}) == _Flags(strict=False, loud=True)
    with pytest.raises(SettingError, match=r"^TRISK_TEST_STRICT='maybe': expected one of"):
        _Flags.from_env({"TRISK_TEST_STRICT": "maybe"})


def test_a_field_without_a_declaration_is_refused() -> None:
    @dataclass(frozen=True)
    class Loose(SettingsGroup):
        plain: int = 3

    with pytest.raises(TypeError, match=r"Loose\.plain is not declared"):
        Loose.from_env({})


@pytest.mark.parametrize(("default", "annotation"), [(1, "float"), (True, "int"), ("5", "int"), (2.0, "int")])
def test_a_default_of_another_type_is_refused(default: object, annotation: str) -> None:
    namespace: dict[str, Any] = {}
    exec(  # the annotation must be real for the check, so the class is written out per case
        f"@dataclass(frozen=True)\nclass Odd(SettingsGroup):\n    x: {annotation} = setting('TRISK_TEST_X', d, 'm')",
        {"dataclass": dataclass, "SettingsGroup": SettingsGroup, "setting": setting, "d": default},
        namespace,
    )
    with pytest.raises(TypeError, match=r"Odd\.x: default"):
        namespace["Odd"].from_env({})


def test_every_setting_is_declared_once() -> None:
    names = [spec.env for _, spec in declared_settings()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    # every attribute of every group is one declaration (the anchor of the shared folder is not an attribute)
    paths = [path for path, _ in declared_settings()][1:]
    settings = Settings.from_env({})
    assert all(_attr(settings, p) is not None for p in paths)
    assert len(paths) == sum(len(vars(getattr(settings, g))) for g in vars(settings))


def test_get_settings_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRISK_MAX_BATCH_ITEMS", "12")
    monkeypatch.setenv("TRISK_REVIEW_MAX_CLAIM", "3")
    get_settings.cache_clear()
    try:
        assert get_settings().limits.max_batch_items == 12
        assert get_review_settings() is get_settings().review
        assert get_review_settings().max_claim_items == 3
    finally:
        get_settings.cache_clear()


# names in code that are not settings of the service: the test harness's own Redis
# what the tests connect to, and the knobs of the local model server script (a test tool, not the service)
NOT_SETTINGS = {
    "TRISK_TEST_REDIS_URL",
    "TRISK_TEST_POSTGRES_URL",
    "TRISK_TEST_WORKERS",
    "TRISK_BENCH_POSTGRES_URL",
    "TRISK_LOCAL_LLM_BUILD",
    "TRISK_LOCAL_LLM_CTX",
    "TRISK_LOCAL_LLM_DIR",
    "TRISK_LOCAL_LLM_PORT",
    "TRISK_LOCAL_LLM_MODEL",
    "TRISK_LOCAL_LLM_PYTHON",
    "TRISK_LOCAL_LLM_THREADS",
}


def test_every_variable_the_code_names_is_declared() -> None:
    """A message or image that names a variable nobody reads (a rename left behind) fails here."""
    declared = {spec.env for _, spec in declared_settings()}
    files = [*REPO_ROOT.glob("service/**/*.py"), *REPO_ROOT.glob("workers/**/*.py"), *REPO_ROOT.glob("scripts/*.sh")]
    files.append(REPO_ROOT / "Dockerfile")
    named = {
        (m, str(f.relative_to(REPO_ROOT)))
        for f in files
        for m in re.findall(r"\b(?:TRISK_[A-Z0-9_]+|REDIS_URL)\b", f.read_text(encoding="utf-8"))
    }
    assert len(named) > 20  # the scan saw the code
    # <VARIABLE>_FILE: the same setting, read from a file
    declared |= {env + FILE_SUFFIX for env in declared}
    assert sorted((name, where) for name, where in named if name not in declared | NOT_SETTINGS) == []


def _readme_table() -> str:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Configuration (environment, read once)\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return "\n".join(rows) + "\n"


def test_readme_configuration_table_is_generated() -> None:
    assert _readme_table() == settings_table(), "README.md is stale: paste the output of `trisk settings`"


def test_table_has_one_row_per_setting() -> None:
    rows = settings_table().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{spec.env}`" for _, spec in declared_settings()]
    assert "| `TRISK_DB_PATH` | path | `var/trisk.db` |" in settings_table()
    assert "| `TRISK_CORPUS_DIR` | path | `$TRISK_SHARED_DIR/corpus/bilara` |" in settings_table()
    assert "| `TRISK_LLM_BASE_URL` | str | unset |" in settings_table()


def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings"]) == 0
    assert capsys.readouterr().out == settings_table()


def test_cli_names_a_bad_variable(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRISK_MAX_BODY_BYTES", "8MB")
    get_settings.cache_clear()
    try:
        assert main(["settings"]) == 2
    finally:
        get_settings.cache_clear()
    assert capsys.readouterr().err == "trisk: TRISK_MAX_BODY_BYTES='8MB': expected an integer\n"


def test_table_does_not_depend_on_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    # it is compared with README.md in every worktree and in CI, with or without TRISK_SHARED_DIR
    monkeypatch.setenv("TRISK_SHARED_DIR", "/elsewhere")
    assert str(REPO_ROOT) not in settings_table()
    assert "/elsewhere" not in settings_table()


def test_the_test_session_reads_its_own_durable_store() -> None:
    # the durable group sits in the cached process settings: they must have been read after tests/conftest.py
    # pointed TRISK_DB_PATH at a throwaway file and dropped TRISK_DATABASE_URL, or tests would write verdicts into
    # the developer's var/trisk.db or whatever database the shell names
    assert get_settings().durable.db_path == os.environ["TRISK_DB_PATH"]
    assert get_settings().durable.database_url == ""
