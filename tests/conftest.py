"""Shared fixtures: the shared data folder, a small real index, and the API on Litestar's test client."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from service.core.corpus import FilterRules, load_bilara
from service.core.novelty import IndexParams, NoveltyIndex, build_index
from service.platform.settings import SHARED_DIR, DurableSettings, Settings, get_settings
from service.state.durable import DurableStore
from tests.durable_support import (
    ADMIN_URL,
    ENGINES,
    ENGINES_USED,
    TALLY,
    PostgresServer,
    migrated_store,
    pg_settings,
    sqlite_settings,
    tally_line,
    uses_engine,
)
from tests.support.isolation import DEFAULT_REDIS_URL, built_once, redis_test_url, worker_index

# verdicts and fitted models of test runs go to a throwaway database, never the developer's var/trisk.db
os.environ.setdefault("TRISK_DB_PATH", os.path.join(tempfile.mkdtemp(prefix="trisk-test-"), "trisk.db"))
# ...and never to a database server the shell happens to name: PostgreSQL tests make databases of their own
os.environ.pop("TRISK_DATABASE_URL", None)

# the `local_llm_server` fixture (the real local model server of the opt-in `make test-llm` tests)
pytest_plugins = ["tests.support.local_llm"]

# this process's Redis database: the named one, or one below it per pytest-xdist worker (tests/support/isolation.py)
TEST_REDIS_URL = redis_test_url(os.environ.get("TRISK_TEST_REDIS_URL") or DEFAULT_REDIS_URL, worker_index())
# API tests run as a tenant of their own, so nothing they write mixes with another run's data; removed at the end
TEST_TENANT = f"test-{uuid.uuid4().hex[:10]}"
BILARA = SHARED_DIR / "corpus" / "bilara"
PALIBENCH = SHARED_DIR / "palibench-dev"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    assert BILARA.is_dir(), f"the shared data folder is missing: {SHARED_DIR} (set TRISK_SHARED_DIR)"
    return SHARED_DIR


@pytest.fixture(scope="session")
def sn12_index(shared_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> NoveltyIndex:
    """A real index over SN 12-22 (about 1,500 passages, stock formulas and rare passages alike), saved and reloaded;
    built once per run, the xdist workers load the same file."""

    def build(path: Path) -> None:
        passages = []
        for sub in ("sutta/sn/sn12", "sutta/sn/sn22"):
            passages += load_bilara(BILARA, subdir=sub, translation_dir=BILARA / "translation" / "en" / "sujato")
        build_index(passages, params=IndexParams(filters=FilterRules()), name="test-sn12-sn22").save(path)

    return NoveltyIndex.load(built_once(tmp_path_factory, "sn12-sn22.trisk", build))


@pytest.fixture(scope="session")
def test_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings for tests: this process's Redis test db (TEST_REDIS_URL), a queue of this session's own, callbacks
    retried quickly and allowed to reach this machine over http (the test receivers), no rate limits (a test of them
    sets its own)."""
    base = get_settings()
    settings = replace(
        base,
        redis=replace(base.redis, url=TEST_REDIS_URL, queue_name=f"trisk:test:{uuid.uuid4().hex[:8]}:queue"),
        jobs=replace(
            base.jobs,
            callback_max_tries=2,
            callback_backoff_seconds=0.05,
            callback_allow_http=True,
            callback_allow_networks="127.0.0.0/8",
        ),
        # every test client is "testclient": one test's bad keys must not lock the next out (a test of it sets it)
        api=replace(
            base.api,
            rate_per_key=0,
            rate_per_tenant=0,
            auth_failures_per_minute=0,
            auth_failures_per_key=0,
            operator_tenants=TEST_TENANT,
        ),
    )
    yield settings
    # jobs left on this session's queue (e.g. from fuzzing) would never run: drop them with the queue
    import redis

    r = redis.Redis.from_url(TEST_REDIS_URL)
    queue = settings.redis.queue_name
    for job_id in r.zrange(queue, 0, -1):
        r.delete(b"arq:job:" + job_id)
    r.delete(queue)
    # the test tenant's and the other tenants a test makes from its name (f"{TEST_TENANT}-b")
    for key in r.scan_iter(match=f"trisk:t:{TEST_TENANT}*", count=1000):
        r.delete(key)


def issue_test_key(settings: Settings, tenant: str = TEST_TENANT, scopes: tuple[str, ...] = ("admin",)) -> str:
    """A real API key in the durable store the app of these settings reads (the tests' throwaway database)."""
    from service.state.durable import open_store
    from service.state.durable.access import issue_key

    token, _ = issue_key(open_store(settings.durable), tenant, "test", list(scopes))
    return token


def keyed(test_client: Any, token: str) -> Any:
    """Every request of this test client carries the key (the key decides the tenant)."""
    test_client.headers["Authorization"] = f"Bearer {token}"
    return test_client


@pytest.fixture()
def client(sn12_index: NoveltyIndex, test_settings: Settings) -> Iterator[Any]:
    """The API as the test tenant, with an admin key."""
    from litestar.testing import TestClient

    from service.app import create_app
    from service.app.resources import Resources

    resources = Resources(settings=test_settings, indexes={"pli": sn12_index})
    with TestClient(app=create_app(test_settings, resources=resources)) as tc:
        yield keyed(tc, issue_test_key(test_settings))


# -- the durable store on both engines


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The local PostgreSQL server; a test that needs it FAILS (never skips) when it does not answer."""
    server = PostgresServer(ADMIN_URL)
    try:
        server.check()
        yield server
    finally:
        server.close()


@pytest.fixture
def pg(request: pytest.FixtureRequest) -> PostgresServer:
    """The server, for a test that makes databases of its own (counted as a PostgreSQL test even when it fails)."""
    uses_engine(request, "postgresql")
    server: PostgresServer = request.getfixturevalue("postgres")
    return server


@pytest.fixture(scope="session")
def pg_session_database(postgres: PostgresServer) -> DurableSettings:
    """One database for this test session (tests keep apart by tenant), dropped at the end."""
    return pg_settings(postgres.create_database())


@pytest.fixture(params=ENGINES)
def durable_settings(request: pytest.FixtureRequest, tmp_path: Path) -> DurableSettings:
    """The durable store on each engine in turn: a fresh SQLite file, or the session's PostgreSQL database."""
    uses_engine(request, request.param)
    if request.param == "sqlite":
        return sqlite_settings(tmp_path)
    settings: DurableSettings = request.getfixturevalue("pg_session_database")
    return settings


@pytest.fixture
def durable_store(durable_settings: DurableSettings) -> Iterator[DurableStore]:
    with migrated_store(durable_settings) as store:
        yield store


# the engines a test ran on travel on its report: under pytest-xdist the reports, not the workers' memory, reach the
# process that prints the summary
_ENGINES_PROPERTY = "durable_engines"
_IS_XDIST_WORKER = "PYTEST_XDIST_WORKER" in os.environ


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    engines = item.stash.get(ENGINES_USED, set())
    # one count per test: its call, or its setup when that failed (PostgreSQL down) or skipped
    if engines and (report.when == "call" or (report.when == "setup" and not report.passed)):
        # a new list: the report's list is the item's own, shared with its other phases' reports
        report.user_properties = [*report.user_properties, (_ENGINES_PROPERTY, sorted(engines))]
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Counted where the summary is printed: in a serial run this process, under xdist the controller (which sees
    every worker's reports; the workers' own calls are not counted, or each test would count twice)."""
    if _IS_XDIST_WORKER:
        return
    for name, engines in report.user_properties:
        if name == _ENGINES_PROPERTY:
            for engine in engines:
                TALLY[(engine, report.outcome)] += 1


def _long_seconds(item: pytest.Item) -> float:
    """The estimate of ``pytest.mark.long(seconds)`` (its file's time on a quiet two-core machine); 0 unmarked."""
    marker = item.get_closest_marker("long")
    return float(marker.args[0]) if marker is not None else 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under xdist the files marked ``long`` go first, the longest first (scripts/test.sh keeps that order with
    --no-loadscope-reorder): started last, one of them would run alone at the end while the other worker idles. A
    serial run keeps the files' own order."""
    if _IS_XDIST_WORKER:
        items.sort(key=_long_seconds, reverse=True)  # stable: the rest keep their order


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    line = tally_line()
    if line:
        terminalreporter.write_line(line)


# names the tests' callback resolver knows; anything else "does not exist" (no lookup ever leaves this machine)
FAKE_DNS: dict[str, list[str]] = {"localhost": ["127.0.0.1"]}


@pytest.fixture(autouse=True)
def _loopback_resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Callback hosts are resolved by a table (``FAKE_DNS``; a test adds names to it), never by a DNS server: a test
    must not send a lookup, let alone a request, to any address beyond this machine."""
    import ipaddress
    import socket

    from service.platform import callbacks

    table = dict(FAKE_DNS)

    async def resolve(host: str, port: int) -> list[Any]:
        if host in table:
            return [ipaddress.ip_address(a) for a in table[host]]
        try:
            return [ipaddress.ip_address(host)]  # a literal address resolves to itself, as getaddrinfo has it
        except ValueError:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None

    monkeypatch.setattr(callbacks, "_resolve", resolve)
    return table
